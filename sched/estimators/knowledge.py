"""What a policy knows of job durations, and the blindfold that keeps it from knowing more.

A duration-reading policy reads durations only through its ``knowledge`` (the ``Policy`` methods
``duration``, ``remaining``, ``expected_end`` and ``ends``, ``sched/policies/base.py``):

- :data:`ORACLE` (``knowledge: oracle``, the default) answers with the truth, exactly the engine's
  figures the policies read before, so every oracle replay is unchanged;
- :class:`Estimated` (``knowledge: estimate``) answers with an estimator's figures: a job's duration
  is its estimate when it was submitted (fixed from then on); its remaining work is that estimate minus
  the work it has done, and never below 0: a job that outlives its estimate reads as just about to end
  (:meth:`Estimated.remaining`); its expected end follows at its current rate.

In estimate mode the engine runs the policy behind :class:`~schedlab.sched.estimators.seam.Informed`,
which blindfolds it while it decides: every job it can reach is a :class:`HiddenJob`, whose
``duration``, ``remaining`` and ``exclusive_jct_estimate`` (and so ``gpu_service``) raise
:class:`TruthHidden`, and its engine is a :class:`BlindEngine`, whose ``remaining``, ``expected_end``,
``gpus_free_at`` and ``by_end`` raise too. The engine's own work inside a policy's call (a start, a
preemption) and :class:`Estimated` read the truth they need with the blindfold lifted. Under
:func:`~schedlab.sched.estimators.seam.truth_poisoned` the blindfolded reads return garbage instead
of raising: a policy that never reads the truth decides the same (``tests/test_estimates.py``).
"""

from __future__ import annotations

import math
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedlab.sched.core.job import Job
from schedlab.sched.core.protocol import POLICY_MEMBERS, EngineError

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import JobView, PolicyEngine
    from schedlab.sched.estimators import Estimator


class Oracle:
    """The true durations: what every policy read before estimates existed."""

    estimated = False

    @staticmethod
    def duration(job: JobView) -> float:
        return job.duration

    @staticmethod
    def remaining(engine: PolicyEngine, job: JobView) -> float:
        return engine.remaining(job)

    @staticmethod
    def expected_end(engine: PolicyEngine, job: JobView) -> float:
        return engine.expected_end(job)

    @staticmethod
    def ends(engine: PolicyEngine):
        return engine.by_end


ORACLE = Oracle()


class Unattached:
    """A policy made with ``knowledge: estimate`` that no replay has given its estimator yet."""

    estimated = True

    def _fail(self, *args: Any) -> float:
        raise EngineError("the policy is in estimate mode (knowledge: estimate) but has no estimator: replay it"
                          " through schedlab.sched.replay.run, or wrap it with"
                          " schedlab.sched.estimators.seam.with_knowledge before building an engine")

    duration = remaining = expected_end = ends = _fail


UNATTACHED = Unattached()

# ---- the blindfold -------------------------------------------------------------------------------

#: the blindfold of the policy deciding now (None: the truth is readable: the engine's own work)
_BLINDFOLD: ContextVar[Blindfold | None] = ContextVar("schedlab_blindfold", default=None)

#: what to read instead of each hidden figure (the error says it)
INSTEAD = {
    "duration": "self.duration(job)", "remaining": "self.remaining(engine, job)",
    "exclusive_jct_estimate": "nothing: it is computed from the true durations",
    "engine.remaining": "self.remaining(engine, job)", "engine.expected_end": "self.expected_end(engine, job)",
    "engine.by_end": "self.ends(engine)", "engine.gpus_free_at": "a walk over self.ends(engine)",
}


class TruthHidden(EngineError):
    """A policy in estimate mode read a true duration (or a figure computed from one)."""


def poison(index: int, salt: int = 0) -> float:
    """A garbage duration for job ``index``: positive, deterministic, unrelated to the truth."""
    return 60.0 * (1 + (index * 2654435761 + salt * 40503) % 10007)


@dataclass(frozen=True)
class Blindfold:
    """What a policy reading a hidden figure gets: :class:`TruthHidden`, or (``poisoned``) garbage."""

    policy: str
    poisoned: bool = False

    def read(self, job: Job, what: str) -> float:
        if self.poisoned:
            return poison(job.index, len(what))
        raise TruthHidden(f"policy {self.policy} read job {job.job_id}'s {what} in estimate mode (knowledge:"
                          f" estimate), where true durations are hidden; read {INSTEAD[what]} instead"
                          " (docs/estimates.md)")


def _gated(field: str) -> property:
    slot = Job.__dict__[field]  # the record's own slot
    get = slot.__get__

    def read(job: Job) -> Any:
        fold = _BLINDFOLD.get()
        return get(job) if fold is None else fold.read(job, field)

    return property(read, slot.__set__, doc=f"the job's {field}: hidden from a policy in estimate mode")


class HiddenJob(Job):
    """A job while a policy in estimate mode can reach it: its true duration, remaining work and the
    figure computed from them read only outside the policy's decisions (the engine's own work)."""

    __slots__ = ()
    duration = _gated("duration")
    remaining = _gated("remaining")
    exclusive_jct_estimate = _gated("exclusive_jct_estimate")


def with_truth(call: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` with the blindfold lifted: the engine's own work, an estimator's inputs."""
    token = _BLINDFOLD.set(None)
    try:
        return call(*args, **kwargs)
    finally:
        _BLINDFOLD.reset(token)


def blindfolded(fold: Blindfold, call: Any, *args: Any) -> Any:
    """``call(*args)`` with ``fold`` on: a policy deciding."""
    token = _BLINDFOLD.set(fold)
    try:
        return call(*args)
    finally:
        _BLINDFOLD.reset(token)


class BlindEngine:
    """The engine as a policy in estimate mode sees it: every :class:`PolicyEngine` member, but the
    figures computed from true durations are hidden, and its actions run with the truth readable."""

    __slots__ = ("_engine",)

    def __init__(self, engine: PolicyEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        if name not in POLICY_MEMBERS:
            raise AttributeError(f"{name!r} is not part of the policy API (sched/core/protocol.py: PolicyEngine)")
        return getattr(self._engine, name)

    def remaining(self, job: Job) -> float:
        fold = _BLINDFOLD.get()
        return self._engine.remaining(job) if fold is None else fold.read(job, "engine.remaining")

    def expected_end(self, job: Job) -> float:
        fold = _BLINDFOLD.get()
        if fold is None:
            return self._engine.expected_end(job)
        return self._engine.now + fold.read(job, "engine.expected_end") if job.running else math.inf

    def gpus_free_at(self, needed: int) -> float:
        fold = _BLINDFOLD.get()
        if fold is None:
            return self._engine.gpus_free_at(needed)
        if not fold.poisoned:
            raise TruthHidden(f"policy {fold.policy} asked the engine when GPUs free (gpus_free_at) in estimate"
                              f" mode, which the true durations decide; use {INSTEAD['engine.gpus_free_at']}")
        return self._engine.now + poison(needed, 1)

    @property
    def by_end(self) -> Any:
        fold = _BLINDFOLD.get()
        if fold is None:
            return self._engine.by_end
        if not fold.poisoned:
            raise TruthHidden(f"policy {fold.policy} read engine.by_end (running jobs by true expected end) in"
                              f" estimate mode; use {INSTEAD['engine.by_end']}")
        now = self._engine.now
        return sorted((now + poison(job.index, 2), job.index, job) for job in self._engine.running)

    @property
    def calibration(self) -> Any:
        """Gimbal's calibration capability: its calls settle and re-rate jobs, the engine's own work."""
        capability = self._engine.calibration
        return None if capability is None else _Lifted(capability)

    # actions: the engine's own work, which reads the true durations it needs
    def start(self, *args: Any, **kwargs: Any) -> bool:
        return with_truth(self._engine.start, *args, **kwargs)

    def preempt(self, *args: Any, **kwargs: Any) -> None:
        return with_truth(self._engine.preempt, *args, **kwargs)

    def resize(self, *args: Any, **kwargs: Any) -> bool:
        return with_truth(self._engine.resize, *args, **kwargs)

    def set_batch(self, *args: Any, **kwargs: Any) -> None:
        return with_truth(self._engine.set_batch, *args, **kwargs)

    def calibrate(self, *args: Any, **kwargs: Any) -> None:
        return with_truth(self._engine.calibrate, *args, **kwargs)


class _Lifted:
    """A capability whose methods run with the truth readable (they are the engine's work)."""

    __slots__ = ("_capability",)

    def __init__(self, capability: Any) -> None:
        self._capability = capability

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._capability, name)
        if callable(value):
            return lambda *args, **kwargs: with_truth(value, *args, **kwargs)
        return value


# ---- estimate mode ----------------------------------------------------------------------------------


class Estimated:
    """Durations as ``estimator`` knows them (module docstring). ``engine`` is the real engine, set by
    the seam before the policy's first decision; :meth:`arrive`, :meth:`finish` and :meth:`forget` are
    the seam's, with the truth readable."""

    estimated = True

    def __init__(self, estimator: Estimator) -> None:
        self.estimator = estimator
        self.engine: Any = None
        self._estimates: dict[int, float] = {}  # jobs in flight: index -> estimate at submission
        self._ends: list | None = None
        self._ends_at: tuple = ()
        self.reads = 0
        self.finished = self.under = 0
        self.log_error = 0.0

    # ---- the seam's
    def arrive(self, job: Job) -> None:
        self._estimates[job.index] = self.estimator.estimate(job.index)

    def finish(self, job: Job) -> None:
        """``job`` has ended: the estimator sees its duration (what a scheduler observes of an ended job)."""
        duration, estimate = job.duration, self._estimates[job.index]
        self.finished += 1
        self.under += estimate < duration
        self.log_error += abs(math.log(estimate / duration))
        self.estimator.observe(job.index, duration)

    def forget(self, job: Job) -> None:
        del self._estimates[job.index]

    def figures(self) -> dict[str, float]:
        """The summary's: how often the policy read a duration, how far the estimates were off."""
        n = max(self.finished, 1)
        out = {"estimate_reads": self.reads, "estimate_log_error": self.log_error / n,
               "estimate_under_fraction": self.under / n}
        out.update(getattr(self.estimator, "figures", dict)())
        return out

    # ---- what a policy reads
    def _estimate(self, job: JobView) -> float:
        estimate = self._estimates.get(job.index)
        if estimate is None:
            raise EngineError(f"job {job.job_id} has no duration estimate: the policy read it before it arrived"
                              " or after it ended")
        return estimate

    def duration(self, job: JobView) -> float:
        """The estimate the job was given when it was submitted."""
        self.reads += 1
        return self._estimate(job)

    def remaining(self, engine: PolicyEngine, job: JobView) -> float:
        """The estimate minus the solo seconds of work done (``estimate - (duration - remaining)``,
        summed as ``remaining + (estimate - duration)``: the oracle's figure exactly when the estimate is
        the truth); 0 once the job outlives its estimate: it reads as just about to end."""
        self.reads += 1
        left = with_truth(self._left, job)
        return left if left > 0.0 else 0.0

    def _left(self, job: Job) -> float:
        return self.engine.remaining(job) + (self._estimate(job) - job.duration)

    def expected_end(self, engine: PolicyEngine, job: JobView) -> float:
        """When the job ends at its current rate if its estimate is right (now once it outlives it;
        inf if it is not running)."""
        self.reads += 1
        return with_truth(self._end, job)

    def _end(self, job: Job) -> float:
        end = self.engine.expected_end(job)
        if end == math.inf:
            return end
        end += (self._estimate(job) - job.duration) / job.rate
        now = self.engine.now
        return end if end > now else now

    def ends(self, engine: PolicyEngine) -> list[tuple[float, int, Job]]:
        """``(expected end, index, job)`` of the running jobs, soonest first (:meth:`expected_end`'s
        ends): ``engine.by_end`` on estimates; made once per instant and state."""
        self.reads += 1
        at = (self.engine.state_version, self.engine.now)
        if self._ends_at != at:
            self._ends = with_truth(lambda: sorted((self._end(job), job.index, job) for job in self.engine.running))
            self._ends_at = at
        return self._ends
