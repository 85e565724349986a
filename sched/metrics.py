"""Replay results (DESIGN.md, "Replay result"): the per-job table and the summary dict."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from schedlab.sched.engine import EngineResult

JOB_COLUMNS = (
    "job_id", "submit_time", "start_time", "end_time", "num_gpus", "duration", "queue_s", "jct_s",
    "preemptions",
)


def job_table(result: EngineResult) -> pd.DataFrame:
    jobs = result.jobs
    table = pd.DataFrame(
        {
            "job_id": [j.job_id for j in jobs],
            "submit_time": np.fromiter((j.submit_time for j in jobs), float, len(jobs)),
            "start_time": np.fromiter((j.start_time for j in jobs), float, len(jobs)),
            "end_time": np.fromiter((j.end_time for j in jobs), float, len(jobs)),
            "num_gpus": np.fromiter((j.num_gpus for j in jobs), np.int64, len(jobs)),
            "duration": np.fromiter((j.duration for j in jobs), float, len(jobs)),
            "preemptions": np.fromiter((j.preemptions for j in jobs), np.int64, len(jobs)),
            "deadline": np.fromiter((j.deadline for j in jobs), float, len(jobs)),
        }
    )
    table["queue_s"] = table["start_time"] - table["submit_time"]
    table["jct_s"] = table["end_time"] - table["submit_time"]
    if table["deadline"].isna().all():
        table = table.drop(columns="deadline")
    return table[[*JOB_COLUMNS, *(c for c in table.columns if c not in JOB_COLUMNS)]]


def summarize(table: pd.DataFrame, result: EngineResult) -> dict:
    """The summary every replay reports; ``gpu_util`` is busy GPU-seconds over capacity x makespan."""
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
    }
    if "deadline" in table.columns:
        has_deadline = table["deadline"].notna()
        met = (table.loc[has_deadline, "end_time"] <= table.loc[has_deadline, "deadline"]).mean()
        summary["deadline_met_fraction"] = float(met) if has_deadline.any() else math.nan
    return summary


def _stat(fn, values: np.ndarray) -> float:
    return float(fn(values)) if len(values) else math.nan


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan
