"""Tiresias+TunedJobs, the Tiresias of Pollux's simulator study (docs/explanation/pollux.md; Pollux §5.3).

``tiresias`` runs this mode on goodput workloads (``mode: auto``) or when asked (``mode: tuned-jobs``).
Each job keeps the GPU count and batch of its workload row (TunedJobs). Two queues by attained
service (GPU-seconds held, the 30 s restart stall included): a job moves down when its service
reaches 16 GPU-hours; FIFO by arrival in the first queue, by demotion in the next; no starvation
promotion by default. Every round: walk the queues, a job runs if its GPU count fits in the GPUs
not yet handed out (by count: it may span servers), else it is skipped (later, smaller jobs may
run); running jobs that are not chosen are preempted. Running jobs keep their GPUs; new ones take
GPUs from the emptiest server first. Decisions happen at 60 s rounds (``elastic.RoundPolicy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedlab.sched.policies.elastic import RoundParams, RoundPolicy, emptiest_first, free_per_server

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job

STUDY_THRESHOLD_GPU_S = 16 * 3600.0  # the study's single queue threshold: 16 GPU-hours


class TunedJobsMode(RoundPolicy):
    """The round-based Tiresias of the study (no ``name``: reached through ``tiresias``)."""

    def __init__(self, thresholds: list[float], promote_knob: float, round_s: float, event_driven: bool) -> None:
        super().__init__(RoundParams(round_s=round_s, event_driven=event_driven))
        self.thresholds = thresholds
        self.promote_knob = promote_knob
        self.queues: list[dict[Job, None]] = [{} for _ in range(len(thresholds) + 1)]
        self.level: dict[Job, int] = {}
        self.service_base: dict[Job, float] = {}

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        super().on_arrival(engine, job)
        self.queues[0][job] = None
        self.level[job] = 0
        self.service_base[job] = 0.0

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        super().on_finish(engine, job)
        del self.queues[self.level.pop(job)][job], self.service_base[job]

    def decide(self, engine: PolicyEngine) -> None:
        self._requeue(engine)
        capacity = engine.cluster.total_gpus
        chosen: list[Job] = []
        for queue in self.queues:
            for job in queue:
                if job.num_gpus <= capacity:
                    chosen.append(job)
                    capacity -= job.num_gpus
        keep = set(chosen)
        for job in [j for j in engine.running if j not in keep]:
            engine.preempt(job)
        free = free_per_server(engine)
        for job in chosen:
            if not job.running:
                counts = emptiest_first(free, job.num_gpus)
                if counts is None or not engine.start(job, sorted(counts.items())):
                    raise RuntimeError(f"tiresias: job {job.job_id} did not fit although GPUs were free")

    def _requeue(self, engine: PolicyEngine) -> None:
        """Demote running jobs past their queue's threshold (in queue order); promote starved ones."""
        for level, limit in enumerate(self.thresholds):
            for job in [j for j in self.queues[level] if j.running]:
                if engine.attained_service(job) - self.service_base[job] >= limit:
                    self._move(job, level + 1)
        if self.promote_knob > 0:
            for queue in self.queues[1:]:
                for job in [j for j in queue if not j.running and j.run_time > 0]:
                    if engine.now - job.last_stop >= self.promote_knob * job.run_time:
                        self.service_base[job] = engine.attained_service(job)
                        self._move(job, 0)

    def _move(self, job: Job, level: int) -> None:
        del self.queues[self.level[job]][job]
        self.queues[level][job] = None
        self.level[job] = level
