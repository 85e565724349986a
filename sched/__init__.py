"""schedlab.sched"""
