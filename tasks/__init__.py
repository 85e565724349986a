"""schedlab.tasks"""
