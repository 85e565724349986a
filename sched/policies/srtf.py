"""``srtf``: preemptive shortest-remaining-time first, exclusive GPUs (the SRSF idea Tiresias §2 and
Castor §1 cite as optimal when durations are known).

Two ways (``repack``):

- ``repack: true`` (default): what the Tiresias authors' simulator does (``shortest``,
  ``simulator/run_sim.py``). At every event all jobs, running and waiting, are ranked by remaining
  work and re-packed greedily: each job in turn runs if it fits in the GPUs not yet handed out, else
  it waits (a running one is preempted); later jobs that fit still run. A running job counts the time
  it needs to finish (its restore overhead included, when a run has one; the simulator has none). Ties
  keep the simulator's order (it appends arrivals to its list and re-sorts it stably at each event): a
  waiting job before a running one, except one arriving at that instant, which goes after both; among
  waiting jobs the one that has had that remaining work longer, then arrival order. The walk starts at
  the first waiting job that would start (nothing changes before it), so an event that starts nothing
  costs a look at each GPU-count bucket's head. ``ties: helios`` orders equal remaining work as the
  Helios simulator's ``srtf`` does (HeliosArtifact bdaae10, ``framework/QSSF Service/policies/srtf.py``:
  every second it sorts its waiting list, then its running list, stably): every waiting job before
  every running one, waiting jobs in the order they entered the queue (an instant's arrivals before
  the jobs preempted then), running jobs in the order they (re)started.
- ``repack: false`` (schedlab's earlier rule): the waiting job with the least remaining work runs
  first. If it does not fit, running jobs with *more* remaining work are preempted, longest first,
  until it fits; if even that cannot free enough GPUs it waits, and smaller jobs that fit are started
  (work-conserving).

Preempted jobs keep their progress and pay the checkpoint-restore overhead on restart.

Durations read (``docs/estimates.md``): each job's remaining work and each running job's expected end,
the true ones (``knowledge: oracle``) or the estimator's (``knowledge: estimate``: the estimate at
submission minus the work done, 0 once a job outlives its estimate, so that it is never preempted again).
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator
from sortedcontainers import SortedList

from schedlab.sched.estimators.params import KnowledgeParams
from schedlab.sched.policies.base import Policy
from schedlab.sched.policies.queues import DemandQueue

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job


class SRTFParams(KnowledgeParams):
    repack: bool = Field(
        default=True,
        description="re-pack every job by remaining work at each event (the Tiresias simulator's 'shortest');"
        " false: preempt only to start the shortest waiting job, then fill",
    )
    ties: Literal["tiresias", "helios"] = Field(
        default="tiresias",
        description="the order among jobs of equal remaining work when re-packing: the Tiresias simulator's,"
        " or the Helios simulator's (waiting before running; waiting by entry to the queue, running by start)",
    )

    @model_validator(mode="after")
    def _ties_need_repack(self) -> SRTFParams:
        if self.ties != "tiresias" and not self.repack:
            raise ValueError("srtf: ties orders the re-packing walk; it applies to repack: true only")
        return self


class SRTF(Policy):
    name = "srtf"
    summary = "preemptive shortest remaining time first (exclusive GPUs, checkpoint-restore overhead)"
    paper = "SRSF in Tiresias §2 (its simulator's 'shortest'); cited by Castor §1"
    Params = SRTFParams
    waits_when_refused = True  # chosen by counting GPUs; one the placement refuses waits for the next event

    def __init__(self, params: SRTFParams | None = None) -> None:
        super().__init__(params)
        self.repack = self.params.repack
        self.helios_ties = self.params.ties == "helios"
        self.entered = 0  # jobs entered the waiting queue so far (the Helios order's tie)
        if self.repack:
            # waiting jobs by (remaining, since when, preempted or arrived, tie): the simulator's order
            self.rank: dict[int, tuple] = {}
            self.waiting = DemandQueue(lambda job: self.rank[job.index])
            # running jobs as (expected end, tie, rank when started, index, job): in the order of their
            # remaining work, which they all lose at the same pace, so the order holds while they run
            self.running = SortedList()
            self.entry: dict[int, tuple] = {}
        else:
            self.waiting = DemandQueue(lambda job: self.remaining(self._engine, job))
            self._engine: PolicyEngine | None = None
            # running jobs, latest expected end (= most remaining work) first; stale entries skipped
            self._running: list[tuple[float, int, Job, int]] = []

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        if self.helios_ties:
            self.entered += 1
            self.rank[job.index] = (self.remaining(engine, job), engine.now, 0, self.entered)
        elif self.repack:
            self.rank[job.index] = (self.remaining(engine, job), engine.now, 1, job.index)
        else:
            self._engine = engine
        self.waiting.push(job)

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        if self.repack:
            self.running.remove(self.entry.pop(job.index))
            del self.rank[job.index]

    def schedule(self, engine: PolicyEngine) -> None:
        if self.repack:
            return self._repack(engine)
        while (head := self.waiting.peek()) is not None:
            if head.num_gpus > engine.cluster.free_gpus and not self._preempt_for(engine, head):
                break
            if not self._start(engine, head):
                return
        while (job := self.waiting.peek(engine.cluster.free_gpus)) is not None and self._start(engine, job):
            pass

    # ---- repack: the simulator's 'shortest' -----------------------------------------------------
    def _position(self, rank: tuple, now: float) -> int:
        """Where a waiting job of ``rank`` stands among the running jobs: after those with less
        remaining work, before those with more; on a tie before them, unless it arrived just now (the
        Tiresias simulator appends arrivals to its list, then sorts it stably; Helios' puts it before)."""
        end = now + rank[0]
        just_arrived = rank[1] == now and rank[2] == 1 and not self.helios_ties
        return self.running.bisect_left((end, math.inf) if just_arrived else (end, -math.inf))

    def _first_chosen(self, free: int, now: float) -> tuple[Job | None, int]:
        """The first waiting job the walk would start, and its position among the running jobs. Up to
        it every running job stays, so a waiting job starts if its GPUs fit in the ``free`` ones plus
        those of the running jobs behind it. In each GPU-count bucket only the head can be the first
        (the others stand later, where less is left)."""
        running, best, best_pos = self.running, None, 0
        for key, job in self.waiting.heads():
            if best is not None and key > best[0]:
                continue
            at = self._position(key, now)
            behind, need, i = 0, job.num_gpus - free, len(running)
            while behind < need and i > at:  # only as far back as it takes
                i -= 1
                behind += running[i][4].num_gpus
            if behind >= need:
                best, best_pos = (key, job), at
        return (None, 0) if best is None else (best[1], best_pos)

    def _repack(self, engine: PolicyEngine) -> None:
        """Walk all jobs by remaining work, each running if it fits in what is left (the simulator
        re-sorts and re-packs all of them at every event). Up to the first waiting job that would start
        nothing changes, so the walk begins there (``_first_chosen``); from there on, of the waiting jobs
        only the best that fits matters at each step (``DemandQueue.peek``), since one that does not
        fit now never will in this pass (what is left only shrinks)."""
        now, waiting, running = engine.now, self.waiting, self.running
        free = engine.cluster.free_gpus
        head, pos = self._first_chosen(free, now)
        if head is None:
            return  # no waiting job would start: every running job stays
        rest = list(running.islice(pos))
        gpus = [entry[4].num_gpus for entry in rest]
        left = free + sum(gpus)  # what the running jobs before ``pos`` leave
        start: list[Job] = []
        stop: list[tuple] = []
        i, n, rank, position = 0, len(rest), self.rank, self._position
        at = position(rank[head.index], now) - pos  # the head stands before rest[at]
        while True:
            end = at if at < n else n
            while i < end:  # the running jobs before the head: each stays if it fits
                g = gpus[i]
                if g <= left:
                    left -= g
                    if head is not None and head.num_gpus > left:  # else it is still the best that fits
                        head = waiting.peek(left) if left else None
                        at = position(rank[head.index], now) - pos if head is not None else n
                        end = at if at < n else n
                else:
                    stop.append(rest[i])
                i += 1
            if head is None:
                break
            waiting.pop(head)  # its turn, and it fits
            start.append(head)
            left -= head.num_gpus
            head = waiting.peek(left) if left else None
            at = position(rank[head.index], now) - pos if head is not None else n
        for entry in stop:
            job = entry[4]
            engine.preempt(job)
            running.remove(entry)
            del self.entry[job.index]
            if self.helios_ties:  # preempted: after this instant's arrivals, in the walk's order
                self.entered += 1
                self.rank[job.index] = (self.remaining(engine, job), now, 1, self.entered)
            else:  # preempted: before this instant's arrivals
                self.rank[job.index] = (self.remaining(engine, job), now, 0, entry[1:3])
        for job in start:
            if not engine.start(job):  # a strict placement refused it: it waits for the next event
                waiting.push(job)
                continue
            rank = self.rank[job.index]
            # ties among running jobs: as when they became tied. One that waited starts ahead of those
            # already running (the later start first); one that starts as it arrives goes behind them.
            # Helios: in the order they started (this instant's in the walk's order)
            tie = now if self.helios_ties or rank[1] == now and rank[2] == 1 else -now
            entry = (self.expected_end(engine, job), tie, rank, job.index, job)
            running.add(entry)
            self.entry[job.index] = entry
        for entry in stop:
            waiting.push(entry[4])

    # ---- head: preempt for the shortest waiting job, then fill -----------------------------------
    def _start(self, engine: PolicyEngine, job: Job) -> bool:
        """Start ``job`` (it stays waiting, and the pass ends, when a strict placement refuses it)."""
        if not engine.start(job):
            return False
        self.waiting.pop(job)
        heapq.heappush(self._running, (-self.expected_end(engine, job), job.index, job, engine.version_of(job)))
        return True

    def _preempt_for(self, engine: PolicyEngine, head: Job) -> bool:
        """Preempt longer-remaining running jobs until ``head`` fits; False (and no change) if it cannot."""
        needed = head.num_gpus - engine.cluster.free_gpus
        victims: list[tuple[float, int, Job, int]] = []
        while needed > 0 and self._running:
            entry = heapq.heappop(self._running)
            job, version = entry[2], entry[3]
            if engine.version_of(job) != version or not job.running:
                continue  # stale: finished or restarted since
            if self.remaining(engine, job) <= self.remaining(engine, head):
                heapq.heappush(self._running, entry)
                break
            victims.append(entry)
            needed -= job.num_gpus
        if needed > 0:
            for entry in victims:
                heapq.heappush(self._running, entry)
            return False
        for _, _, job, _ in victims:
            engine.preempt(job)
            self.waiting.push(job)
        return True
