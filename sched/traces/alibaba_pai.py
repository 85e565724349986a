"""Alibaba PAI GPU trace (cluster-trace-gpu-v2020): ``pai_job_table`` joined with ``pai_task_table``.

* job table: ``job_name,inst_id,user,status,start_time,end_time`` (``start_time`` = submission);
* task table: ``job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type``.

Both with or without a header row (the real release has none). ``source`` is a directory holding
``pai_job_table.csv`` and ``pai_task_table.csv``, or the job table (its task table is the sibling
file with ``job`` replaced by ``task`` in the name).

* ``num_gpus`` = ceil(sum over the job's tasks of inst_num * plan_gpu / 100) (``plan_gpu`` is percent
  of one GPU; missing = 0; a negative ``inst_num`` or ``plan_gpu`` is an error). Fractional demands are
  rounded up, counted as ``repaired["fractional_gpu_rounded_up"]``.
* ``duration`` = latest task end - earliest task start (the job's running span).
* dropped: ``no_tasks`` (no task rows), ``no_gpu`` (zero GPU demand), ``never_ran`` (no task start),
  ``no_end_time`` (a job still running at the snapshot). Rows in errors are rows of the named file.
* ``name``: when the group-tag table is there too (``pai_group_tag_table.csv`` in the directory, or the
  job table's sibling with ``job`` replaced by ``group_tag``: ``inst_id,user,gpu_type_spec,group,workload``),
  the job's ``group`` (joined on ``inst_id``): the release's tag for instances with similar entry
  scripts, command-line parameters, data sources and sinks, which it calls repeated instances. The
  ``job_name`` itself is a per-job hash (one per ``inst_id``), so it is the job's id, not a name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .common import (
    MAX_INTEGER, LoadOptions, Raw, TraceError, at_least, job_ids, make_loader, numeric, read_csv, seconds,
)

JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time",
                "plan_cpu", "plan_mem", "plan_gpu", "gpu_type")
GROUP_COLUMNS = ("inst_id", "user", "gpu_type_spec", "group", "workload")
_TEXT = ("job_name", "inst_id", "user", "task_name", "gpu_type", "group")  # verbatim: "NA" is a name


def tables(path: Path) -> tuple[Path, Path]:
    """(job table, task table) for a directory or a job-table path."""
    if path.is_dir():
        job, task = path / "pai_job_table.csv", path / "pai_task_table.csv"
    else:
        job, task = path, path.with_name(path.name.replace("job", "task"))
    for p in (job, task):
        if not p.is_file() or job == task:
            raise TraceError(p, "PAI trace needs both pai_job_table and pai_task_table files")
    return job, task


def group_table(job: Path) -> Path | None:
    """The group-tag table beside the job table, if there is one."""
    path = job.with_name(job.name.replace("job", "group_tag"))
    return path if path.is_file() and path != job else None


def _groups(path: Path) -> pd.Series:
    """``group`` by ``inst_id`` (an instance listed twice: its first row)."""
    g = read_csv(path, GROUP_COLUMNS, header_optional=True, text=_TEXT)
    return g.drop_duplicates("inst_id").set_index("inst_id")["group"]


def _tasks(path: Path) -> pd.DataFrame:
    file = str(path)
    t = read_csv(path, TASK_COLUMNS, header_optional=True, text=_TEXT)
    # a negative count or percentage is an error, never a demand of zero GPUs (dropped as no_gpu)
    instances = at_least(t, "inst_num", file, numeric(t, "inst_num", file), 0)
    gpu = instances * at_least(t, "plan_gpu", file, numeric(t, "plan_gpu", file, allow_missing=True), 0).fillna(0.0)
    end = seconds(t, "end_time", file, allow_missing=True)
    return pd.DataFrame(
        {
            "job_name": t["job_name"],
            "gpu_pct": gpu,
            "start": seconds(t, "start_time", file, allow_missing=True),
            "end": end,
            "end_missing": end.isna(),
        }
    ).groupby("job_name", sort=False).agg(
        gpu_pct=("gpu_pct", "sum"), start=("start", "min"), end=("end", "max"),
        end_missing=("end_missing", "max"),
    )


def read(path: Path | None, options: LoadOptions) -> Raw:
    """Join job and task tables; GPUs from plan_gpu percentages, duration from the task span."""
    assert path is not None
    job_path, task_path = tables(path)
    file = str(job_path)
    j = read_csv(job_path, JOB_COLUMNS, header_optional=True, text=_TEXT)
    jobs = pd.DataFrame(
        {
            "job_id": job_ids(j, "job_name", file),
            "submit_time": seconds(j, "start_time", file),
            "user": j["user"],
            "_row": j["_row"],
        }
    ).join(_tasks(task_path), on="job_id")
    groups = group_table(job_path)
    if groups is not None:
        jobs["name"] = j["inst_id"].map(_groups(groups))
    reasons = {
        "no_tasks": jobs["gpu_pct"].isna(),
        "no_gpu": jobs["gpu_pct"].notna() & ~(jobs["gpu_pct"] > 0),
    }
    reasons["never_ran"] = ~(reasons["no_tasks"] | reasons["no_gpu"]) & jobs["start"].isna()
    ran = ~(reasons["no_tasks"] | reasons["no_gpu"] | reasons["never_ran"])
    reasons["no_end_time"] = ran & (jobs["end_missing"].astype(bool) | jobs["end"].isna())
    drop = np.logical_or.reduce([m.to_numpy() for m in reasons.values()])
    keep = jobs[~drop]
    demand = keep["gpu_pct"].to_numpy() / 100.0
    if (demand > MAX_INTEGER).any():  # inst_num * plan_gpu: would wrap around as an int64
        i = int(np.flatnonzero(demand > MAX_INTEGER)[0])
        raise TraceError(task_path, f"GPU demand of job {keep['job_id'].iat[i]!r} (sum of inst_num * "
                         "plan_gpu / 100) out of range (larger than 2**53)", column="plan_gpu")
    gpus = np.ceil(demand - 1e-6).astype("int64")
    frac = int(np.count_nonzero(np.abs(demand - gpus) > 1e-6))
    out = keep.assign(num_gpus=gpus, duration=keep["end"] - keep["start"])
    out = out[["job_id", "submit_time", "num_gpus", "duration", "user", *(["name"] if groups is not None else []), "_row"]]
    return Raw(
        out, file, len(jobs),
        {k: int(m.sum()) for k, m in reasons.items() if m.any()},
        {"fractional_gpu_rounded_up": frac} if frac else {},
        {"job_id": "job_name", "submit_time": "start_time"},
    )


load = make_loader("alibaba-pai", read)
