"""``backfill``: FIFO with EASY backfilling, what Slurm's backfill scheduler does.

Jobs start in submission order. When the head does not fit, it gets a reservation: the earliest time
(``shadow``) at which enough running jobs will have finished for it. A later job may jump ahead if it
fits now and either ends before ``shadow`` or uses only GPUs the head will not need then (``extra``).

Simplified: run-time estimates are the jobs' true solo durations (Slurm uses user time limits, which
overestimate), and backfilling runs at every event, not every ``bf_interval``. ``max_backfill_scan``
is Slurm's ``bf_max_job_test`` (default 500): how many queued jobs one pass considers.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from schedlab.sched.policies.base import Policy

if TYPE_CHECKING:
    from schedlab.sched.engine import Engine
    from schedlab.sched.job import Job


class BackfillParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_backfill_scan: int = Field(default=500, ge=1)


class Backfill(Policy):
    name = "backfill"
    summary = "FIFO with EASY backfilling (Slurm-like): later jobs jump ahead if they delay no reservation"
    paper = "EASY backfilling (Lifka 1995), Slurm backfill scheduler"
    simplified = "true durations as run-time estimates; backfill at every event"
    Params = BackfillParams

    def __init__(self, params: BackfillParams | None = None) -> None:
        super().__init__(params)
        self.queue: dict[Job, None] = {}  # insertion order = submission order

    def on_arrival(self, engine: Engine, job: Job) -> None:
        self.queue[job] = None

    def schedule(self, engine: Engine) -> None:
        queue = self.queue
        for job in list(queue):
            if job.num_gpus > engine.cluster.free_gpus or not engine.start(job):
                break
            del queue[job]
        if len(queue) < 2 or engine.cluster.free_gpus == 0:
            return
        head = next(iter(queue))
        shadow = extra = None
        started: list[Job] = []
        for scanned, job in enumerate(queue):
            if scanned > self.params.max_backfill_scan or engine.cluster.free_gpus == 0:
                break
            if job is head or job.num_gpus > engine.cluster.free_gpus:
                continue
            if shadow is None:
                shadow, extra = self._reservation(engine, head)
            if engine.now + job.remaining <= shadow:
                fits = True
            elif job.num_gpus <= extra:
                extra -= job.num_gpus
                fits = True
            else:
                fits = False
            if fits and engine.start(job):
                started.append(job)
        for job in started:
            del queue[job]

    @staticmethod
    def _reservation(engine: Engine, head: Job) -> tuple[float, int]:
        """(shadow time, GPUs spare at shadow time) for the blocked head job."""
        available = engine.cluster.free_gpus
        for end, _, job in engine.by_end:
            available += job.num_gpus
            if available >= head.num_gpus:
                return end, available - head.num_gpus
        return math.inf, 0
