"""``gandiva-elastic``: Gandiva's grow-shrink as Lyra's baseline (Lyra EuroSys'23 §2.3, §7.1; Gandiva
OSDI'18 §3.2; docs/explanation/lyra.md).

Strict FIFO starts jobs exactly as the baseline does. When nothing waits and GPUs are idle (Gandiva's
"under-utilized": available resources but no pending jobs), running elastic jobs grow one worker at
a time, oldest first, round after round, up to their maximum. When a job waits, grown jobs shrink
back towards their base, the newest growth first, to make room for it. No packing, no migration,
no time-slicing (the repo's ``gandiva`` is the packing policy).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field
from schedlab.sched.policies.base import Policy

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job


class GandivaElasticParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpus_per_worker: int = Field(default=1, ge=1, le=8, description="GPUs per elastic worker")


class GandivaElastic(Policy):
    name = "gandiva-elastic"
    uses = (frozenset({"elastic"}),)
    falls_back_to = "fifo"  # strict FIFO with nothing to grow or shrink
    summary = "strict FIFO; idle GPUs grow running elastic jobs (oldest first), a waiting job shrinks them back"
    paper = "Gandiva (OSDI'18) §3.2 grow-shrink as Lyra (EuroSys'23) §7.1 uses it"
    simplified = "grow-shrink only (no packing, migration or time-slicing); scaling costs no time"
    Params = GandivaElasticParams
    default_preemption_overhead_s = 63.0

    def __init__(self, params: GandivaElasticParams | None = None) -> None:
        super().__init__(params)
        self.queue: deque[Job] = deque()
        self.elastic: dict[Job, None] = {}  # running elastic jobs, oldest start first
        self.growth: list[Job] = []  # one entry per grown worker, newest last
        self.scale_ops = 0

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        self.queue.append(job)

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        self.elastic.pop(job, None)

    def metrics(self) -> dict[str, float]:
        return {"gandiva_scale_ops": self.scale_ops}

    def schedule(self, engine: PolicyEngine) -> None:
        cluster = engine.cluster
        g = self.params.gpus_per_worker
        while self.queue:
            job = self.queue[0]
            if job.num_gpus > cluster.free_gpus:
                self._shrink_for(engine, job.num_gpus - cluster.free_gpus)
            if job.num_gpus > cluster.free_gpus or not engine.start(job):
                return  # strict FIFO: the head blocks the queue
            self.queue.popleft()
            if job.elastic_max > job.elastic_min > 0:
                self.elastic[job] = None
        grew = True
        while grew and cluster.free_gpus >= g:  # one worker per job per round, oldest first
            grew = False
            for job in self.elastic:
                if cluster.free_gpus < g:
                    break
                if job.num_gpus + g <= job.elastic_max and engine.resize(job, job.num_gpus + g):
                    self.growth.append(job)
                    self.scale_ops += 1
                    grew = True

    def _shrink_for(self, engine: PolicyEngine, gpus: int) -> None:
        g = self.params.gpus_per_worker
        while gpus > 0 and self.growth:
            job = self.growth.pop()
            if not job.running or job.num_gpus - g < job.elastic_min:
                continue  # finished (its growth went with it)
            engine.resize(job, job.num_gpus - g)
            self.scale_ops += 1
            gpus -= g
