"""``srtf``: preemptive shortest-remaining-time first, exclusive GPUs (the SRSF idea Tiresias §2 and
Castor §1 cite as optimal when durations are known).

The waiting job with the least remaining work runs first. If it does not fit, running jobs with
*more* remaining work are preempted, longest first, until it fits; if even that cannot free enough
GPUs it waits, and smaller jobs that fit are started (work-conserving). Preempted jobs keep their
progress and pay the checkpoint-restore overhead on restart.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from schedlab.sched.policies.base import Policy
from schedlab.sched.queues import DemandQueue

if TYPE_CHECKING:
    from schedlab.sched.engine import Engine
    from schedlab.sched.job import Job


class SRTF(Policy):
    name = "srtf"
    summary = "preemptive shortest remaining time first (exclusive GPUs, checkpoint-restore overhead)"
    paper = "SRSF in Tiresias §2; cited by Castor §1"

    def __init__(self, params=None) -> None:
        super().__init__(params)
        self.waiting = DemandQueue(lambda job: job.remaining)
        # running jobs, latest expected end (= most remaining work) first; stale entries skipped
        self._running: list[tuple[float, int, Job, int]] = []

    def on_arrival(self, engine: Engine, job: Job) -> None:
        self.waiting.push(job)

    def schedule(self, engine: Engine) -> None:
        while (head := self.waiting.peek()) is not None:
            if head.num_gpus > engine.cluster.free_gpus and not self._preempt_for(engine, head):
                break
            self._start(engine, head)
        while (job := self.waiting.peek(engine.cluster.free_gpus)) is not None:
            self._start(engine, job)

    def _start(self, engine: Engine, job: Job) -> None:
        self.waiting.pop(job)
        if not engine.start(job):
            raise RuntimeError(f"srtf: job {job.job_id} did not fit although enough GPUs were free")
        heapq.heappush(self._running, (-engine.expected_end(job), job.index, job, job.version))

    def _preempt_for(self, engine: Engine, head: Job) -> bool:
        """Preempt longer-remaining running jobs until ``head`` fits; False (and no change) if it cannot."""
        needed = head.num_gpus - engine.cluster.free_gpus
        victims: list[tuple[float, int, Job, int]] = []
        while needed > 0 and self._running:
            entry = heapq.heappop(self._running)
            job, version = entry[2], entry[3]
            if job.version != version or not job.running:
                continue  # stale: finished or restarted since
            if engine.remaining(job) <= head.remaining:
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
