"""Job models: measured data plus interpolation (iteration time, goodput, interference, scaling, load)."""
