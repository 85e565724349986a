"""schedlab: profile GPU training jobs, fit models, replay cluster traces through schedulers."""

__version__ = "0.1.0"
