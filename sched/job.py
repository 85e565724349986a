"""The job record the engine and the policies share: the trace row plus the job's runtime state."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd


@dataclass(slots=True, eq=False)
class Job:
    """One training job. Work is measured in solo seconds: a job running alone on its own GPUs
    progresses at ``rate = 1`` solo second per second; sharing or squeezing lowers the rate."""

    job_id: str
    submit_time: float
    num_gpus: int
    duration: float  # solo seconds of work
    index: int = 0  # position in the trace: the tie-break everywhere
    deadline: float = math.nan
    model: str | None = None
    batch_size: float = math.nan  # per-GPU batch the user asked for

    # runtime state, owned by the engine
    remaining: float = field(default=math.nan)  # solo seconds left, as of ``last_update``
    rate: float = 0.0  # solo seconds of progress per second; 0 while queued
    last_update: float = 0.0
    overhead_left: float = 0.0  # restore time still to spend before progress resumes
    gpus: tuple[int, ...] = ()
    start_time: float = math.nan  # first start
    end_time: float = math.nan
    last_start: float = math.nan
    last_stop: float = math.nan  # last preemption
    run_time: float = 0.0  # wall seconds spent holding GPUs, completed stints only
    preemptions: int = 0
    version: int = 0  # bumped on every rate change; stale completion events carry an older one
    end_key: tuple | None = None  # (expected end, index, self) in the engine's by_end list while running

    # sharing state (Castor §3): set by the engine when the job runs beside others
    accumulation_steps: int = 1  # gradient accumulation chosen at start (Castor §5.2.3)
    solo_speed: float = 1.0  # rate when alone: < 1 with accumulation
    partners: dict | None = None  # partner Job -> [GPUs shared with it, ξ of this job beside it]
    pace: float = 1.0  # current slowdown: the largest ξ over its GPUs (stragglers, Gimbal §2.2)
    shared_seconds: float = 0.0  # wall seconds run beside a partner
    pace_seconds: float = 0.0  # integral of pace over running time
    exclusive_jct_estimate: float = math.nan  # Castor eq. 24's t_solo-location, when it started shared

    def __post_init__(self) -> None:
        if math.isnan(self.remaining):
            self.remaining = self.duration

    @property
    def running(self) -> bool:
        return bool(self.gpus)

    @property
    def finished(self) -> bool:
        return not math.isnan(self.end_time)

    @property
    def gpu_service(self) -> float:
        """GPUs x duration: the job's total GPU-time demand (SSF's key)."""
        return self.num_gpus * self.duration


def jobs_from_table(table: pd.DataFrame) -> list[Job]:
    """Build job records from a canonical job table that has ``duration`` (annotate first if not)."""
    if "duration" not in table.columns:
        raise ValueError("the job table has no 'duration' column: annotate it with a workload catalog first")
    ordered = table.sort_values(["submit_time", "job_id"], kind="stable")
    deadlines = ordered["deadline"] if "deadline" in ordered.columns else pd.Series(math.nan, index=ordered.index)
    models = ordered["model"] if "model" in ordered.columns else pd.Series(None, index=ordered.index)
    batches = ordered["batch_size"] if "batch_size" in ordered.columns else pd.Series(math.nan, index=ordered.index)
    return [
        Job(
            job_id=str(job_id),
            submit_time=float(submit),
            num_gpus=int(gpus),
            duration=float(duration),
            index=i,
            deadline=float(deadline) if pd.notna(deadline) else math.nan,
            model=None if pd.isna(model) else str(model),
            batch_size=float(batch),
        )
        for i, (job_id, submit, gpus, duration, deadline, model, batch) in enumerate(
            zip(
                ordered["job_id"],
                ordered["submit_time"],
                ordered["num_gpus"],
                ordered["duration"],
                deadlines,
                models,
                batches,
            )
        )
    ]
