"""schedlab.conf"""
