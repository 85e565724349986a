"""Shared pieces of the round-based elastic policies (Pollux, Optimus, AFS, Tiresias+TunedJobs).

Rounds (docs/explanation/pollux.md, "The policies of that study"): the study's simulator re-decides every 60 s
and a job arriving at ``t`` is first considered at the first multiple of 60 that is >= ``t`` (and > 0),
``t`` on the replay's clock: the study's workloads keep their file's clock (``time_origin``,
``sched/traces/common.py``), so the rounds fall where the study's do.
Here a round is a policy timer (docs/explanation/design.md: no global tick): one is pending while jobs are active, and
arrivals and completions between rounds only update the policy's own records, so GPUs a job frees
mid-round stay idle until the next round, as in the study. ``event_driven`` (an option of each
policy) decides at every arrival and completion too, our exact event timing.

Allocations are per-server GPU counts. ``apply_allocations`` turns a target (job -> counts) into
engine calls: preempt what gets nothing, shrink, then grow and start; a job whose new GPUs share no
server with its old ones is restarted (preempt + start), the rest are resized. Every change costs
the allocation stall (Pollux: 30 s), the first start included. With ``keep_progress`` (Pollux) a
preempted or restarted job keeps its progress even without a checkpoint of its own (``checkpoint``
False, Lyra's scenarios): the policy's reallocation is a checkpoint-restart.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from schedlab.sched.policies.base import Policy

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job

STUDY_STALL_S = 30.0  # Pollux's simulator: every allocation change, the first start included


class RoundParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    round_s: float = Field(default=60.0, gt=0, description="re-decide every round_s seconds (the study: 60)")
    event_driven: bool = Field(
        default=False, description="also re-decide at every arrival and completion (exact event timing)"
    )


class RoundPolicy(Policy):
    """A policy that decides in rounds (timers); subclasses implement ``decide(engine)``."""

    Params = RoundParams
    default_allocation_stall_s = STUDY_STALL_S
    default_preemption_overhead_s = STUDY_STALL_S  # a restart is an allocation change too

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self.active: dict[int, Job] = {}  # index -> job, in arrival order
        self._timer_seq = 0
        self._timer_pending = False
        self._round_due = False
        self.rounds = 0

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        self.active[job.index] = job
        if not self._timer_pending and not self._round_due:
            round_s = self.params.round_s
            self._arm(engine, max(round_s, math.ceil(engine.now / round_s - 1e-9) * round_s))

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        del self.active[job.index]

    def on_timer(self, engine: PolicyEngine, payload: Any) -> None:
        if isinstance(payload, tuple) and payload[0] == "round":
            if payload[1] == self._timer_seq:
                self._timer_pending = False
                self._round_due = True
        else:
            self.on_other_timer(engine, payload)

    def on_other_timer(self, engine: PolicyEngine, payload: Any) -> None:
        """A timer a subclass set itself."""

    def schedule(self, engine: PolicyEngine) -> None:
        if not (self._round_due or self.params.event_driven):
            return
        due, self._round_due = self._round_due, False
        self.rounds += 1
        self.decide(engine)
        if due and self.active and not self._timer_pending:
            self._arm(engine, engine.now + self.params.round_s)

    def decide(self, engine: PolicyEngine) -> None:
        raise NotImplementedError

    def _arm(self, engine: PolicyEngine, at: float) -> None:
        self._timer_seq += 1
        self._timer_pending = True
        engine.set_timer(at, ("round", self._timer_seq))


# ---- allocations -------------------------------------------------------------------------------
def server_counts(job: Job, gpus_per_server: int) -> dict[int, int]:
    counts: dict[int, int] = {}
    for g in job.gpus:
        counts[g // gpus_per_server] = counts.get(g // gpus_per_server, 0) + 1
    return counts


def shape_of(counts: dict[int, int] | list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """GPUs per server, largest first, no zeros (a goodput model's placement)."""
    values = counts.values() if isinstance(counts, dict) else counts
    return tuple(sorted((c for c in values if c), reverse=True))


def packed_shape(num_gpus: int, gpus_per_server: int) -> tuple[int, ...]:
    """``num_gpus`` packed on as few servers as possible: (4, 4, 2) for 10 GPUs on 4-GPU servers."""
    full, rest = divmod(num_gpus, gpus_per_server)
    return (gpus_per_server,) * full + ((rest,) if rest else ())


def emptiest_first(free: list[int], demand: int) -> dict[int, int] | None:
    """Take GPUs from the server with the most free GPUs first (ties: lowest index), as the study's
    Tiresias and Optimus do; ``free`` is updated in place. None (and nothing taken) if too few."""
    if demand > sum(free):
        return None
    taken: dict[int, int] = {}
    while demand > 0:
        server = max(range(len(free)), key=lambda s: (free[s], -s))
        n = min(free[server], demand)
        taken[server] = taken.get(server, 0) + n
        free[server] -= n
        demand -= n
    return taken


def apply_allocations(
    engine: PolicyEngine, targets: dict[Job, dict[int, int]], batch_for: Callable[[Job, dict[int, int]], int] | None = None,
    *, keep_progress: bool = False,
) -> list[Job]:
    """Make the running set equal ``targets`` (job -> GPUs per server; a job not in it, or with no
    GPUs, is preempted). Returns the jobs whose allocation changed (started, resized or moved).
    ``keep_progress``: a preempted job keeps its progress whatever its ``checkpoint`` (the engine's
    default loses it when ``checkpoint`` is False).

    ``batch_for(job, target)`` (adaptive-batch policies) gives a changed job its new global batch,
    set when it is valid: after the job's shrink and before its growth or start (a batch that fits
    more GPUs fits fewer)."""
    per = engine.cluster.gpus_per_server
    changed: list[Job] = []
    grow: list[tuple[Job, dict[int, int], dict[int, int]]] = []
    for job in list(engine.running):
        target = {s: n for s, n in targets.get(job, {}).items() if n}
        current = server_counts(job, per)
        if target == current:
            continue
        changed.append(job)
        kept = sum(min(n, target.get(s, 0)) for s, n in current.items())
        if not target or kept == 0:
            engine.preempt(job, lose_progress=False if keep_progress else None)
            continue
        release: list[int] = []
        seen: dict[int, int] = {}
        for g in reversed(job.gpus):
            s = g // per
            seen[s] = seen.get(s, 0) + 1
            if seen[s] > target.get(s, 0):
                release.append(g)
        if release:
            engine.resize(job, job.num_gpus - len(release), release=tuple(release))
        grow.append((job, target, server_counts(job, per)))
    for job, target, current in grow:
        if batch_for is not None and job.goodput is not None:
            engine.set_batch(job, batch_for(job, target))
        extra = [(s, n - current.get(s, 0)) for s, n in sorted(target.items()) if n > current.get(s, 0)]
        if extra and not engine.resize(job, sum(target.values()), placement=extra):
            raise RuntimeError(f"{engine.policy.name}: job {job.job_id} could not grow to {target}")
    for job, target in targets.items():
        target = {s: n for s, n in target.items() if n}
        if target and not job.running:
            if batch_for is not None and job.goodput is not None:
                engine.set_batch(job, batch_for(job, target))
            if not engine.start(job, sorted(target.items()), num_gpus=sum(target.values())):
                raise RuntimeError(f"{engine.policy.name}: job {job.job_id} could not start on {target}")
            changed.append(job)
    return changed


def grow_by_gain(count: dict[Job, int], left: int, heap: list[tuple[float, int, Job]],
                 gain: Callable[[Job, int], float]) -> None:
    """Hand out ``left`` GPUs one at a time, each to the job whose next GPU gains most (``heap``
    holds ``(-gain, order, job)``; ties by order), while a GPU still gains anything (Optimus §4, AFS
    in Lyra §7.1). Updates ``count``."""
    heapq.heapify(heap)
    while left > 0 and heap:
        _, order, job = heapq.heappop(heap)
        count[job] += 1
        left -= 1
        more = gain(job, count[job])
        if more > 0:
            heapq.heappush(heap, (-more, order, job))


def free_per_server(engine: PolicyEngine) -> list[int]:
    return [len(stack) for stack in engine.cluster.free_by_server]


def server_capacity(engine: PolicyEngine) -> list[int]:
    """GPUs each server offers the policy now: its free GPUs plus those its running jobs hold. On a
    pooled cluster (``sched/core/pools.py``) an inference server that is not lent offers none (its free
    stack is empty), so a policy never targets it."""
    per = engine.cluster.gpus_per_server
    capacity = free_per_server(engine)
    for job in engine.running:
        for g in job.gpus:
            capacity[g // per] += 1
    return capacity
