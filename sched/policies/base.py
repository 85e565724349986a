"""What a policy is: a small object that decides, never loops (docs/explanation/design.md, "One engine, small policies").

The engine calls ``on_arrival`` / ``on_finish`` / ``on_timer`` to keep the policy's own queues up to
date, then ``schedule`` once per instant. A policy sees the engine only as a
:class:`~schedlab.sched.core.protocol.PolicyEngine` (``sched/core/protocol.py``: every member a policy
may read or call, with its guarantees); it reads a job's fields but never writes those the engine owns.
``tests/test_engine_contract.py`` enforces both.

A policy that decides on job durations reads them through :meth:`Policy.duration`,
:meth:`Policy.remaining`, :meth:`Policy.expected_end` and :meth:`Policy.ends`, and takes
:class:`~schedlab.sched.estimators.params.KnowledgeParams` in its ``Params``: with ``knowledge:
oracle`` (the default) those are the true figures, with ``knowledge: estimate`` an estimator's, and
the true ones are hidden from it (``sched/estimators/knowledge.py``, ``docs/estimates.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from schedlab.sched.estimators.knowledge import ORACLE, UNATTACHED
from schedlab.sched.estimators.params import estimates

if TYPE_CHECKING:
    from schedlab.sched.core.job import Job
    from schedlab.sched.core.protocol import Capability, JobView
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.estimators.knowledge import Estimated, Oracle

# Lyra §7.5 measured 63 s on average to checkpoint, relaunch and restore a preempted job; the
# preemptive baselines (Tiresias, SRTF) pay it on every restart unless a run sets another value.
CHECKPOINT_RESTORE_S = 63.0


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Policy:
    name: ClassVar[str]
    summary: ClassVar[str]
    paper: ClassVar[str]
    simplified: ClassVar[str] = ""  # how this policy differs from its paper, if at all
    Params: ClassVar[type[BaseModel]] = NoParams
    shares_gpus: ClassVar[bool] = False  # needs workloads (model, batch) and a sharing model
    default_preemption_overhead_s: ClassVar[float] = CHECKPOINT_RESTORE_S
    #: stall on every allocation change, the first start included (Pollux: 30 s); 0 for fixed jobs
    default_allocation_stall_s: ClassVar[float] = 0.0
    #: whether a start the placement strategy refuses although enough GPUs are free (``strict-consolidated``)
    #: leaves the job waiting; a policy that assumes any free GPUs will do cannot run under such a strategy
    waits_when_refused: ClassVar[bool] = False
    #: how long a replay of this policy takes relative to a simple queue policy's (a hint only: an
    #: experiment submits its costliest replays first so that they do not start last on the workers)
    relative_cost: ClassVar[float] = 1.0
    #: engine capabilities this policy uses, made afresh for every engine (``sched/core/protocol.py``;
    #: Gimbal: per-worker calibration)
    capabilities: ClassVar[tuple[Callable[[], Capability], ...]] = ()
    #: what of the replay the policy cannot run without (``sched/policy_needs.py``; a sharing
    #: policy needs ``workloads`` besides), checked before any replay
    needs: ClassVar[frozenset[str]] = frozenset()
    #: alternatives, each a set of capabilities that together make the policy's own mechanism act; with
    #: none of them met it decides exactly as ``falls_back_to`` (a warning says so; ``same_as`` cites it)
    uses: ClassVar[tuple[frozenset[str], ...]] = ()
    falls_back_to: ClassVar[str | None] = None
    #: a sharing policy that also runs on jobs without workloads, only packing none of them (Gavel: its
    #: LAS over time slices, as its simulator runs a trace without job types); others need workloads
    runs_without_workloads: ClassVar[bool] = False

    def __init__(self, params: BaseModel | None = None) -> None:
        self.params = params if params is not None else self.Params()
        #: how the policy reads durations (module docstring); a replay attaches an estimator in estimate mode
        self.knowledge: Oracle | Estimated = UNATTACHED if estimates(self.params) else ORACLE

    def use_knowledge(self, knowledge: Estimated) -> None:
        """Read durations through ``knowledge`` from now on (a policy that delegates to others passes it on)."""
        self.knowledge = knowledge

    # ---- durations, as the policy knows them (the truth, or in estimate mode an estimator's) ---------
    def duration(self, job: JobView) -> float:
        """Solo seconds of work ``job`` needs in all (in estimate mode: its estimate at submission)."""
        return self.knowledge.duration(job)

    def remaining(self, engine: PolicyEngine, job: JobView) -> float:
        """Solo seconds of work ``job`` has left now (estimate mode: its estimate minus the work done, >= 0)."""
        return self.knowledge.remaining(engine, job)

    def expected_end(self, engine: PolicyEngine, job: JobView) -> float:
        """When running ``job`` ends at its current rate (inf if it is not running)."""
        return self.knowledge.expected_end(engine, job)

    def ends(self, engine: PolicyEngine):
        """``(expected end, index, job)`` of the running jobs, soonest first (``engine.by_end``)."""
        return self.knowledge.ends(engine)

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        raise NotImplementedError

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        """A running job completed (its GPUs are already free)."""

    def on_timer(self, engine: PolicyEngine, payload: Any) -> None:
        """A timer this policy set has fired."""

    def on_epoch(self, engine: PolicyEngine, job: Job) -> None:
        """A running goodput job began a new epoch (its rate was just recomputed)."""

    def schedule(self, engine: PolicyEngine) -> None:
        raise NotImplementedError

    def for_goodput_jobs(self) -> None:
        """Called before the replay when its jobs are goodput jobs (docs/explanation/pollux.md): a policy with a
        study-specific mode (Tiresias+TunedJobs) switches to it here. Nothing by default."""

    def metrics(self) -> dict[str, float]:
        """The policy's own figures for the replay summary (e.g. LP solve times); none by default."""
        return {}


class PolicyWrapper(Policy):
    """What the engine runs in place of ``inner`` to watch it (``check-policy``'s observer, the testbed's
    recorder): the same name, parameters, engine defaults and capabilities; a hook the wrapper does not
    define is ``inner``'s own (e.g. a pool's ``on_reclaimed``)."""

    #: what the engine reads of the policy it runs, besides its hooks
    ENGINE_READS = ("shares_gpus", "default_preemption_overhead_s", "default_allocation_stall_s",
                    "waits_when_refused", "capabilities")

    def __init__(self, inner: Policy) -> None:
        super().__init__(inner.params)
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        for attr in self.ENGINE_READS:
            setattr(self, attr, getattr(inner, attr))

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

