"""``requested``: the run time the user asked for, what Slurm-style backfilling plans on (EASY, Lifka
1995; Slurm's ``--time``). It is the trace's ``time_limit`` where the job has one (the canonical
table's column; no other supported format carries a limit: the Helios release is Slurm's log without
it, Philly, PAI, ITP and the simulators' traces have none). Elsewhere it is modelled from the truth
with the f-model of Mu'alem and Feitelson (IEEE TPDS 12(6), 2001): the run time times a factor drawn
per job uniformly from [1, 1 + f], f = ``badness`` (default 3, ours: a median over-request of 2.5x,
"several times the real run time"; set it to a site's measured ratio). The factor depends only on
(seed, the job's trace position).

Known limit of the f-model (Tsafrir, JSSPP 2010): real requests cluster on a few round values and on
the queue's maximum, so multiples of the run time carry more information about it (and favour short
jobs more) than real requests do.
"""

from __future__ import annotations

import math

from schedlab.sched.estimators.features import Draws, JobFeatures

STREAM = 2
BADNESS = 3.0


class Requested:
    name = "requested"

    def __init__(self, features: JobFeatures, badness: float | None, seed: int) -> None:
        self.limits, self.truth = features.time_limit, features.duration
        self.badness = BADNESS if badness is None else badness
        self.draws = Draws(seed, STREAM, "uniform")
        #: jobs estimated from the trace's limit / from the f-model (reported in the summary)
        self.from_limit = self.from_model = 0

    def estimate(self, index: int) -> float:
        if self.limits is not None:
            limit = float(self.limits[index])
            if not math.isnan(limit):
                self.from_limit += 1
                return limit
        self.from_model += 1
        return float(self.truth[index]) * (1.0 + self.badness * self.draws[index])

    def observe(self, index: int, duration: float) -> None:
        """Nothing to learn."""

    def figures(self) -> dict[str, float]:
        return {"requested_from_limit": self.from_limit, "requested_from_model": self.from_model}
