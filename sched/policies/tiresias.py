"""``tiresias``: discretized two-dimensional least-attained-service (2D-LAS), Tiresias §3.2.

A job's attained service is GPUs x time it has run. Jobs sit in K priority queues split at
``queue_thresholds`` (GPU-seconds); a job is demoted when its service crosses its queue's threshold
(a timer event, not a tick). Jobs are served queue by queue, FIFO (by submission) within a queue,
greedily while GPUs remain; running jobs that fall outside that set are preempted (they keep their
progress and pay the checkpoint-restore overhead on restart).

Starvation (Tiresias §3.2, "PromoteKnob"): a job waiting longer than ``promote_knob`` x its executed
time is promoted back to the highest queue, where its service counts afresh.

Defaults: two queues split at 3,600 GPU-seconds, the example in Tiresias' simulator documentation;
``promote_knob`` = 8 is our choice (the paper leaves it to the operator; 0 turns promotion off).
Simplified: no placement-aware consolidation switch (Tiresias §4, "profile-based placement"): every
job uses the engine's placement strategy.

Mode (``mode``): ``las`` is the above; ``tuned-jobs`` is the study's Tiresias+TunedJobs
(``tiresias_tuned.py``: 60 s rounds, one threshold at 16 GPU-hours, no promotion, skip-if-not-fit,
30 s stall per allocation change); ``auto`` (default) picks ``tuned-jobs`` for goodput workloads
(``--format pollux``) and ``las`` otherwise. In ``tuned-jobs`` mode ``queue_thresholds`` and
``promote_knob`` keep the study's values unless set explicitly.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schedlab.sched.policies.base import Policy
from schedlab.sched.policies.tiresias_tuned import STUDY_THRESHOLD_GPU_S, TunedJobsMode
from schedlab.sched.queues import LevelQueues

if TYPE_CHECKING:
    from schedlab.sched.engine import Engine
    from schedlab.sched.job import Job


class TiresiasParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue_thresholds: list[float] = Field(default=[3600.0], description="GPU-seconds, ascending")
    promote_knob: float = Field(default=8.0, ge=0)
    mode: Literal["auto", "las", "tuned-jobs"] = Field(
        default="auto", description="tuned-jobs: Pollux study's Tiresias+TunedJobs; auto: it for goodput workloads"
    )
    round_s: float = Field(default=60.0, gt=0, description="tuned-jobs mode: round length")
    event_driven: bool = Field(default=False, description="tuned-jobs mode: also decide at arrivals/completions")


class Tiresias(Policy):
    name = "tiresias"
    summary = "discretized 2D-LAS with preemption and starvation promotion"
    paper = "Tiresias (NSDI'19) §3.2; baseline in Castor §9.1, SJF-BSBF §VI-A; mode tuned-jobs: Pollux §5.3"
    simplified = "placement uses the engine's strategy (no profile-based consolidation decision)"
    Params = TiresiasParams

    def __init__(self, params: TiresiasParams | None = None) -> None:
        super().__init__(params)
        thresholds = self.params.queue_thresholds
        if thresholds != sorted(thresholds) or any(t <= 0 for t in thresholds):
            raise ValueError(f"tiresias: queue_thresholds must be positive and ascending, got {thresholds}")
        self.limits = [*thresholds, float("inf")]
        self.queues = LevelQueues(len(self.limits))  # by job index, i.e. submission order
        self.jobs: dict[int, Job] = {}
        self.service_base: dict[int, float] = {}  # service at which the job entered queue 0 / was promoted
        self.start_order: dict[int, int] = {}  # index -> count of starts when it last started (engine.running order)
        self.starts = 0
        self.dirty = False  # whether the queues changed since the last pass (else the choice stands)
        self.tuned: TunedJobsMode | None = None
        if self.params.mode == "tuned-jobs":
            self._tuned_jobs()

    # ---- Tiresias+TunedJobs (Pollux's study): a separate mode, delegated to ---------------------
    def for_goodput_jobs(self) -> None:
        if self.params.mode == "auto":
            self._tuned_jobs()

    def _tuned_jobs(self) -> None:
        given = self.params.model_fields_set
        self.tuned = TunedJobsMode(
            self.params.queue_thresholds if "queue_thresholds" in given else [STUDY_THRESHOLD_GPU_S],
            self.params.promote_knob if "promote_knob" in given else 0.0,
            self.params.round_s,
            self.params.event_driven,
        )
        self.default_allocation_stall_s = self.tuned.default_allocation_stall_s
        self.default_preemption_overhead_s = self.tuned.default_preemption_overhead_s

    # ---- 2D-LAS ---------------------------------------------------------------------------------
    def on_arrival(self, engine: Engine, job: Job) -> None:
        if self.tuned:
            return self.tuned.on_arrival(engine, job)
        self.jobs[job.index] = job
        self.service_base[job.index] = 0.0
        self.queues.add(job.index, job.num_gpus, 0, False)  # not running
        self.dirty = True

    def on_finish(self, engine: Engine, job: Job) -> None:
        if self.tuned:
            return self.tuned.on_finish(engine, job)
        self.queues.remove(job.index, running=True)
        del self.jobs[job.index], self.service_base[job.index], self.start_order[job.index]
        self.dirty = True

    def on_timer(self, engine: Engine, payload: Any) -> None:
        if self.tuned:
            return self.tuned.on_timer(engine, payload)
        action, job, version = payload
        if job.version != version or job.end_time == job.end_time:  # stale, or finished (end_time not NaN)
            return
        if action == "demote" and job.gpus:  # running
            self._move(job, self.queues.level[job.index] + 1)
        elif action == "promote" and not job.gpus:
            self.service_base[job.index] = engine.attained_service(job)
            self._move(job, 0)

    def schedule(self, engine: Engine) -> None:
        """Serve the queues greedily (queue by queue, FIFO within one) while GPUs remain; preempt the
        running jobs left out (in the order they started), then start the chosen ones (serving order)."""
        if self.tuned:
            return self.tuned.schedule(engine)
        if not self.dirty:
            return  # same queues, same choice: it is already running
        self.dirty = False
        jobs, start_order = self.jobs, self.start_order
        start, stop = self.queues.switch(engine.cluster.total_gpus)  # marks them in the queues too
        if stop:
            stop.sort(key=start_order.__getitem__)
            knob, preempt, set_timer, now = self.params.promote_knob, engine.preempt, engine.set_timer, engine.now
            for index in stop:
                job = jobs[index]
                preempt(job)
                if knob > 0:
                    set_timer(now + knob * job.run_time, ("promote", job, job.version))
        if start:
            level, limits, starts, inf = self.queues.level, self.limits, self.starts, math.inf
            for index in start:
                job = jobs[index]
                if not engine.start(job):
                    raise RuntimeError(f"tiresias: job {job.job_id} did not fit although GPUs were free")
                starts += 1
                start_order[index] = starts
                limit = limits[level[index]]
                if limit != inf:  # the last queue has no demotion
                    self._arm_demotion(engine, job, limit)
            self.starts = starts

    def _arm_demotion(self, engine: Engine, job: Job, limit: float) -> None:
        """A timer for when the job's service in its queue reaches ``limit`` (it was just started)."""
        left = limit - (engine.attained_service(job) - self.service_base[job.index])
        wait = (left if left > 0.0 else 0.0) / job.num_gpus  # noqa: FURB136 (max(0, left) without the call)
        engine.set_timer(engine.now + wait, ("demote", job, job.version))

    def _move(self, job: Job, level: int) -> None:
        running = bool(job.gpus)
        self.queues.remove(job.index, running)
        self.queues.add(job.index, job.num_gpus, level, running)
        self.dirty = True
