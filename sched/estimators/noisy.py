"""``noisy``: the true duration times a log-normal error, ``d exp(sigma z)`` with ``z`` standard normal
drawn per job from ``(seed, the job's trace position)``: a sensitivity knob, not a model of any
scheduler. The error's median is 1 (its mean ``exp(sigma^2 / 2)``); ``sigma = 0`` is the truth
exactly, so a replay under it equals the oracle's job for job."""

from __future__ import annotations

import math

from schedlab.sched.estimators.features import Draws, JobFeatures

STREAM = 1


class Noisy:
    name = "noisy"

    def __init__(self, features: JobFeatures, sigma: float, seed: int) -> None:
        self.truth, self.sigma = features.duration, sigma
        self.draws = Draws(seed, STREAM, "normal")

    def estimate(self, index: int) -> float:
        truth = float(self.truth[index])
        return truth if self.sigma == 0 else truth * math.exp(self.sigma * self.draws[index])

    def observe(self, index: int, duration: float) -> None:
        """Nothing to learn."""
