"""The engine's two contracts: what a policy may call and read, and how a capability plugs in.

:class:`PolicyEngine` is everything a policy (``sched/policies/``) may touch on the engine it is handed;
``tests/test_engine_contract.py`` fails on a policy that reaches for anything else, that writes a job
field, or that reads one outside :class:`JobView`. :class:`CapabilityHost` is what an engine extension
(a :class:`Capability`: Gimbal's per-worker calibration, Pollux's goodput epochs, Lyra's pools) may use:
settle a job's progress, add a stall, re-compute its rate, and the capacity-driven resizes and
preemptions. The engine (``engine.py``) keeps the
event queue and the loop and implements both; it imports this module, never a capability's, so the
engine core has no import circle (``tests/test_engine_contract.py`` checks that too).

Both are typing Protocols: a policy is type-checked against :class:`PolicyEngine`, and
anything that forwards the same members (Gimbal's view for its base policy) serves as one.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from sortedcontainers import SortedList

    from schedlab.sched.core.calibration import Calibration, Workers
    from schedlab.sched.core.cluster import ClusterState
    from schedlab.sched.core.job import Job
    from schedlab.sched.core.pools import Orchestrator
    from schedlab.sched.models.sharing import SharingModel
    from schedlab.sched.policies.base import Policy


class EngineError(RuntimeError):
    """A policy or a capability asked the engine for something it cannot do (names the policy and job)."""


class PolicyEngine(Protocol):
    """What a policy may read and call (docs/explanation/design.md, "One engine, small policies").

    Reads are views of state the engine owns: a policy never assigns to them, nor to any job field
    (it reads jobs through :class:`JobView`). Every read is O(1) unless its
    docstring says otherwise. The figures computed from true durations (``remaining``,
    ``expected_end``, ``gpus_free_at``, ``by_end``) are hidden from a policy in estimate mode
    (``knowledge: estimate``, ``sched/estimators/knowledge.py``): it reads the ``Policy`` methods instead. Actions change state only through the engine, which keeps progress
    exact (settled before any rate change) and re-schedules the completions they move."""

    # ---- reads -----------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """The current instant (seconds of trace time); constant during one ``schedule`` pass."""

    @property
    def cluster(self) -> ClusterState:
        """The cluster's GPU bookkeeping (free stacks per server, holders per GPU). Read only: GPUs change
        hands through :meth:`start`, :meth:`preempt` and :meth:`resize`."""

    @property
    def running(self) -> Mapping[Job, None]:
        """The running jobs, in the order they (re)started. Iterate a copy if you preempt while iterating."""

    @property
    def sharing(self) -> SharingModel | None:
        """The replay's sharing model (iteration times, memory, the true ξ), or None without one."""

    @property
    def state_version(self) -> int:
        """A counter bumped whenever who-runs-where or any rate changes: equal values mean nothing a
        decision could depend on has changed (a cache key)."""

    @property
    def by_end(self) -> SortedList:
        """``(expected end, index, job)`` of the running jobs, soonest first; built on the first read,
        then kept up to date (replays that never read it do not pay)."""

    @property
    def policy(self) -> Policy:
        """The policy being run (for its name in messages)."""

    @property
    def orchestrator(self) -> Orchestrator | None:
        """Lyra's loaning orchestrator (``sched/core/pools.py``) when the replay has pools, else None."""

    @property
    def calibration(self) -> Calibration | None:
        """The per-worker calibration capability (Gimbal §4: ``track``, ``check``, ``liss_batches``,
        ``worker_times``, ``calibrate``) when the policy declares it (``Policy.capabilities``), else None."""

    def remaining(self, job: Job) -> float:
        """Solo seconds of work ``job`` has left now (exact: integrated to ``now``)."""
        ...

    def attained_service(self, job: Job) -> float:
        """GPU-seconds ``job`` has held GPUs so far, across allocations (Tiresias' attained service)."""
        ...

    def expected_end(self, job: Job) -> float:
        """When running ``job`` ends at its current rate (inf if it is not running)."""
        ...

    def gpus_free_at(self, needed: int) -> float:
        """When ``needed`` more GPUs would be free if running jobs kept their pace and nothing new
        arrived (inf if never); O(running jobs) in the worst case."""
        ...

    def can_share(self, job: Job, partner: Job, mode: str = "timeslice", shares: tuple[float, float] | None = None,
                  accumulation_steps: int = 1) -> bool:
        """Whether ``job`` could physically run beside ``partner`` (memory, and ξ finite). Changes nothing."""
        ...

    def accumulating(self, job: Job, steps: int) -> AbstractContextManager[None]:
        """A context in which a *pending* ``job`` reads as running with ``steps`` accumulation steps (its
        micro-batch), for what-if ξ lookups (Castor Alg. 2); restored on exit."""
        ...

    def version_of(self, job: Job) -> int:
        """An opaque stamp that changes whenever ``job``'s rate changes, it stops or it restarts: a timer
        payload that carries it is stale when the stamps differ."""
        ...

    def stalled(self, job: Job) -> bool:
        """Whether running ``job`` is still paying its restore or allocation stall now (no progress yet)."""
        ...

    def stall_left(self, job: Job) -> float:
        """Seconds of restore or allocation stall running ``job`` has still to pay now (0 when none)."""
        ...

    def worker_view(self, job: Job) -> list[tuple]:
        """``[(gpu, partner, cap, local batch, ξ_w, t_w)]`` of running ``job`` (needs :attr:`calibration`)."""
        ...

    # ---- actions ---------------------------------------------------------------------------------
    def start(self, job: Job, placement: list[tuple[int, int]] | None = None, *, share_gpus: tuple[int, ...] = (),
              mode: str = "timeslice", shares: tuple[float, float] | None = None, accumulation_steps: int = 1,
              num_gpus: int | None = None) -> bool:
        """Start (or restart) ``job``: free GPUs from ``placement`` or the placement strategy, plus
        ``share_gpus`` beside their one holder. False (and nothing changed) if the free part does not fit;
        :class:`EngineError` if the job runs already or the sharing is impossible."""
        ...

    def preempt(self, job: Job, *, lose_progress: bool | None = None) -> None:
        """Stop running ``job`` (progress kept unless it does not checkpoint); it pays the restore
        overhead on restart."""
        ...

    def resize(self, job: Job, num_gpus: int, placement: list[tuple[int, int]] | None = None,
               release: tuple[int, ...] | None = None) -> bool:
        """Grow or shrink running ``job`` (elastic scaling); False if growing does not fit. Stalls the
        job ``allocation_stall_s``."""
        ...

    def set_batch(self, job: Job, global_batch: int) -> None:
        """A goodput job's new global batch (Pollux's adaptive batch size); no stall."""
        ...

    def set_timer(self, at: float, payload: Any = None) -> None:
        """Call ``policy.on_timer(engine, payload)`` at ``max(at, now)``, after the arrivals before it."""
        ...

    def calibrate(self, job: Job, *, shares: dict[int, float] | None = None,
                  batches: dict[int, float] | None = None, stall_s: float = 0.0) -> None:
        """New MPS caps and/or local batches for running ``job`` (Gimbal's LGRR/LISS; needs :attr:`calibration`)."""
        ...


class JobView(Protocol):
    """The job fields a policy may read (``sched/core/job.py`` holds them all); it writes none.

    Trace fields never change during a replay. Run-state fields are the engine's, as of the job's
    last start, stop or rate change: ``remaining`` is exact only at those instants (use
    :meth:`PolicyEngine.remaining` for now). Extension fields are set only for jobs that use the
    capability (goodput jobs; jobs Gimbal calibrates). In estimate mode ``duration``, ``remaining`` (and
    so ``gpu_service``) and ``exclusive_jct_estimate`` of a job not yet ended are hidden from the policy."""

    # trace
    @property
    def job_id(self) -> str: ...
    @property
    def submit_time(self) -> float: ...
    @property
    def duration(self) -> float:
        """Solo seconds of work (nominal seconds for a goodput job; seconds at ``elastic_min`` GPUs for
        a Lyra elastic job)."""
    @property
    def index(self) -> int:
        """Position in the trace: the tie-break everywhere."""
    @property
    def deadline(self) -> float: ...
    @property
    def model(self) -> str | None: ...
    @property
    def batch_size(self) -> float:
        """Per-GPU batch (a goodput job's follows its global batch and GPU count)."""
    @property
    def requested_gpus(self) -> int:
        """GPUs the trace asked for (``num_gpus`` is the current allocation)."""
    @property
    def gpu_service(self) -> float: ...
    @property
    def fungible(self) -> bool: ...
    @property
    def heterogeneous(self) -> bool: ...
    @property
    def checkpoint(self) -> bool | None: ...
    @property
    def elastic_min(self) -> int: ...
    @property
    def elastic_max(self) -> int: ...
    @property
    def scaling_loss(self) -> float: ...
    @property
    def goodput(self) -> GoodputView | None:
        """A goodput job's extension state (its application's model, batch, epoch, placement shape),
        None for a fixed-duration job."""

    # run state (the engine's)
    @property
    def num_gpus(self) -> int: ...
    @property
    def gpus(self) -> tuple[int, ...]: ...
    @property
    def running(self) -> bool: ...
    @property
    def finished(self) -> bool: ...
    @property
    def remaining(self) -> float: ...
    @property
    def start_time(self) -> float: ...
    @property
    def end_time(self) -> float: ...
    @property
    def last_start(self) -> float: ...
    @property
    def last_stop(self) -> float: ...
    @property
    def run_time(self) -> float: ...
    @property
    def preemptions(self) -> int: ...
    @property
    def accumulation_steps(self) -> int: ...
    @property
    def solo_speed(self) -> float: ...
    @property
    def partners(self) -> dict | None: ...
    @property
    def pace(self) -> float: ...
    @property
    def rate(self) -> float:
        """Solo seconds of work done per second now (``solo_speed / pace``, times a goodput job's epoch
        goodput); 0 while queued."""
    @property
    def exclusive_jct_estimate(self) -> float:
        """Castor eq. 24's JCT had the job waited for exclusive GPUs, set when it started shared (NaN else)."""

    # extension states
    @property
    def workers(self) -> Workers | None:
        """Per-worker MPS caps, local batches and ξ of a job Gimbal calibrates (``calibration.Workers``)."""


class GoodputView(Protocol):
    """What a policy may read of a goodput job's ``job.goodput`` (``goodput_rates.GoodputState``); it
    writes none (the batch changes through :meth:`PolicyEngine.set_batch`)."""

    @property
    def model(self) -> Any:
        """The application's goodput model (``sched/models/goodput.py``)."""
    @property
    def progress_scale(self) -> float:
        """Model progress units per nominal second (``total_progress / duration``)."""
    @property
    def global_batch(self) -> int: ...
    @property
    def epoch_start(self) -> float:
        """Model progress at the start of the current epoch."""
    @property
    def placement_shape(self) -> tuple[int, ...]:
        """GPUs per server of the current allocation, largest first."""


class CapabilityHost(Protocol):
    """What a :class:`Capability` may use: the policy's reads, plus the engine's integration steps.

    A capability changes a job's rate only between :meth:`settle` (progress integrated to now at the
    old rate) and :meth:`refresh_rate` (the new rate taken, the completion re-scheduled): that is what
    keeps time exact when something other than the policy changes a job."""

    now: float
    cluster: ClusterState
    sharing: SharingModel | None
    running: Mapping[Job, None]
    #: the job's speed factor on its current GPUs; a capability (pools) may set it when attached
    job_speed: Any

    @property
    def policy(self) -> Policy: ...

    def settle(self, job: Job) -> None:
        """Integrate ``job``'s progress (and its shared time) up to now at its current rate."""
        ...

    def add_stall(self, job: Job, seconds: float) -> None:
        """``job``, settled now, makes no progress for ``seconds`` more (e.g. an MPS cap switch, Gimbal M7)."""
        ...

    def refresh_rate(self, job: Job, force: bool = False) -> None:
        """Re-compute ``job``'s pace and rate and re-schedule its next event (``force``: even if the
        rate is unchanged, e.g. after a stall was added)."""
        ...

    def resize(self, job: Job, num_gpus: int, placement: list[tuple[int, int]] | None = None,
               release: tuple[int, ...] | None = None) -> bool: ...

    def preempt(self, job: Job, *, lose_progress: bool | None = None) -> None: ...

    def expected_end(self, job: Job) -> float: ...

    def last_end(self) -> float:
        """The latest end of a finished job (now before any ended)."""
        ...


class Capability:
    """An engine extension, registered when the engine is built (``Engine(capabilities=…)``, a policy's
    ``Policy.capabilities``, or what the job source needs). Its ``role`` names the engine's hook point:
    ``"calibration"`` (per-worker ξ and pace), ``"goodput"`` (epoch rates), ``"pools"`` (capacity ticks);
    one capability per role. The engine calls the role's hooks only for jobs that carry the capability's
    extension state, so a replay that uses none runs exactly as before."""

    role: ClassVar[str]

    def attach(self, engine: CapabilityHost) -> None:
        """Called once, when the engine is built (before any event)."""
        self.engine = engine


def members(protocol: type) -> frozenset[str]:
    """The public member names a Protocol declares (attributes, properties and methods)."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (Protocol, object) or not getattr(cls, "_is_protocol", False):
            continue
        names.update(getattr(cls, "__annotations__", {}))
        names.update(k for k in vars(cls) if not k.startswith("_"))
    return frozenset(names)


#: what a policy may touch on its engine (see :class:`PolicyEngine`)
POLICY_MEMBERS: frozenset[str] = members(PolicyEngine)
#: the job fields a policy may read (see :class:`JobView`)
JOB_VIEW_MEMBERS: frozenset[str] = members(JobView)
#: the fields of a goodput job's extension state a policy may read (see :class:`GoodputView`)
GOODPUT_VIEW_MEMBERS: frozenset[str] = members(GoodputView)
