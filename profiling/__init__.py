"""schedlab.profiling"""
