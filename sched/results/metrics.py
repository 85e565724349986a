"""Replay results (docs/explanation/design.md, "Replay result"): the per-job table and the summary dict."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from schedlab.sched.core.engine import EngineResult

JOB_COLUMNS = (
    "job_id", "submit_time", "start_time", "end_time", "num_gpus", "duration", "queue_s", "jct_s",
    "preemptions",
)
LARGE_JOB_GPUS = 8  # Castor §9.4 Tables 5-6: "large" = more than 8 GPUs (SJF-BSBF §VI-C uses 4)
#: who a job belongs to, where the trace says (Philly, Helios, PAI, ITP, canonical files): carried to
#: ``jobs.parquet`` beside the job table for fairness across users and virtual clusters
GROUP_COLUMNS = ("user", "vc")


def job_groups(table: pd.DataFrame) -> pd.DataFrame | None:
    """The trace's :data:`GROUP_COLUMNS` that hold a value for some job, by ``job_id``; None when it has
    none. Kept apart from :func:`job_table` (whose columns the replay digests cover) and joined to it
    when the table is written (:func:`with_groups`)."""
    present = [c for c in GROUP_COLUMNS if c in table.columns and table[c].notna().any()]
    if not present:
        return None
    return table[["job_id", *present]].assign(job_id=table["job_id"].astype(str)).set_index("job_id")


def with_groups(jobs: pd.DataFrame, groups: pd.DataFrame | None) -> pd.DataFrame:
    """``jobs`` with the columns of :func:`job_groups` appended (by ``job_id``, rows as they are)."""
    if groups is None:
        return jobs
    ids = jobs["job_id"].astype(str)
    return jobs.assign(**{c: ids.map(groups[c]).to_numpy() for c in groups.columns})


def job_table(result: EngineResult) -> pd.DataFrame:
    """The per-job table, from the records the engine kept (``EngineResult.records``); with pools,
    Lyra's per-job columns (``ran_on_loan``, ``lost_work_s``, ``preemptions_lost``) come last."""
    records = result.records
    static, columns = records.static, records.columns
    deadline = static["deadline"]  # None: no job has one (the column would be dropped below)
    table = pd.DataFrame(
        {
            "job_id": static["job_id"],
            "submit_time": static["submit_time"],
            "start_time": columns["start_time"],
            "end_time": columns["end_time"],
            # the trace's GPU count (an elastic policy's allocations vary; the papers class jobs by it)
            "num_gpus": static["num_gpus"],
            "duration": static["duration"],
            "preemptions": columns["preemptions"],
            **({"deadline": deadline} if deadline is not None else {}),
            "run_s": columns["run_s"],
            "shared_s": columns["shared_s"],
            "pace_s": columns["pace_s"],
            "accumulation_steps": columns["accumulation_steps"],
            "exclusive_jct_estimate": columns["exclusive_jct_estimate"],
        },
        copy=False,  # the records' columns as they are (10M jobs: no second copy)
    )
    if static["model"] is not None:
        table["model"] = static["model"]
    table["queue_s"] = table["start_time"] - table["submit_time"]
    table["jct_s"] = table["end_time"] - table["submit_time"]
    table["wait_s"] = table["jct_s"] - table["run_s"]
    table["avg_xi"] = np.where(table["run_s"] > 0, table["pace_s"] / table["run_s"].where(table["run_s"] > 0), 1.0)
    table = table.drop(columns="pace_s")
    if deadline is not None and table["deadline"].isna().all():
        table = table.drop(columns="deadline")
    table = table[[*JOB_COLUMNS, *(c for c in table.columns if c not in JOB_COLUMNS)]]
    if records.pools:
        table = table.assign(**{name: columns[name] for name in records.POOL_RESULTS})
    return table


def summarize(table: pd.DataFrame, result: EngineResult, large_job_gpus: int = LARGE_JOB_GPUS) -> dict:
    """The summary every replay reports; ``gpu_util`` is busy GPU-seconds over capacity x makespan.
    ``avg_queue_s`` is submission to first start; ``avg_wait_s`` all time without GPUs (Castor §9.2)."""
    makespan = result.last_end - result.first_submit
    jct = table["jct_s"].to_numpy()
    queue = table["queue_s"].to_numpy()
    summary = {
        "jobs": int(len(table)),
        "avg_jct_s": _stat(np.mean, jct),
        "p50_jct_s": _pct(jct, 50),
        "p95_jct_s": _pct(jct, 95),
        "p99_jct_s": _pct(jct, 99),
        "avg_queue_s": _stat(np.mean, queue),
        "p95_queue_s": _pct(queue, 95),
        "makespan_s": float(makespan),
        "gpu_util": float(result.busy_gpu_seconds / (result.total_gpus * makespan)) if makespan > 0 else 0.0,
        "preemptions": int(table["preemptions"].sum()),
        "scheduling_passes": result.scheduling_passes,
        "avg_wait_s": _stat(np.mean, table["wait_s"].to_numpy()),
        # Lyra Table 8's percentiles, and its scaling operation count (allocation changes while running)
        "p50_queue_s": _pct(queue, 50),
        "p75_queue_s": _pct(queue, 75),
        "p99_queue_s": _pct(queue, 99),
        "p75_jct_s": _pct(jct, 75),
        "scaling_ops": int(result.records.columns["resizes"].sum()),
    }
    large = (table["num_gpus"] > large_job_gpus).to_numpy()
    for name, part in (("large", large), ("small", ~large)):  # the two columns only, not the whole table
        summary[f"{name}_jobs"] = int(part.sum())
        summary[f"avg_jct_{name}_s"] = _stat(np.mean, jct[part])
        summary[f"avg_queue_{name}_s"] = _stat(np.mean, queue[part])
    summary.update(sharing_summary(table, result))
    if "deadline" in table.columns:
        has_deadline = table["deadline"].notna()
        met = (table.loc[has_deadline, "end_time"] <= table.loc[has_deadline, "deadline"]).mean()
        summary["deadline_met_fraction"] = float(met) if has_deadline.any() else math.nan
    return summary


def sharing_summary(table: pd.DataFrame, result: EngineResult) -> dict:
    """Castor's sharing metrics: eq. 24's sharing benefit (t_solo-location / t_colocation, averaged
    over the jobs that started beside another job), how many jobs shared, GPU-time spent shared, ξ."""
    shared = table["shared_s"] > 0
    started_shared = table["exclusive_jct_estimate"].notna()
    benefit = table.loc[started_shared, "exclusive_jct_estimate"] / table.loc[started_shared, "jct_s"]
    return {
        "shared_job_fraction": float(shared.mean()) if len(table) else 0.0,
        "shared_gpu_time_fraction": result.shared_gpu_seconds / result.busy_gpu_seconds if result.busy_gpu_seconds else 0.0,
        "avg_sharing_benefit": float(benefit.mean()) if len(benefit) else math.nan,
        "avg_xi": _stat(np.mean, table["avg_xi"].to_numpy()),
        "avg_xi_shared_jobs": float(table.loc[shared, "avg_xi"].mean()) if shared.any() else math.nan,
    }


def _stat(fn, values: np.ndarray) -> float:
    return float(fn(values)) if len(values) else math.nan


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan
