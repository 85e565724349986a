"""The job record the engine and the policies share: the trace row plus the job's runtime state."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from schedlab.sched.core.goodput_rates import GoodputRates, GoodputState
from schedlab.sched.traces.jobtable import in_canonical_order

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import Capability


#: the job's spec: set from its trace row by :class:`JobSource` (or the constructor) and never written
#: afterwards by the engine, a capability or a policy (``tests/test_engine_contract.py`` checks
#: ``sched/``); ``num_gpus`` and ``batch_size`` start from the trace but are run state (elastic
#: allocations, a goodput job's per-GPU batch)
SPEC_FIELDS: tuple[str, ...] = (
    "job_id", "submit_time", "duration", "index", "deadline", "model", "requested_gpus", "fungible",
    "heterogeneous", "checkpoint", "elastic_min", "elastic_max", "scaling_loss", "goodput",
)


@dataclass(slots=True, eq=False)
class Job:
    """One training job. Work is measured in solo seconds: a job running alone on its own GPUs
    progresses at ``rate = 1`` solo second per second; sharing or squeezing lowers the rate.

    Three parts: the spec (:data:`SPEC_FIELDS`, frozen once made), the run state the engine
    owns, and extension states a capability owns, each one slotted object attached only to the jobs that
    use it (``goodput``: a ``goodput_rates.GoodputState``; ``workers``: a ``calibration.Workers``). The
    spec, sharing, elastic and pool fields stay flat slots so that the event loop reads them as slots
    (a property read costs ~8x a slot read, a frozen spec object ~2.7x a record's construction on
    CPython 3.11); who may write what is the contract (``sched/core/protocol.py``; policies read
    through ``JobView``)."""

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

    # goodput state (docs/explanation/pollux.md): a goodput_rates.GoodputState (model, batch, epoch, placement shape),
    # None for a fixed-duration job
    goodput: GoodputState | None = None

    # per-worker calibration (Gimbal): a sched/core/calibration.Workers, None unless a Gimbal policy tracks the job
    workers: Any = None

    # pool state (Lyra, docs/explanation/lyra.md): loaned inference servers, lost-progress preemptions
    fungible: bool = False  # may run on GPUs of another type (on-loan inference servers)
    heterogeneous: bool = False  # may run on training and inference GPUs at once (Lyra §2.1, §6)
    checkpoint: bool | None = None  # None: unknown (a preemption keeps progress); False: restarts from zero
    # Lyra's elastic jobs (docs/explanation/lyra.md): a GPU range within which the job scales; its work is
    # in seconds at ``elastic_min`` GPUs and it runs ``sched/models/scaling.py``'s speed-up on more
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


def job_capabilities(jobs: list[Job] | JobSource) -> list[Capability]:
    """The engine capabilities these jobs' extension states need: goodput epochs when any job has a
    goodput model (docs/explanation/pollux.md), none for fixed-duration jobs."""
    if isinstance(jobs, JobSource):
        goodput = "global_batch" in jobs.table.columns
    else:
        goodput = any(job.goodput is not None for job in jobs)
    return [GoodputRates()] if goodput else []


def jobs_from_table(table: pd.DataFrame, goodput_models: dict[str, Any] | None = None) -> list[Job]:
    """Build job records from a canonical job table that has ``duration`` (annotate first if not).

    A table with ``global_batch`` holds goodput jobs (docs/explanation/pollux.md): each gets its application's
    model from ``goodput_models`` (keyed by the ``model`` column) and its ``duration`` is read as the
    nominal run time, the unit its progress is counted in."""
    source = JobSource(table, goodput_models)
    return source.make(0, len(source))


class JobSource:
    """A canonical job table, sorted by ``(submit_time, job_id)``, that makes its :class:`Job` records
    on demand: the engine asks for the next few as they arrive, so a replay holds
    records for the jobs in flight only, not the whole trace. ``make(a, b)`` gives jobs ``a..b-1``
    exactly as :func:`jobs_from_table` gives them; every row is checked up front."""

    def __init__(self, table: pd.DataFrame, goodput_models: dict[str, Any] | None = None) -> None:
        if "duration" not in table.columns:
            raise ValueError("the job table has no 'duration' column: annotate it with a workload catalog first")
        self.table = table if in_canonical_order(table) else table.sort_values(["submit_time", "job_id"], kind="stable")
        self.goodput_models = goodput_models
        columns = self.table.columns
        if "global_batch" in columns and goodput_models is None:
            raise ValueError("the job table has goodput jobs (global_batch) but no goodput models were given")
        self.elastic = _elastic_rows(self.table)
        #: whether any job has a GPU range and no goodput model (Lyra's elastic jobs, sched/models/scaling.py)
        self.has_elastic = "global_batch" not in columns and bool(self.elastic.any())
        if "global_batch" in columns:
            _check_goodput_models(self.table, goodput_models)

    def __len__(self) -> int:
        return len(self.table)

    def static(self) -> dict[str, Any]:
        """The job-table columns known before the replay, in job order, with the values the job
        records would hold (:class:`~schedlab.sched.traces.jobtable.JobRecords`' ``static``)."""
        table = self.table
        ids = table["job_id"]
        model = _names(table["model"]) if "model" in table.columns and table["model"].notna().any() else None
        return {
            # str ids as they are (no Python object per job); others as str() of each, as Job.job_id
            "job_id": ids.array if ids.dtype == "str" else [str(x) for x in ids.tolist()],
            "submit_time": table["submit_time"].to_numpy(dtype=float),
            "num_gpus": table["num_gpus"].to_numpy(dtype=np.int64),
            "duration": table["duration"].to_numpy(dtype=float),
            "deadline": _floats_array(table["deadline"]) if "deadline" in table.columns else None,
            "model": model,
        }

    def make(self, start: int, stop: int) -> list[Job]:
        """The job records of rows ``start..stop-1`` (in trace order; ``index`` is the row)."""
        part = self.table.iloc[start:stop]
        n = len(part)
        columns = part.columns
        # whole columns to Python lists (no per-row pandas calls): the job records take the same values
        # as float()/int()/str() of each cell, NaN/None where a cell is missing
        deadlines = _floats(part["deadline"]) if "deadline" in columns else [math.nan] * n
        batches = _floats(part["batch_size"]) if "batch_size" in columns else [math.nan] * n
        models = _names(part["model"]) if "model" in columns else [None] * n
        jobs = list(map(
            Job,
            map(str, part["job_id"].tolist()),
            map(float, part["submit_time"].tolist()),
            map(int, part["num_gpus"].tolist()),
            map(float, part["duration"].tolist()),
            range(start, start + n),
            deadlines,
            models,
            batches,
        ))
        _pool_columns(jobs, part)
        if "global_batch" in columns:
            for job, global_batch in zip(jobs, part["global_batch"]):
                job.goodput = GoodputState.new(self.goodput_models[job.model], int(global_batch), job.duration)
        return jobs


def _elastic_rows(table: pd.DataFrame) -> np.ndarray:
    """Rows with a GPU range (``elastic_min`` and ``elastic_max`` given, ``elastic_max`` not 0); a bad
    range or ``scaling_loss`` is an error naming the first such job, as :func:`_pool_columns` names it."""
    if not ("elastic_min" in table.columns and "elastic_max" in table.columns):
        return np.zeros(len(table), bool)
    low = table["elastic_min"].to_numpy(dtype=float, na_value=math.nan)
    high = table["elastic_max"].to_numpy(dtype=float, na_value=math.nan)
    ranged = ~np.isnan(low) & ~np.isnan(high) & (high != 0)
    with np.errstate(invalid="ignore"):
        bad_range = ranged & ~((1 <= np.trunc(low)) & (np.trunc(low) <= np.trunc(high)))
        if "scaling_loss" in table.columns:
            loss = np.nan_to_num(table["scaling_loss"].to_numpy(dtype=float, na_value=math.nan), nan=0.0)
            bad_loss = ranged & ~((0 <= loss) & (loss < 1))
        else:
            bad_loss = np.zeros(len(table), bool)
    bad = np.flatnonzero(bad_range | bad_loss)
    if len(bad):  # the first bad job, checked by the same code that reads it
        row = int(bad[0])
        _pool_columns(list(map(Job, map(str, table["job_id"].iloc[row:row + 1].tolist()), [0.0], [1], [1.0])),
                      table.iloc[row:row + 1])
    return ranged


def _check_goodput_models(table: pd.DataFrame, goodput_models: dict[str, Any]) -> None:
    """Every goodput job's application has a model (an error names the first job without one)."""
    names = _names(table["model"]) if "model" in table.columns else [None] * len(table)
    for job_id, name in zip(table["job_id"].tolist(), names):
        if goodput_models.get(name) is None:
            raise ValueError(f"job {job_id}: no goodput model for application {name!r}"
                             f" (known: {sorted(goodput_models)})")


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


def _names(column: pd.Series) -> list[str | None]:
    """A column as Python strings (``str()`` of each cell), None where a cell is missing."""
    return [None if gone else str(value) for value, gone in zip(column.tolist(), column.isna().tolist())]


def _floats(column: pd.Series) -> list[float]:
    """A column as Python floats, NaN where a cell is missing."""
    return _floats_array(column).tolist()


def _floats_array(column: pd.Series) -> np.ndarray:
    return column.to_numpy(dtype=float, na_value=math.nan)
