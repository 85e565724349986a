"""Where a replay gives a policy in estimate mode its estimator and blindfold
(``sched/estimators/knowledge.py``): :func:`with_knowledge` wraps it in :class:`Informed`, which the
engine runs in its place. Oracle policies pass through unchanged (their replays are bit-identical)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import pandas as pd

from schedlab.sched.core.job import Job
from schedlab.sched.estimators import make_estimator
from schedlab.sched.estimators.features import JobFeatures
from schedlab.sched.estimators.knowledge import BlindEngine, Blindfold, Estimated, HiddenJob, blindfolded
from schedlab.sched.estimators.params import estimates
from schedlab.sched.policies.base import Policy

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine

#: whether policies wrapped now read garbage, not errors, where the truth is hidden (tests)
_POISONED: ContextVar[bool] = ContextVar("schedlab_truth_poisoned", default=False)
#: the hooks a capability calls on the policy besides the engine's (the pools', ``sched/core/pools.py``)
CAPABILITY_HOOKS = ("choose_reclaim", "on_reclaimed")


class KnowledgeWarning(UserWarning):
    """A policy in estimate mode that read no duration: its estimator changed nothing."""


@contextmanager
def truth_poisoned() -> Iterator[None]:
    """Policies wrapped inside read garbage (``knowledge.poison``) where a true duration is hidden, instead
    of failing: the poisoning test's second run (a policy that never reads the truth decides the same)."""
    token = _POISONED.set(True)
    try:
        yield
    finally:
        _POISONED.reset(token)


def with_knowledge(policy: Policy, table: pd.DataFrame, seed: int) -> Policy:
    """``policy`` as the engine should run it on ``table`` (the job table in the engine's job order:
    ``JobSource.table``): itself with ``knowledge: oracle``, else :class:`Informed` with its estimator
    (``seed``: the replay's, unless the policy's parameters give one)."""
    if not estimates(policy.params):
        return policy
    knowledge = Estimated(make_estimator(policy.params, JobFeatures.of(table), seed))
    policy.use_knowledge(knowledge)
    return Informed(policy, knowledge, _POISONED.get())


class Informed(Policy):
    """``inner`` in estimate mode: each job it is handed becomes a :class:`HiddenJob` from its arrival
    until it ends (then its duration is known, as a scheduler knows an ended job's), the estimator
    learns of arrivals and ends before ``inner`` does, and ``inner`` decides blindfolded, on a
    :class:`BlindEngine`."""

    def __init__(self, inner: Policy, knowledge: Estimated, poisoned: bool = False) -> None:
        super().__init__(inner.params)
        self.inner, self.knowledge = inner, knowledge
        self.name = inner.name  # type: ignore[misc]
        for attr in ("shares_gpus", "default_preemption_overhead_s", "default_allocation_stall_s",
                     "waits_when_refused", "capabilities", "relative_cost"):
            setattr(self, attr, getattr(inner, attr))
        self.fold = Blindfold(inner.name, poisoned)
        self._view: BlindEngine | None = None

    def __getattr__(self, name: str) -> Any:  # the policy's own attributes and capability hooks
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        value = getattr(inner, name)
        if name in CAPABILITY_HOOKS:
            return lambda engine, *args: self._decide(value, engine, *args)
        return value

    def _decide(self, hook: Any, engine: PolicyEngine, *args: Any) -> Any:
        view = self._view
        if view is None or view._engine is not engine:
            view = self._view = BlindEngine(engine)
            self.knowledge.engine = engine
        return blindfolded(self.fold, hook, view, *args)

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        job.__class__ = HiddenJob
        self.knowledge.arrive(job)
        self._decide(self.inner.on_arrival, engine, job)

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        self.knowledge.finish(job)
        job.__class__ = Job
        self._decide(self.inner.on_finish, engine, job)
        self.knowledge.forget(job)

    def on_timer(self, engine: PolicyEngine, payload: Any) -> None:
        self._decide(self.inner.on_timer, engine, payload)

    def on_epoch(self, engine: PolicyEngine, job: Job) -> None:
        self._decide(self.inner.on_epoch, engine, job)

    def schedule(self, engine: PolicyEngine) -> None:
        self._decide(self.inner.schedule, engine)

    def for_goodput_jobs(self) -> None:
        self.inner.for_goodput_jobs()

    def metrics(self) -> dict[str, float]:
        return {**self.inner.metrics(), **self.knowledge.figures()}
