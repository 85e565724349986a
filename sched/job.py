"""The job record the engine and the policies share: the trace row plus the job's runtime state."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

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

    # elastic state (Pollux, Optimus, AFS): allocations that change while the job runs
    requested_gpus: int = 0  # GPUs the trace asked for (``num_gpus`` is the current allocation)
    resizes: int = 0  # allocation changes while running (grow or shrink)
    service_correction: float = 0.0  # GPU-seconds attained at earlier allocations minus num_gpus x their time

    # goodput state (specs/pollux.md): progress in the job model's own units, converted to nominal
    # seconds so that ``remaining`` keeps one meaning for every policy
    goodput: Any = None  # the application's GoodputModel, or None for a fixed-duration job
    global_batch: int = 0  # current global batch (adaptive policies change it)
    progress_scale: float = 1.0  # model progress units per nominal second: total_progress / duration
    epoch_start: float = 0.0  # model progress at the start of the current epoch (an exact model boundary)
    epoch_end: float = 0.0  # model progress at which the current epoch ends: the next rate change
    placement_shape: tuple[int, ...] = ()  # GPUs per server of the current allocation, largest first

    # per-worker calibration (Gimbal, sched/calibration.py): None unless a Gimbal policy tracks the job
    shares: dict | None = None  # GPU -> MPS cap (fraction of the GPU) of this job's worker there
    batches: dict | None = None  # GPU -> local batch (LISS); None: every worker at ``batch_size``
    worker_xi: dict | None = None  # GPU -> ξ of this job's worker there; not None marks a tracked job

    # pool state (Lyra, specs/lyra.md §1): loaned inference servers, lost-progress preemptions
    fungible: bool = False  # may run on GPUs of another type (on-loan inference servers)
    heterogeneous: bool = False  # may run on training and inference GPUs at once (Lyra §2.1, §6)
    checkpoint: bool | None = None  # None: unknown (a preemption keeps progress); False: restarts from zero
    # Lyra's elastic jobs (specs/lyra.md §2.1): a GPU range within which the job scales; its work is
    # in seconds at ``elastic_min`` GPUs and it runs ``sched/scaling.py``'s speed-up on more
    elastic_min: int = 0  # fewest GPUs an elastic job may run on (0: inelastic)
    elastic_max: int = 0  # most GPUs an elastic job may use (0: inelastic)
    scaling_loss: float = 0.0  # throughput lost per GPU above elastic_min (Lyra §7.2: 0.2)
    speed_factor: float = 1.0  # the engine's ``job_speed`` at the current allocation (GPU type, scaling)
    ran_on_loan: bool = False  # held GPUs of an on-loan server at some point
    lost_work_s: float = 0.0  # solo seconds of progress lost by preemptions without checkpoint
    preemptions_lost: int = 0  # preemptions that lost progress

    def __post_init__(self) -> None:
        if math.isnan(self.remaining):
            self.remaining = self.duration
        if not self.requested_gpus:
            self.requested_gpus = self.num_gpus

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


def jobs_from_table(table: pd.DataFrame, goodput_models: dict[str, Any] | None = None) -> list[Job]:
    """Build job records from a canonical job table that has ``duration`` (annotate first if not).

    A table with ``global_batch`` holds goodput jobs (specs/pollux.md): each gets its application's
    model from ``goodput_models`` (keyed by the ``model`` column) and its ``duration`` is read as the
    nominal run time, the unit its progress is counted in."""
    if "duration" not in table.columns:
        raise ValueError("the job table has no 'duration' column: annotate it with a workload catalog first")
    ordered = table.sort_values(["submit_time", "job_id"], kind="stable")
    n = len(ordered)
    columns = ordered.columns
    # whole columns to Python lists (no per-row pandas calls): the job records take the same values
    # as float()/int()/str() of each cell, NaN/None where a cell is missing
    deadlines = _floats(ordered["deadline"]) if "deadline" in columns else [math.nan] * n
    batches = _floats(ordered["batch_size"]) if "batch_size" in columns else [math.nan] * n
    if "model" in columns:
        missing = ordered["model"].isna().tolist()
        models = [None if gone else str(m) for m, gone in zip(ordered["model"].tolist(), missing)]
    else:
        models = [None] * n
    jobs = list(map(
        Job,
        map(str, ordered["job_id"].tolist()),
        map(float, ordered["submit_time"].tolist()),
        map(int, ordered["num_gpus"].tolist()),
        map(float, ordered["duration"].tolist()),
        range(n),
        deadlines,
        models,
        batches,
    ))
    _pool_columns(jobs, ordered)
    if "global_batch" in ordered.columns:
        if goodput_models is None:
            raise ValueError("the job table has goodput jobs (global_batch) but no goodput models were given")
        for job, global_batch in zip(jobs, ordered["global_batch"]):
            model = goodput_models.get(job.model)
            if model is None:
                raise ValueError(f"job {job.job_id}: no goodput model for application {job.model!r}"
                                 f" (known: {sorted(goodput_models)})")
            job.goodput, job.global_batch = model, int(global_batch)
            job.progress_scale = model.total_progress / job.duration
            job.epoch_end = model.epoch_end(0.0)
    return jobs


def _pool_columns(jobs: list[Job], ordered: pd.DataFrame) -> None:
    """The canonical optional columns Lyra's jobs use (``fungible, heterogeneous, checkpoint,
    elastic_min/max``, and ``scaling_loss``); a row with no range (NaN, or ``elastic_max`` 0) is an
    inelastic job."""
    for column in ("fungible", "heterogeneous", "checkpoint"):
        if column in ordered.columns:
            for job, value in zip(jobs, ordered[column]):
                if pd.notna(value):
                    setattr(job, column, bool(value))
    if "elastic_min" in ordered.columns and "elastic_max" in ordered.columns:
        loss = ordered["scaling_loss"] if "scaling_loss" in ordered.columns else [0.0] * len(jobs)
        for job, low, high, lost in zip(jobs, ordered["elastic_min"], ordered["elastic_max"], loss):
            if pd.notna(low) and pd.notna(high) and high != 0:
                if not 1 <= int(low) <= int(high):
                    raise ValueError(f"job {job.job_id}: elastic_min {low} / elastic_max {high} must satisfy"
                                     " 1 <= elastic_min <= elastic_max")
                lost = 0.0 if pd.isna(lost) else float(lost)
                if not 0 <= lost < 1:
                    raise ValueError(f"job {job.job_id}: scaling_loss {lost} must be in [0, 1)")
                job.elastic_min, job.elastic_max, job.scaling_loss = int(low), int(high), lost


def _floats(column: pd.Series) -> list[float]:
    """A column as Python floats, NaN where a cell is missing."""
    return column.to_numpy(dtype=float, na_value=math.nan).tolist()
