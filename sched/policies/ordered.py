"""Non-preemptive, exclusive-GPU baselines that start jobs in a fixed order.

- ``fifo``: strict first-come-first-served: no job starts before an earlier-submitted one, so a large
  job at the head blocks everything behind it (head-of-line blocking, Castor §9.1 baseline 1).
- ``sjf``: shortest (solo) duration first among the jobs that fit now; durations are known to the
  scheduler, as in Castor §9.1 baseline 2 and SJF-BSBF §VI-A (``knowledge: estimate``: the estimate
  each job got when it was submitted, ``docs/estimates.md``). With ``blocking: true`` the shortest
  job that does not fit blocks the rest, as the ``sjf`` of Lucid's and Helios' simulators does
  (github S-Lab-System-Group/Lucid ``simulation/policy/sjf.py``: the queue sorted by duration, the
  first job that cannot be placed ends the pass).
- ``ssf``: smallest GPU service (GPUs x duration) first among the jobs that fit now (Castor §9.1
  baseline 3); with ``knowledge: estimate, estimator: history`` it is the Helios QSSF ranking. ``blocking: true`` as for ``sjf``: the smallest job that does not fit blocks the rest
  (the queue order of the Helios simulator's QSSF, ``framework/QSSF Service/policies/qssf.py``: sorted by
  estimated GPU time, the first job that cannot be placed ends the pass).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from pydantic import Field

from schedlab.sched.estimators.params import KnowledgeParams
from schedlab.sched.policies.base import Policy
from schedlab.sched.policies.queues import DemandQueue

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job


class FIFO(Policy):
    name = "fifo"
    summary = "first-come-first-served, strict: the queue head blocks later jobs"
    paper = "baseline in Castor §9.1, SJF-BSBF §VI-A"
    waits_when_refused = True  # the head waits, and blocks, as in the Tiresias (yarn) and Lucid simulators

    def __init__(self, params=None) -> None:
        super().__init__(params)
        self.queue: deque[Job] = deque()

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        self.queue.append(job)

    def schedule(self, engine: PolicyEngine) -> None:
        queue = self.queue
        while queue and queue[0].num_gpus <= engine.cluster.free_gpus and engine.start(queue[0]):
            queue.popleft()


class ShortestFirstParams(KnowledgeParams):
    blocking: bool = Field(default=False, description="the first job in key order blocks the queue until it fits"
                           " (Lucid's and Helios' simulators)")


class _ShortestFirst(Policy):
    """Start the lowest-key job that fits, repeatedly (work-conserving: smaller jobs may pass). A GPU
    count a strict placement refuses although enough GPUs are free waits for the next pass (starts only
    take GPUs, so it could not start later in this one). With ``blocking`` the lowest-key job starts or
    ends the pass."""

    waits_when_refused = True
    Params = ShortestFirstParams

    def __init__(self, params=None) -> None:
        super().__init__(params)
        self.queue = DemandQueue(self.key)

    def key(self, job: Job) -> float:
        raise NotImplementedError

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        self.queue.push(job)

    def schedule(self, engine: PolicyEngine) -> None:
        if self.params.blocking:
            while (job := self.queue.peek()) is not None and job.num_gpus <= engine.cluster.free_gpus \
                    and engine.start(job):
                self.queue.pop(job)
            return
        refused: set[int] = set()
        while (job := self.queue.peek(engine.cluster.free_gpus, refused)) is not None:
            if engine.start(job):
                self.queue.pop(job)
            else:
                refused.add(job.num_gpus)


class SJF(_ShortestFirst):
    name = "sjf"
    summary = "shortest job (solo duration) first among jobs that fit; non-preemptive"
    paper = "baseline in Castor §9.1, SJF-BSBF §VI-A; blocking: Lucid's artifact"

    def key(self, job: Job) -> float:
        return self.duration(job)


class SSF(_ShortestFirst):
    name = "ssf"
    summary = "smallest GPU service (GPUs x duration) first among jobs that fit; non-preemptive"
    paper = "baseline in Castor §9.1; blocking: the Helios simulator's QSSF order"

    def key(self, job: Job) -> float:
        return job.num_gpus * self.duration(job)  # GPU service (Job.gpu_service)
