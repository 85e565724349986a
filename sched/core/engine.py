"""The discrete-event engine: the one place that owns time (docs/explanation/design.md, "One engine, small policies").

Events are arrivals (read in order from the sorted trace), completions and policy timers (a heap).
All events at one instant are applied, then the policy is asked once to decide. Progress is exact:
a running job's remaining work is integrated only when its rate changes (start, preemption, a
partner arriving or leaving), and its completion event is re-computed then; a stale completion
carries an old ``version`` and is ignored. Nothing scans all GPUs or all jobs per event.

Rates (docs/explanation/design.md, "Exact, event-driven time"): work is in solo seconds, so a job alone runs at
``solo_speed`` (1, or less with gradient accumulation). Beside partners it runs at
``solo_speed / pace``, where ``pace`` is the largest ξ over its GPUs: a multi-GPU job whose GPUs
have different partners runs at its slowest worker's pace (Gimbal §2.2). At most two jobs share a
GPU (Castor eq. 7), and only if both fit in its memory.

Elastic and goodput jobs (docs/explanation/design.md, "What the engine models"; docs/explanation/pollux.md): ``resize`` changes a
running job's GPUs and ``set_batch`` its global batch; every allocation change, the first start
included, stalls the job for ``allocation_stall_s`` (Pollux charges 30 s; a figure, or a table by the
GPU count it starts or resizes to, ``sched/core/restore.py``) while it holds its GPUs. A
goodput job's work is still counted in nominal seconds (its run time alone at the trace's GPU count
and batch), but its rate comes from its goodput model: goodput on its current placement, batch and
epoch over its nominal goodput. Epoch boundaries are events where that rate is recomputed (and the
policy's ``on_epoch`` is called); a fixed-duration job has none, so its replay is exactly as before.

Pools (docs/explanation/lyra.md; ``sched/core/pools.py``): with an ``orchestrator`` the cluster is a
:class:`~schedlab.sched.core.pools.PooledCluster` whose capacity changes at the orchestrator's timer
events (inference servers lent to training and taken back); without one nothing here changes.

Contracts (``sched/core/protocol.py``): a policy sees the engine only as a
:class:`~schedlab.sched.core.protocol.PolicyEngine`; calibration (``calibration.py``), goodput epochs
(``goodput_rates.py``) and pools (``pools.py``) are :class:`~schedlab.sched.core.protocol.Capability`
objects registered at construction, which reach the engine only as a
:class:`~schedlab.sched.core.protocol.CapabilityHost`. This module imports no capability.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from sortedcontainers import SortedList
from tqdm import tqdm

from schedlab.sched.core.cluster import ClusterState
from schedlab.sched.core.job import Job, JobSource, job_capabilities
from schedlab.sched.core.protocol import Capability, EngineError
from schedlab.sched.core.restore import RestoreTable
from schedlab.sched.traces.jobtable import JobRecords
from schedlab.sched.core.placement import DEFAULT, check_policy, get_strategy

if TYPE_CHECKING:
    from schedlab.sched.core.calibration import Calibration
    from schedlab.sched.core.goodput_rates import GoodputRates
    from schedlab.sched.core.pools import Orchestrator
    from schedlab.sched.models.sharing import SharingModel
    from schedlab.sched.policies.base import Policy

__all__ = ["Engine", "EngineError", "EngineResult"]

_COMPLETION = 0
_TIMER = 1
_CAPACITY = 2  # the loaning orchestrator's period (sched/core/pools.py)
# Pending events are split by time: a heap of those before ``_horizon`` and, beyond it, unsorted lists
# per ``_BUCKET_S`` of time, heapified when the clock reaches them. Pops come in the same (time, seq)
# order as from one heap, but the heap stays small (far-off timers, e.g. Tiresias' promotions, and
# stale completions wait in the lists).
_BUCKET_S = 3600.0
# A streamed replay (jobs from a JobSource) makes job records this many at a time, as they arrive,
# and stores finished jobs' figures this many at a time
_BATCH = 4096


@dataclass
class EngineResult:
    jobs: list[Job] | None  # None when the engine streamed its jobs from a JobSource (see records)
    busy_gpu_seconds: float
    total_gpus: int
    first_submit: float
    last_end: float
    utilization_timeline: list[tuple[float, int]]  # (time, GPUs in use) at every change
    scheduling_passes: int
    shared_gpu_seconds: float = 0.0  # GPU-seconds with two jobs on the GPU
    occupancy: list[tuple[Job, float, float, tuple[int, ...], int]] | None = None  # see Engine(record_occupancy)
    pools: Any = None  # the Orchestrator of a replay with loaning (its figures: sched/core/pools.py)
    records: JobRecords | None = None  # every job's figures, in job order (sched/results/metrics.py's job table)


class Engine:
    def __init__(
        self,
        jobs: list[Job] | JobSource,
        cluster: ClusterState,
        policy: Policy,
        placement: str = DEFAULT,
        preemption_overhead_s: float | RestoreTable | None = None,
        seed: int = 0,
        progress: bool | Callable[[int, int], None] = False,
        sharing: SharingModel | None = None,
        allocation_stall_s: float | RestoreTable | None = None,
        record_occupancy: bool = False,
        orchestrator: Orchestrator | None = None,
        job_speed: Callable[[Job], float] | None = None,
        capabilities: Sequence[Capability] = (),
        stall_at_shared_pace: bool = False,
    ) -> None:
        """``record_occupancy`` keeps every stint of a job on a fixed set of GPUs as ``(job, from, to,
        GPUs, accumulation steps)`` in the result's ``occupancy`` (for per-GPU metrics such as the SM
        activity distribution, Castor Fig. 9c/12c); off by default, so other replays pay nothing.

        ``jobs``: a list of job records, or a :class:`~schedlab.sched.core.job.JobSource` (what ``replay``
        gives): then the engine makes each record shortly before the job arrives and, once it ends,
        keeps only its figures (``EngineResult.records``), so memory grows with the jobs in flight,
        not with the trace; ``jobs`` stays the source, ``EngineResult.jobs`` is None.

        ``capabilities``: engine extensions (``sched/core/protocol.py``); with them come the policy's
        (``Policy.capabilities``, classes made here), the jobs' (goodput epochs when they have goodput
        models) and ``orchestrator`` (the pools). One per role.

        ``stall_at_shared_pace``: a start (or restart) beside a running job stalls ξ times as long: its
        start-up competes with its partner for the device, as a process starting on a CPU core that
        runs another does (the CPU testbed's devices; a GPU job's start-up runs on the host)."""
        if isinstance(jobs, JobSource):
            gpus = jobs.table["num_gpus"].to_numpy()
            oversize = np.flatnonzero(gpus > cluster.total_gpus)
            first = jobs.make(int(oversize[0]), int(oversize[0]) + 1)[0] if len(oversize) else None
        else:
            over = [j for j in jobs if j.num_gpus > cluster.total_gpus]
            oversize, first = over, over[0] if over else None
        if first is not None:
            raise EngineError(
                f"job {first.job_id} needs {first.num_gpus} GPUs but the cluster has"
                f" {cluster.total_gpus} ({len(oversize)} such jobs); load the trace with on_oversize=drop or clip"
            )
        self.jobs = jobs
        self._finished: list[Job] | None = None  # finished jobs whose figures are not stored yet (streamed)
        self._records: JobRecords | None = None
        self.cluster = cluster
        self.policy = policy
        try:
            check_policy(placement, policy.name, policy.waits_when_refused)
        except ValueError as err:
            raise EngineError(str(err)) from None
        self.place = get_strategy(placement)
        #: restore seconds on every restart, or by the restarting GPU count (``sched/core/restore.py``)
        self.preemption_overhead_s = (
            policy.default_preemption_overhead_s if preemption_overhead_s is None else preemption_overhead_s
        )
        self._restore_by_gpus = (self.preemption_overhead_s.seconds
                                 if isinstance(self.preemption_overhead_s, RestoreTable) else None)
        #: stall seconds at every start and resize, or by the job's GPU count then (the same table form)
        self.allocation_stall_s = (
            policy.default_allocation_stall_s if allocation_stall_s is None else allocation_stall_s
        )
        self._stall_by_gpus = (self.allocation_stall_s.seconds
                               if isinstance(self.allocation_stall_s, RestoreTable) else None)
        self.stall_at_shared_pace = stall_at_shared_pace
        self.rng = random.Random(seed)
        self.progress = progress
        self.sharing = sharing
        self.now = 0.0
        self.running: dict[Job, None] = {}  # insertion-ordered set of running jobs
        self._by_end: SortedList | None = None  # see by_end: built on first read, then kept
        self.state_version = 0  # bumped whenever who-runs-where or any rate changes
        self._heap: list[tuple[float, int, int, Any, int]] = []  # events before _horizon
        self._horizon = -math.inf
        self._later: dict[float, list[tuple[float, int, int, Any, int]]] = {}  # bucket -> events in it
        self._later_buckets: list[float] = []  # heap of the keys of _later
        self._seq = 0
        self._busy_gpu_seconds = 0.0
        self._shared_gpu_seconds = 0.0
        self._timeline: list[tuple[float, int]] = []
        self._occupancy: list[tuple[Job, float, float, tuple[int, ...], int]] | None = [] if record_occupancy else None
        self._held_since: dict[Job, float] = {}
        #: a job's speed factor on its current GPUs (GPU type, elastic scaling), applied at start and
        #: resize; None (the default) costs nothing
        self.job_speed = job_speed
        registered: dict[str, Capability] = {}
        extra = [orchestrator] if orchestrator is not None else []
        for capability in [*capabilities, *(make() for make in policy.capabilities), *job_capabilities(jobs), *extra]:
            if capability.role in registered:
                raise EngineError(f"two {capability.role} capabilities:"
                                  f" {registered[capability.role]!r} and {capability!r}")
            registered[capability.role] = capability
        self.capabilities = registered
        #: the per-worker calibration capability (Gimbal), None unless registered
        self.calibration: Calibration | None = registered.get("calibration")  # type: ignore[assignment]
        self._goodput: GoodputRates | None = registered.get("goodput")  # type: ignore[assignment]
        self.orchestrator: Orchestrator | None = registered.get("pools")  # type: ignore[assignment]
        for capability in registered.values():
            capability.attach(self)

    # ---- policy API --------------------------------------------------------------------------
    def start(
        self,
        job: Job,
        placement: list[tuple[int, int]] | None = None,
        *,
        share_gpus: tuple[int, ...] = (),
        mode: str = "timeslice",
        shares: tuple[float, float] | None = None,
        accumulation_steps: int = 1,
        num_gpus: int | None = None,
    ) -> bool:
        """Start (or restart) ``job``: ``share_gpus`` (GPUs holding exactly one job) beside their
        holders, the rest on free GPUs chosen by ``placement`` or the placement strategy. An elastic
        policy may give the job ``num_gpus`` other than its current count. Returns False (and changes
        nothing) if the free part does not fit."""
        if job.gpus or job.end_time == job.end_time:  # running, or finished (end_time not NaN)
            raise EngineError(f"policy {self.policy.name} started job {job.job_id} which is already running or done")
        gpus = job.num_gpus  # checked against the cluster when the engine was built
        if num_gpus is not None:
            if not 1 <= num_gpus <= self.cluster.total_gpus:
                raise EngineError(f"policy {self.policy.name} started job {job.job_id} on {num_gpus} GPUs")
            gpus = num_gpus
        free_needed = gpus - len(share_gpus) if share_gpus else gpus
        if placement is None and free_needed > 0:
            placement = self.place(self.cluster, free_needed, self.rng)
            if placement is None:
                return False
        if gpus != job.num_gpus:
            self._set_gpu_count(job, gpus)
        if accumulation_steps > 1 and self.sharing is None:
            raise EngineError(f"job {job.job_id}: gradient accumulation needs a sharing model (iteration times)")
        job.accumulation_steps = accumulation_steps  # before the checks: ξ depends on the micro-batch
        pairs = self._check_sharing(job, share_gpus, mode, shares, accumulation_steps) if share_gpus else None
        if pairs:  # Castor eq. 24's t_solo-location: pending until enough GPUs were released, then alone
            released = self.gpus_free_at(job.num_gpus - self.cluster.free_gpus)
            job.exclusive_jct_estimate = released + job.remaining - job.submit_time
        job.solo_speed = self.sharing.accumulation_speed(job, accumulation_steps) if accumulation_steps > 1 else 1.0
        free_part = self.cluster.take_from_servers(placement, job) if free_needed > 0 else ()
        if len(free_part) != free_needed:
            raise EngineError(f"placement gave job {job.job_id} {len(free_part)} free GPUs, it needs {free_needed}")
        if job.start_time != job.start_time:  # NaN: the first start
            job.start_time = self.now
            job.overhead_left = self._allocation_stall(job.num_gpus)  # Pollux: the first start is one too
        else:
            by_gpus = self._restore_by_gpus  # restore from checkpoint
            job.overhead_left = self.preemption_overhead_s if by_gpus is None else by_gpus(job.num_gpus)
        job.gpus = free_part + tuple(share_gpus) if share_gpus else free_part
        if self.job_speed is not None:
            job.speed_factor = self.job_speed(job)
            job.solo_speed *= job.speed_factor
        if self._occupancy is not None:
            self._held_since[job] = self.now
        if job.goodput is not None:
            self._goodput.on_allocation(job)
        job.last_start = self.now
        self.running[job] = None
        if job.workers is not None:  # tracked by Gimbal: per-GPU caps, batches and ξ (docs/explanation/gimbal.md)
            self._calibrating(job).on_start(job)
        if pairs:
            self._join_partners(job, share_gpus, pairs)
        if job.workers is not None and pairs:  # alone, on_start's ξ (1 on every GPU) is what a refresh gives
            self.calibration.on_partners_changed(job)
        if pairs and self.stall_at_shared_pace:
            job.overhead_left *= max(xi for _, xi in job.partners.values())
        self._refresh_rate(job)
        return True

    def _allocation_stall(self, gpus: int) -> float:
        """The stall of a start or resize to ``gpus`` GPUs: the figure, or the table's for that count."""
        by_gpus = self._stall_by_gpus
        return self.allocation_stall_s if by_gpus is None else by_gpus(gpus)

    def preempt(self, job: Job, *, lose_progress: bool | None = None) -> None:
        """Stop ``job``; it pays the restore overhead on restart. It keeps its progress (checkpointed)
        unless ``lose_progress`` (default: the job's ``checkpoint`` is False), then it restarts from
        zero (Lyra §4: a job without checkpoint loses all its progress)."""
        if not job.gpus:  # not running
            raise EngineError(f"policy {self.policy.name} preempted job {job.job_id} which is not running")
        self._settle(job)
        if job.checkpoint is False if lose_progress is None else lose_progress:
            if job.goodput is not None:
                raise EngineError(f"job {job.job_id}: a goodput job cannot lose its progress")
            job.lost_work_s += job.duration - job.remaining
            job.remaining = job.duration
            job.preemptions_lost += 1
        self._stop(job)
        job.rate = 0.0
        job.pace = 1.0
        job.version += 1
        job.preemptions += 1
        job.last_stop = self.now

    def resize(
        self,
        job: Job,
        num_gpus: int,
        placement: list[tuple[int, int]] | None = None,
        release: tuple[int, ...] | None = None,
    ) -> bool:
        """Grow or shrink running ``job`` to ``num_gpus`` GPUs (elastic scaling: Pollux, Optimus, AFS).

        Growing takes the extra GPUs from ``placement`` (``(server, n)`` pairs) or, by default, first
        from servers the job already uses, then by the placement strategy; returns False (and changes
        nothing) if they are not free. Shrinking releases ``release`` (GPU ids of the job) or, by
        default, GPUs on the servers where the job holds the fewest. Progress is settled first and the
        job stalls for ``allocation_stall_s`` (its GPUs stay held). A job beside a partner cannot resize."""
        if not job.running:
            raise EngineError(f"policy {self.policy.name} resized job {job.job_id} which is not running")
        if job.partners:
            raise EngineError(f"policy {self.policy.name} resized job {job.job_id} which shares GPUs")
        if num_gpus < 1:
            raise EngineError(f"policy {self.policy.name} resized job {job.job_id} to {num_gpus} GPUs")
        delta = num_gpus - job.num_gpus
        if delta == 0:
            return True
        if delta > 0:
            placement = placement if placement is not None else self._grow_placement(job, delta)
            if placement is None or sum(n for _, n in placement) != delta:
                return False
            if any(n > len(self.cluster.free_by_server[server]) for server, n in placement):
                return False
            self._settle(job)
            self._close_stint(job)
            job.gpus = job.gpus + self.cluster.take_from_servers(placement, job)
        else:
            gone = release if release is not None else self._shrink_choice(job, -delta)
            if len(gone) != -delta or not set(gone) <= set(job.gpus):
                raise EngineError(f"job {job.job_id}: cannot release {gone} from {job.gpus}")
            self._settle(job)
            self._close_stint(job)
            self.cluster.release(job, gone)
            dropped = set(gone)
            job.gpus = tuple(g for g in job.gpus if g not in dropped)
        self._set_gpu_count(job, num_gpus, running=True)
        job.resizes += 1
        job.overhead_left = self._allocation_stall(num_gpus)
        if self.job_speed is not None:
            factor = self.job_speed(job)
            job.solo_speed *= factor / job.speed_factor
            job.speed_factor = factor
        if job.goodput is not None:
            self._goodput.on_allocation(job)
        self._refresh_rate(job, force=True)
        return True

    def set_batch(self, job: Job, global_batch: int) -> None:
        """Give goodput job ``job`` another global batch (Pollux's adaptive batch size); no stall."""
        if job.goodput is None:
            raise EngineError(f"policy {self.policy.name} set the batch of job {job.job_id}, which has no goodput model")
        if global_batch == job.goodput.global_batch:
            return
        if job.running:
            self._settle(job)
        job.goodput.global_batch = global_batch
        if job.running:
            self._refresh_rate(job, force=True)

    def remaining(self, job: Job) -> float:
        """Solo seconds of work ``job`` has left now."""
        if not job.running:
            return job.remaining
        elapsed = self.now - job.last_update
        progress_time = max(0.0, elapsed - job.overhead_left)
        return max(0.0, job.remaining - progress_time * job.rate)

    def attained_service(self, job: Job) -> float:
        """GPU-seconds the job has held GPUs so far (Tiresias' attained service)."""
        current = self.now - job.last_start if job.gpus else 0.0  # running
        return job.num_gpus * (job.run_time + current) + job.service_correction

    def expected_end(self, job: Job) -> float:
        """When a running job will finish at its current rate."""
        return self._completion_time(job) if job.running else math.inf

    def can_share(self, job: Job, partner: Job, mode: str = "timeslice", shares=None, accumulation_steps: int = 1) -> bool:
        """Whether ``job`` could physically run beside ``partner``: both fit in one GPU's memory and
        the (true) interference source does not say they cannot co-run (ξ = inf)."""
        if self.sharing is None or not self.sharing.fits_together(job, partner, accumulation_steps):
            return False
        saved, job.accumulation_steps = job.accumulation_steps, accumulation_steps
        try:
            return all(math.isfinite(x) for x in self.sharing.ratio(job, partner, mode, shares))
        finally:
            job.accumulation_steps = saved

    @property
    def by_end(self) -> SortedList:
        """``(expected end, index, job)`` of the running jobs, soonest first. Built on the first read and
        kept up to date from then on, so replays whose policy never reads it do not pay for it."""
        if self._by_end is None:
            self._by_end = SortedList(job.end_key for job in self.running)
        return self._by_end

    def gpus_free_at(self, needed: int) -> float:
        """When ``needed`` more GPUs would be free if running jobs kept their pace and nothing new
        arrived: a GPU frees when its last holder ends. Walks running jobs soonest-ending first."""
        if needed <= 0:
            return self.now
        freed = 0
        ended: set[Job] = set()
        for end, _, job in self.by_end:
            freed += job.num_gpus
            if job.partners:  # a shared GPU frees only when the later of its two holders ends
                freed -= sum(count for partner, (count, _) in job.partners.items() if partner not in ended)
            ended.add(job)
            if freed >= needed:
                return end
        return math.inf

    def calibrate(self, job: Job, *, shares: dict[int, float] | None = None,
                  batches: dict[int, float] | None = None, stall_s: float = 0.0) -> None:
        """Change running ``job``'s per-GPU MPS caps and/or local batches (Gimbal's LGRR and LISS,
        ``sched/core/calibration.py``); its partners' ξ follow, ``stall_s`` stalls the job (3.6 s per LGRR switch)."""
        self._calibrating(job).calibrate(job, shares, batches, stall_s)

    def worker_view(self, job: Job) -> list[tuple]:
        """``[(gpu, partner, cap, local batch, ξ_w, t_w)]`` of running ``job`` (Gimbal's runtime monitor)."""
        return self._calibrating(job).worker_view(job)

    def stalled(self, job: Job) -> bool:
        """Whether running ``job`` is still paying its restore or allocation stall now."""
        return self.now - job.last_update <= job.overhead_left

    def stall_left(self, job: Job) -> float:
        """Seconds of restore or allocation stall running ``job`` has still to pay now (0 when none)."""
        left = job.last_update + job.overhead_left - self.now
        return left if left > 0.0 else 0.0

    def version_of(self, job: Job) -> int:
        """An opaque stamp that changes whenever ``job``'s rate changes, it stops or restarts."""
        return job.version

    @contextmanager
    def accumulating(self, job: Job, steps: int) -> Iterator[None]:
        """Pending ``job`` reads as running with ``steps`` accumulation steps inside the block (what-if ξ)."""
        if job.gpus:
            raise EngineError(f"policy {self.policy.name}: accumulating() is for pending jobs; job {job.job_id} runs")
        saved, job.accumulation_steps = job.accumulation_steps, steps
        try:
            yield
        finally:
            job.accumulation_steps = saved

    def set_timer(self, at: float, payload: Any = None) -> None:
        """Call ``policy.on_timer(engine, payload)`` at time ``at`` (>= now)."""
        now = self.now
        self._seq += 1
        self._enqueue((now if now > at else at, self._seq, _TIMER, payload, 0))  # noqa: FURB136 (max(at, now))

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> EngineResult:
        source = self.jobs if isinstance(self.jobs, JobSource) else None
        if source is None:
            arrivals, n = self.jobs, len(self.jobs)
        else:  # streamed: arrivals is the next batch of records, ``offset`` the index of its first
            n = len(source)
            arrivals = source.make(0, min(_BATCH, n))
            self._records = JobRecords(source.static(), pools=self.orchestrator is not None)
            self._finished = []
        offset, m = 0, len(arrivals)
        heap = self._heap
        policy = self.policy
        i = 0
        passes = 0
        done = 0
        # True: a progress bar; a callable: called with (jobs done, jobs) instead, e.g. by a Dask worker
        bar = tqdm(total=n, unit="job", disable=self.progress is not True, mininterval=0.5, leave=False)
        reported = 0
        if n:
            self.now = first_submit = arrivals[0].submit_time
        orchestrator = self.orchestrator
        if orchestrator is not None and n:
            self._push_tick(self.now)  # the first tick sets the capacity at the start
        heappop = heapq.heappop
        on_timer, on_arrival, schedule = policy.on_timer, policy.on_arrival, policy.schedule
        cluster, timeline, inf = self.cluster, self._timeline, math.inf
        busy_s, shared_s, last = self._busy_gpu_seconds, self._shared_gpu_seconds, self.now  # kept here
        while True:
            if not heap:
                if self._later_buckets:
                    self._next_bucket()
                    heap = self._heap
                elif i >= m:
                    break
            next_arrival = arrivals[i].submit_time if i < m else inf
            now = heap[0][0] if heap and heap[0][0] < next_arrival else next_arrival
            elapsed = now - last  # advance the clock: GPU-seconds busy and shared since the last event
            busy_s += elapsed * (cluster.total_gpus - cluster.free_gpus)
            shared_s += elapsed * cluster.double_gpus
            last = self.now = now
            changed = False
            while heap and heap[0][0] <= now:
                _, _, kind, obj, version = heappop(heap)
                if kind == _COMPLETION:
                    if obj.version == version and obj.gpus:  # current, and the job still runs
                        if obj.goodput is not None and self._goodput.mid_run(obj):
                            self._goodput.next_epoch(obj)
                        else:
                            self._complete(obj)
                            done += 1
                            changed = True
                elif kind == _TIMER:
                    on_timer(self, obj)
                    changed = True
                elif done < n:  # _CAPACITY: lend or reclaim inference servers, then schedule
                    if orchestrator.tick(self):  # capacity changed
                        changed = True
                    if orchestrator.keep_ticking(self, i < m):
                        self._push_tick(orchestrator.next_tick(now))
            while i < m and arrivals[i].submit_time <= now:
                on_arrival(self, arrivals[i])
                i += 1
                changed = True
                if i == m and offset + m < n:  # the next batch of a streamed replay
                    offset += m
                    arrivals = source.make(offset, min(offset + _BATCH, n))
                    i, m = 0, len(arrivals)
            if changed:
                schedule(self)
                passes += 1
                busy = cluster.total_gpus - cluster.free_gpus  # _record_utilization(), inline
                if not timeline or timeline[-1][1] != busy:
                    timeline.append((now, busy))
            if self.progress and done - reported >= 1000:
                bar.update(done - reported)
                reported = done
                if callable(self.progress):
                    self.progress(done, n)
        bar.close()
        self._busy_gpu_seconds, self._shared_gpu_seconds = busy_s, shared_s
        if source is None:
            unfinished = [j for j in arrivals if not j.finished]
            count, j = len(unfinished), unfinished[0] if unfinished else None
        else:
            self._store_finished()
            left = np.flatnonzero(np.isnan(self._records.columns["end_time"]))
            count, j = len(left), source.make(int(left[0]), int(left[0]) + 1)[0] if len(left) else None
        if count:
            raise EngineError(
                f"policy {policy.name} left {count} job(s) unfinished with no event pending"
                f" (e.g. job {j.job_id}, {j.num_gpus} GPUs, on a {self.cluster.total_gpus}-GPU cluster)"
            )
        if source is None:
            self._records = JobRecords.for_jobs(arrivals, pools=self.orchestrator is not None)
        return EngineResult(
            jobs=arrivals if source is None else None,
            busy_gpu_seconds=self._busy_gpu_seconds,
            total_gpus=self.cluster.total_gpus,
            first_submit=first_submit if n else 0.0,
            last_end=self.last_end() if n else 0.0,
            utilization_timeline=self._timeline,
            scheduling_passes=passes,
            shared_gpu_seconds=self._shared_gpu_seconds,
            occupancy=self._occupancy,
            pools=orchestrator.finish(self) if orchestrator is not None else None,
            records=self._records,
        )

    def last_end(self) -> float:
        """The latest end of a finished job (now, before any job has ended)."""
        if self._finished is None:
            return max((j.end_time for j in self.jobs if j.finished), default=self.now)
        self._store_finished()
        end = self._records.last_end()
        return self.now if end is None else end

    def _store_finished(self) -> None:
        """Store the figures of the jobs finished since the last call (a streamed replay)."""
        if self._finished:
            self._records.store(self._finished)
            self._finished.clear()

    # ---- internals ---------------------------------------------------------------------------
    def _enqueue(self, event: tuple[float, float, int, Any, int]) -> None:
        """Into the heap if before the horizon, else into its time's bucket."""
        at = event[0]
        if at < self._horizon:
            heapq.heappush(self._heap, event)
            return
        bucket = at // _BUCKET_S if at < math.inf else math.inf
        events = self._later.get(bucket)
        if events is None:
            events = self._later[bucket] = []
            heapq.heappush(self._later_buckets, bucket)
        events.append(event)

    def _next_bucket(self) -> None:
        """The heap is empty: make the earliest waiting bucket the heap, its end the new horizon."""
        bucket = heapq.heappop(self._later_buckets)
        self._heap = heap = self._later.pop(bucket)
        heapq.heapify(heap)
        self._horizon = (bucket + 1) * _BUCKET_S

    def _push_tick(self, at: float) -> None:
        """An orchestrator tick, after every other event of its instant (a job ending then ends first)."""
        self._enqueue((at, math.inf, _CAPACITY, None, 0))

    def _settle(self, job: Job) -> None:
        """Integrate ``job``'s progress (and its shared time) up to now."""
        now = self.now
        elapsed = now - job.last_update
        overhead = job.overhead_left
        if elapsed <= overhead:  # noqa: PLR1730 (min(elapsed, overhead_left) and max(0, ·) below, without the calls)
            overhead = elapsed
        job.overhead_left -= overhead
        remaining = job.remaining - (elapsed - overhead) * job.rate
        job.remaining = remaining if remaining > 0.0 else 0.0  # noqa: FURB136
        job.pace_seconds += elapsed * job.pace
        if job.partners:
            job.shared_seconds += elapsed
        job.last_update = now

    settle = _settle  # the CapabilityHost's name for it (sched/core/protocol.py)

    def add_stall(self, job: Job, seconds: float) -> None:
        """``job`` (settled now) makes no progress for ``seconds`` more (a capability's switch cost)."""
        job.overhead_left += seconds

    def _completion_time(self, job: Job) -> float:
        """When the job ends at its current rate (for a goodput job, if its epoch rate held)."""
        return job.last_update + job.overhead_left + job.remaining / job.rate

    def _calibrating(self, job: Job) -> Calibration:
        """The calibration capability, or an error naming the job that needs it."""
        if self.calibration is None:
            raise EngineError(f"job {job.job_id} is calibrated but policy {self.policy.name} declares no"
                              " calibration capability (Policy.capabilities)")
        return self.calibration

    def _refresh_rate(self, job: Job, force: bool = False) -> None:
        """Re-compute ``job``'s pace and rate from its partners (and, for a goodput job, from its
        placement, batch and epoch); re-schedule its completion."""
        self.state_version += 1
        if job.workers is not None:  # tracked (Gimbal): the slowest worker's iteration time (M2-M3)
            pace = self.calibration.pace(job)
        else:
            pace = max((xi for _, xi in job.partners.values()), default=1.0) if job.partners else 1.0
        rate = job.solo_speed / pace
        if job.goodput is not None:
            rate = self._goodput.rate(job, rate)
        if job.rate > 0:
            if rate == job.rate and not force:
                return
            self._settle(job)
        else:
            job.last_update = self.now
        job.pace = pace
        job.rate = rate
        job.version += 1
        end = job.last_update + job.overhead_left + job.remaining / rate  # _completion_time(job)
        key = (end, job.index, job)
        by_end = self._by_end
        if by_end is not None:
            if job.end_key is not None:
                by_end.remove(job.end_key)
            by_end.add(key)
        job.end_key = key
        self._seq += 1
        self._enqueue((end if job.goodput is None else self._goodput.next_event_time(job), self._seq, _COMPLETION, job,
                       job.version))

    refresh_rate = _refresh_rate  # the CapabilityHost's name for it (sched/core/protocol.py)

    def _check_sharing(
        self, job: Job, gpus: tuple[int, ...], mode: str, shares, accumulation_steps: int
    ) -> dict[Job, tuple[int, float, float]]:
        """Validate a sharing start before anything changes; returns partner -> (GPUs, ξ_job, ξ_partner)."""
        if self.sharing is None:
            raise EngineError(f"policy {self.policy.name} shared GPUs but the replay has no sharing model")
        counts: dict[Job, int] = {}
        for g in gpus:
            holders = self.cluster.holders[g]
            if len(holders) != 1:
                raise EngineError(f"job {job.job_id}: GPU {g} holds {len(holders)} jobs; sharing needs exactly one")
            counts[holders[0]] = counts.get(holders[0], 0) + 1
        pairs = {}
        for partner, count in counts.items():
            if not self.sharing.fits_together(job, partner, accumulation_steps):
                raise EngineError(f"job {job.job_id} and job {partner.job_id} do not fit in one GPU's memory")
            xi_job, xi_partner = self.sharing.ratio(job, partner, mode, shares)
            if not (math.isfinite(xi_job) and math.isfinite(xi_partner)):
                raise EngineError(f"job {job.job_id} and job {partner.job_id} cannot run together (ξ = inf)")
            pairs[partner] = (count, xi_job, xi_partner)
        return pairs

    def _join_partners(self, job: Job, gpus: tuple[int, ...], pairs: dict[Job, tuple[int, float, float]]) -> None:
        self.cluster.share(gpus, job)
        job.partners = {}
        for partner, (count, xi_job, xi_partner) in pairs.items():
            self._settle(partner)  # close its interval at the old pace before its partners change
            job.partners[partner] = [count, xi_job]
            if partner.partners is None:
                partner.partners = {}
            partner.partners[job] = [count, xi_partner]
            if partner.workers is not None:
                self.calibration.on_partners_changed(partner)
            self._refresh_rate(partner)

    def _set_gpu_count(self, job: Job, num_gpus: int, running: bool = False) -> None:
        """Change the job's GPU count, keeping its attained service (GPU-seconds) exact."""
        held = job.run_time + (self.now - job.last_start if running else 0.0)
        job.service_correction += (job.num_gpus - num_gpus) * held
        job.num_gpus = num_gpus
        if job.goodput is not None and job.goodput.global_batch:
            job.batch_size = -(-job.goodput.global_batch // num_gpus)

    def _grow_placement(self, job: Job, extra: int) -> list[tuple[int, int]] | None:
        """Extra GPUs for a growing job: its own servers first (most free first), then the strategy."""
        if extra > self.cluster.free_gpus:
            return None
        per = self.cluster.gpus_per_server
        own = sorted({g // per for g in job.gpus}, key=lambda s: (-len(self.cluster.free_by_server[s]), s))
        placement: list[tuple[int, int]] = []
        for server in own:
            take = min(extra, len(self.cluster.free_by_server[server]))
            if take:
                placement.append((server, take))
                extra -= take
            if extra == 0:
                return placement
        used = {s for s, _ in placement}
        free = [(len(stack) - (dict(placement).get(s, 0)), s) for s, stack in enumerate(self.cluster.free_by_server)
                if s not in used and stack]
        free.sort(key=lambda fs: (-fs[0], fs[1]))
        for n, server in free:
            take = min(extra, n)
            placement.append((server, take))
            extra -= take
            if extra == 0:
                return placement
        return None

    def _shrink_choice(self, job: Job, count: int) -> tuple[int, ...]:
        """GPUs a shrinking job gives back: from the servers where it holds the fewest first."""
        per = self.cluster.gpus_per_server
        by_server: dict[int, list[int]] = {}
        for g in job.gpus:
            by_server.setdefault(g // per, []).append(g)
        order = sorted(by_server, key=lambda s: (len(by_server[s]), -s))
        chosen: list[int] = []
        for server in order:
            for g in reversed(by_server[server]):
                if len(chosen) == count:
                    return tuple(chosen)
                chosen.append(g)
        return tuple(chosen[:count])

    def _close_stint(self, job: Job) -> None:
        """Record the job's stint on its current GPUs (only with ``record_occupancy``) and open the next."""
        if self._occupancy is not None:
            since = self._held_since.pop(job)
            if self.now > since:
                self._occupancy.append((job, since, self.now, job.gpus, job.accumulation_steps))
            self._held_since[job] = self.now

    def _stop(self, job: Job) -> None:
        if self._occupancy is not None:
            self._close_stint(job)
            del self._held_since[job]
        self.state_version += 1
        if self._by_end is not None:
            self._by_end.remove(job.end_key)
        job.end_key = None
        self.cluster.release(job, job.gpus)
        job.gpus = ()
        job.run_time += self.now - job.last_start
        del self.running[job]
        if job.partners:
            partners = list(job.partners)
            job.partners = None
            for partner in partners:
                self._settle(partner)
                del partner.partners[job]
                if partner.workers is not None:  # its vacated GPUs run alone now: σ(p) (Gimbal A10)
                    self.calibration.on_partners_changed(partner)
                self._refresh_rate(partner)

    def _complete(self, job: Job) -> None:
        self._settle(job)
        job.remaining = 0.0
        job.overhead_left = 0.0
        job.end_time = self.now
        self._stop(job)
        self.policy.on_finish(self, job)
        finished = self._finished
        if finished is not None:  # streamed: the job's figures go to the records, its record may go
            finished.append(job)
            if len(finished) >= _BATCH:
                self._store_finished()
