"""The canonical job table (docs/explanation/design.md, "Contracts"): what every loader produces and every replay consumes.

Columns
-------
required: ``job_id`` (str), ``submit_time`` (float, seconds from trace start), ``num_gpus`` (int >= 1),
and either ``duration`` (float, solo seconds) or all of ``model, batch_size, iterations``.
optional: ``deadline`` (absolute seconds), ``elastic_min, elastic_max`` (GPUs), ``fungible`` (bool),
``heterogeneous`` (bool: may run on training and inference GPUs at once, Lyra §6), ``checkpoint``
(bool), ``user``, ``vc`` (str), ``global_batch`` (int: a goodput job's global batch, docs/explanation/pollux.md;
its ``model`` names the application), ``name`` (str: the job's name as its user gave it, the same for
recurring jobs; the history estimator keys on it, ``docs/estimates.md``), ``time_limit`` (float: the
run time the user requested, seconds; the ``requested`` estimator's figure).
"""

from __future__ import annotations

import math
import operator
from typing import Any, ClassVar

import numpy as np
import pandas as pd

REQUIRED_COLUMNS: tuple[str, ...] = ("job_id", "submit_time", "num_gpus")
DURATION_COLUMNS: tuple[str, ...] = ("duration",)
WORKLOAD_COLUMNS: tuple[str, ...] = ("model", "batch_size", "iterations")
OPTIONAL_COLUMNS: tuple[str, ...] = (
    "deadline",
    "elastic_min",
    "elastic_max",
    "fungible",
    "heterogeneous",
    "checkpoint",
    "user",
    "vc",
    "global_batch",
    "name",
    "time_limit",
)
CANONICAL_COLUMNS: tuple[str, ...] = (
    REQUIRED_COLUMNS + DURATION_COLUMNS + WORKLOAD_COLUMNS + OPTIONAL_COLUMNS
)


def in_canonical_order(table: pd.DataFrame) -> bool:
    """Whether ``table`` is already sorted by ``(submit_time, job_id)``, so that a stable sort would
    keep every row in place (checking is far cheaper than sorting 10M rows)."""
    try:
        times = table["submit_time"].to_numpy(dtype=float)
    except (TypeError, ValueError):
        return False
    if np.isnan(times).any():
        return False
    step = np.diff(times)
    if (step < 0).any():
        return False
    ties = np.flatnonzero(step == 0)
    if not len(ties):
        return True
    ids = table["job_id"]
    try:
        return all(a <= b for a, b in zip(ids.iloc[ties].tolist(), ids.iloc[ties + 1].tolist()))
    except TypeError:  # ids of mixed types: let the sort decide
        return False


class JobRecords:
    """A replay's per-job results as columns: the engine stores each job's figures
    when it finishes (:meth:`store`, in batches) and drops the job's record, so memory grows with
    the jobs in flight and these columns, not with one Python object per job of the trace.

    ``static``: the columns known before the replay (``job_id``, ``submit_time``, ``num_gpus`` — the
    trace's GPU count —, ``duration``, ``deadline`` and ``model``, these two None where no job has
    one), in job order. ``pools``: also keep
    Lyra's per-job figures (``ran_on_loan``, ``lost_work_s``, ``preemptions_lost``)."""

    #: figures the replay decides, read from each finished job: column -> (Job attribute, dtype)
    RESULTS: ClassVar[dict[str, tuple[str, type]]] = {
        "start_time": ("start_time", float),
        "end_time": ("end_time", float),
        "preemptions": ("preemptions", np.int64),
        "run_s": ("run_time", float),
        "shared_s": ("shared_seconds", float),
        "pace_s": ("pace_seconds", float),
        "accumulation_steps": ("accumulation_steps", np.int64),
        "exclusive_jct_estimate": ("exclusive_jct_estimate", float),
        "resizes": ("resizes", np.int64),
    }
    POOL_RESULTS: ClassVar[dict[str, tuple[str, type]]] = {
        "ran_on_loan": ("ran_on_loan", bool),
        "lost_work_s": ("lost_work_s", float),
        "preemptions_lost": ("preemptions_lost", np.int64),
    }

    def __init__(self, static: dict[str, Any], *, pools: bool = False) -> None:
        self.static = static
        self.n = n = len(static["submit_time"])
        self.fields = {**self.RESULTS, **(self.POOL_RESULTS if pools else {})}
        self.pools = pools
        self.columns: dict[str, np.ndarray] = {
            name: np.full(n, math.nan) if kind is float else np.zeros(n, kind) for name, (_, kind) in self.fields.items()
        }

    @classmethod
    def for_jobs(cls, jobs: list, *, pools: bool = False) -> JobRecords:
        """The records of finished ``jobs`` (Job objects, in job order)."""
        n = len(jobs)
        records = cls({
            "job_id": [j.job_id for j in jobs],
            "submit_time": np.fromiter((j.submit_time for j in jobs), float, n),
            "num_gpus": np.fromiter((j.requested_gpus for j in jobs), np.int64, n),
            "duration": np.fromiter((j.duration for j in jobs), float, n),
            "deadline": np.fromiter((j.deadline for j in jobs), float, n),
            "model": [j.model for j in jobs] if any(j.model is not None for j in jobs) else None,
        }, pools=pools)
        records.store(jobs, np.arange(n))
        return records

    def store(self, jobs: list, rows: np.ndarray | None = None) -> None:
        """Store the figures of finished ``jobs`` at ``rows`` (default: each job's ``index``)."""
        n = len(jobs)
        if rows is None:
            rows = np.fromiter((j.index for j in jobs), np.int64, n)
        for name, (attribute, kind) in self.fields.items():
            get = operator.attrgetter(attribute)
            self.columns[name][rows] = np.fromiter(map(get, jobs), kind, n)

    def last_end(self) -> float | None:
        """The latest end time stored so far (None before any job ended)."""
        ends = self.columns["end_time"]
        return float(np.nanmax(ends)) if self.n and not np.isnan(ends).all() else None
