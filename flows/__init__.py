"""schedlab.flows"""
