"""``backfill``: FIFO with EASY backfilling, what Slurm's backfill scheduler does.

Jobs start in submission order. When the head does not fit, it gets a reservation: the earliest time
(``shadow``) at which enough running jobs will have finished for it. A later job may jump ahead if it
fits now and either ends before ``shadow`` or uses only GPUs the head will not need then (``extra``).

Run-time estimates: by default the jobs' true solo durations; Slurm plans on the users' time limits,
which is ``knowledge: estimate, estimator: requested`` (``docs/estimates.md``; a job that outlives its
estimate, which Slurm would kill, reads as ending now). Durations read: a waiting job's remaining work
and the running jobs' expected ends (the reservation). Simplified: backfilling runs at every event, not
every ``bf_interval``. ``max_backfill_scan``
is Slurm's ``bf_max_job_test`` (default 500): how many queued jobs one pass considers.

Under a strict placement (``strict-best-fit``, ``strict-consolidated``) a start may be refused although
enough GPUs are free: a refused head blocks the queue (its reservation counts GPUs, not servers: the
shadow time is when enough GPUs will be free, which fragmentation may push later); a refused later job
waits for the next pass and takes none of the head's spare GPUs.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from itertools import islice
from typing import TYPE_CHECKING

from pydantic import Field

from schedlab.sched.estimators.params import KnowledgeParams
from schedlab.sched.policies.base import Policy

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job


class BackfillParams(KnowledgeParams):
    max_backfill_scan: int = Field(default=500, ge=1)


class Backfill(Policy):
    name = "backfill"
    summary = "FIFO with EASY backfilling (Slurm-like): later jobs jump ahead if they delay no reservation"
    paper = "EASY backfilling (Lifka 1995), Slurm backfill scheduler"
    simplified = ("true durations as run-time estimates unless knowledge: estimate; backfill at every event;"
                  " reservations count GPUs, not servers")
    Params = BackfillParams
    waits_when_refused = True  # a refused head keeps its reservation and blocks; a refused later job waits

    def __init__(self, params: BackfillParams | None = None) -> None:
        super().__init__(params)
        # insertion order = submission order; an OrderedDict finds its head in O(1) however many jobs
        # left the front (a dict skips their deleted slots on every iteration)
        self.queue: OrderedDict[Job, None] = OrderedDict()

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        self.queue[job] = None

    def schedule(self, engine: PolicyEngine) -> None:
        queue = self.queue
        cluster = engine.cluster
        while queue:
            job = next(iter(queue))
            if job.num_gpus > cluster.free_gpus or not engine.start(job):
                break
            del queue[job]
        if len(queue) < 2 or cluster.free_gpus == 0:
            return
        head = next(iter(queue))
        now = engine.now
        shadow = extra = None
        started: list[Job] = []
        for job in islice(queue, 1, self.params.max_backfill_scan + 1):  # the head and the next jobs
            free = cluster.free_gpus
            if free == 0:
                break
            gpus = job.num_gpus
            if gpus > free:
                continue
            if shadow is None:
                shadow, extra = self._reservation(engine, head)
            if now + self.remaining(engine, job) <= shadow:
                if engine.start(job):
                    started.append(job)
            elif gpus <= extra and engine.start(job):  # a refused job takes none of the spare GPUs
                extra -= gpus
                started.append(job)
        for job in started:
            del queue[job]

    def _reservation(self, engine: PolicyEngine, head: Job) -> tuple[float, int]:
        """(shadow time, GPUs spare at shadow time) for the blocked head job."""
        available = engine.cluster.free_gpus
        for end, _, job in self.ends(engine):
            available += job.num_gpus
            if available >= head.num_gpus:
                return end, available - head.num_gpus
        return math.inf, 0
