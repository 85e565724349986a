"""Duration knowledge: what a duration-reading policy knows of each job's length (``docs/estimates.md``).

A policy whose ``Params`` take :class:`~schedlab.sched.estimators.params.KnowledgeParams` runs with
``knowledge: oracle`` (the default: the true durations, every published figure) or ``knowledge:
estimate`` with one of the estimators here, each a small class with ``estimate(index)`` (the job's
duration as known when it is submitted) and ``observe(index, duration)`` (a job has finished):

- ``history`` (:mod:`.history`): per user and job name running means, Helios' QSSF estimator;
- ``requested`` (:mod:`.requested`): the requested time limit, or the f-model's multiple of the truth;
- ``noisy`` (:mod:`.noisy`): the truth times a log-normal error;
- ``learned`` (:mod:`.learned`): xgboost on user, name, GPUs and submit hour, refitted online.

The engine still runs every job for its true duration; the seam (:mod:`.knowledge`, :mod:`.seam`)
makes sure a policy in estimate mode decides on estimates only.
"""

from __future__ import annotations

from typing import Any, Protocol

from schedlab.sched.estimators.features import JobFeatures
from schedlab.sched.estimators.history import History
from schedlab.sched.estimators.learned import Learned
from schedlab.sched.estimators.noisy import Noisy
from schedlab.sched.estimators.requested import Requested


class Estimator(Protocol):
    name: str

    def estimate(self, index: int) -> float:
        """The duration (solo seconds) of the job at trace position ``index``, as known at its submission."""
        ...

    def observe(self, index: int, duration: float) -> None:
        """The job at ``index`` has finished; it ran ``duration`` solo seconds."""
        ...


def make_estimator(params: Any, features: JobFeatures, seed: int) -> Estimator:
    """The estimator ``params`` (a :class:`~schedlab.sched.estimators.params.KnowledgeParams`) names;
    ``seed``: the replay's, unless the params give one."""
    seed = seed if params.seed is None else params.seed
    name = params.estimator
    if name == "history":
        return History(features, params.prior_s)
    if name == "requested":
        return Requested(features, params.badness, seed)
    if name == "noisy":
        return Noisy(features, params.sigma, seed)
    if name == "learned":
        return Learned(features, seed, params.prior_s, params.refit_every, params.train_window)
    raise ValueError(f"unknown estimator {name!r}")
