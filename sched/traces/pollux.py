"""Pollux workloads (docs/explanation/pollux.md): the study's workload CSVs, and a generator from the Philly trace.

``pollux``: ``name,time,application,num_replicas,batch_size`` (``time`` in seconds, ``batch_size``
the *global* batch). Jobs run until convergence, so there is no duration: the table has ``model``
(the application), ``num_gpus`` (the file's GPU count), ``global_batch`` and ``batch_size`` (per-GPU,
``ceil(global / GPUs)``); ``schedlab.sched.replay.prepare`` gives each job its nominal
``duration`` (alone, at that GPU count and batch) from the goodput model.

Times keep the file's clock (``time_origin='file'`` by default, :mod:`.common`): the study's
``time`` counts from its window's start, and its simulator re-decides every 60 s from that 0, so a
job is first considered at the first multiple of 60 s at or after its ``time``. Re-basing on the
first arrival (``time_origin='first-job'``) moves every round against the arrivals and changes
round-based results (Tiresias+TunedJobs on workload-3 at load 2.0: 10,029 s instead of 10,254 s,
the study's 10,728 s).

``pollux-philly``: builds such a workload from the processed Philly CSV by the study's method: jobs
with duration >= 60 s and < 1000 GPU-hours; application by GPU-hours (< 1 cifar10 or ncf at even
odds, < 10 deepspeech2 of which half become bert, < 100 yolov3, else imagenet); GPU count and batch
drawn at random among the application's TunedJobs choices (``GoodputModel.tuned_configs``). The
window, in the options:

- default (the study): submissions in the hours of day ``[start, end)`` (seconds of the day; default
  7200-36000, hours 2-10: Pollux's "busiest 8-hour range", within 5% of the busiest 8 h of day by
  jobs and by GPU-time) of every day, overlaid on one day: ``time`` is the offset in that window.
  This is what Castor §9.1 and SJF-BSBF §VI-A's "busiest period, following Pollux" ships as
  (``conf/experiments/*-pollux.yaml``);
- ``busiest_hours``: instead the one contiguous period of the trace with the most GPU-time submitted
  in that many hours, submit times kept (a much heavier mix: many imagenet jobs).

``num_jobs`` (or ``sample``; default 160) jobs are drawn without replacement; everything is drawn
from one ``numpy`` generator seeded with ``seed``, so a workload is a function of (file, options).
Its times are re-based on the first job (``time_origin='first-job'``, the Castor and SJF-BSBF set-ups'
recorded figures); ``time_origin='file'`` keeps the window's clock (with ``busiest_hours``, the
Philly trace's own clock: Unix-epoch seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from . import philly
from .common import (
    LoadOptions, LoadReport, Raw, TraceError, _busiest_window, at_least, finalize, job_ids, numeric, read_csv,
)

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
DEFAULT_JOBS = 160  # the study's workloads
TIME_ORIGIN = "file"  # the study's clock (module docstring)
DAY = 86400.0
DEFAULT_WINDOW = (2 * 3600.0, 10 * 3600.0)  # hours 2-10 of a day
MIN_DURATION_S = 60.0
MAX_GPU_HOURS = 1000.0
#: GPU-hour buckets -> application (the study's ``workload.py``), upper bounds exclusive
BUCKETS: tuple[tuple[float, tuple[str, ...]], ...] = (
    (1.0, ("cifar10", "ncf")),
    (10.0, ("deepspeech2",)),  # half of them become bert
    (100.0, ("yolov3",)),
    (MAX_GPU_HOURS, ("imagenet",)),
)


def read(path: Path | None, options: LoadOptions) -> Raw:
    """Columns: name (-> job_id), time (s), application (-> model), num_replicas (-> num_gpus),
    batch_size (global batch -> global_batch)."""
    assert path is not None
    file = str(path)
    df = read_csv(path, COLUMNS, text=("name", "application"))  # ids verbatim: "NA" is a name
    gpus = numeric(df, "num_replicas", file, integer=True)
    batch = numeric(df, "batch_size", file, integer=True)
    for col, values in (("num_replicas", gpus), ("batch_size", batch)):
        at_least(df, col, file, values, 1)
    apps = df["application"].fillna("").str.strip()
    if (apps == "").any():
        i = int(np.flatnonzero((apps == "").to_numpy())[0])
        raise TraceError(file, "missing value", int(df["_row"].iat[i]), "application")
    out = pd.DataFrame(
        {
            "job_id": job_ids(df, "name", file),
            "submit_time": numeric(df, "time", file),
            "num_gpus": gpus,
            "model": apps,
            "batch_size": -(-batch // gpus),
            "global_batch": batch,
            "_row": df["_row"],
        }
    )
    return Raw(out, file, len(out), columns={"job_id": "name", "submit_time": "time", "num_gpus": "num_replicas",
                                             "model": "application", "global_batch": "batch_size"})


class TunedJobs(Protocol):
    """What the generator reads of an application's goodput model
    (:class:`~schedlab.sched.models.goodput.GoodputModel`, which the caller loads and passes: the trace
    layer reads no model): its TunedJobs choices ``(GPUs, global batch, seconds alone)``."""

    def tuned_configs(self) -> tuple[tuple[int, int, float], ...]: ...


def load(source: str | Path | None, options: LoadOptions | None = None) -> tuple[pd.DataFrame, LoadReport]:
    """Load a Pollux workload CSV (``name,time,application,num_replicas,batch_size``)."""
    opts = options or LoadOptions()
    if source is None:
        raise TraceError("pollux", "format 'pollux' needs a workload CSV")
    if opts.time_origin is None:
        opts = opts.model_copy(update={"time_origin": TIME_ORIGIN})
    return finalize(read(Path(source), opts), "pollux", opts)


def generate(trace: pd.DataFrame, num_jobs: int, seed: int = 0, window: tuple[float, float] = DEFAULT_WINDOW,
             busiest_hours: float | None = None, *, models: Mapping[str, TunedJobs]) -> pd.DataFrame:
    """A Pollux workload (``job_id, submit_time, num_gpus, model, batch_size, global_batch``) from a
    Philly table with ``submit_time`` (absolute s), ``duration`` and ``num_gpus``; each job's GPU count
    and batch are drawn among its application's TunedJobs choices in ``models`` (the applications'
    goodput models by name)."""
    missing = sorted(({a for _, names in BUCKETS for a in names} | {"bert"}) - set(models))
    if missing:
        raise ValueError(f"pollux-philly needs goodput models for {missing} (have {sorted(models)})")
    gpu_hours = trace["duration"].to_numpy(float) * trace["num_gpus"].to_numpy(float) / 3600.0
    keep = (trace["duration"].to_numpy(float) >= MIN_DURATION_S) & (gpu_hours < MAX_GPU_HOURS)
    jobs = trace.loc[keep, ["submit_time", "duration", "num_gpus"]].sort_values("submit_time", kind="stable")
    jobs = jobs.reset_index(drop=True)
    if busiest_hours is not None:
        jobs = jobs[_busiest_window(jobs, busiest_hours * 3600.0, num_jobs)].reset_index(drop=True)
        times = jobs["submit_time"].to_numpy(float)
    else:
        start, end = window
        if not 0 < end - start <= DAY:
            raise ValueError(f"pollux-philly window [{start}, {end}) must span (0, 24 h] of a day")
        offset = (jobs["submit_time"].to_numpy(float) - start) % DAY  # seconds since the window opened
        inside = offset < end - start
        jobs = jobs[inside].reset_index(drop=True)
        times = offset[inside]
    if len(jobs) < num_jobs:
        raise ValueError(f"pollux-philly: only {len(jobs)} Philly jobs pass the filters and window, {num_jobs} asked")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(jobs), num_jobs, replace=False))
    records = []
    for i in chosen:
        hours = float(jobs["duration"].iat[i]) * int(jobs["num_gpus"].iat[i]) / 3600.0
        names = next(names for bound, names in BUCKETS if hours < bound)
        app = names[int(rng.integers(len(names)))]
        if app == "deepspeech2" and rng.integers(2):
            app = "bert"
        configs = models[app].tuned_configs()
        gpus, batch, _ = configs[int(rng.integers(len(configs)))]
        records.append((float(times[i]), app, gpus, batch))
    records.sort(key=lambda r: r[0])  # stable: ties keep the trace order
    return pd.DataFrame(
        {
            "job_id": [f"{app}-{k}" for k, (_, app, _, _) in enumerate(records)],
            "submit_time": [r[0] for r in records],
            "num_gpus": np.array([r[2] for r in records], dtype="int64"),
            "model": [r[1] for r in records],
            "batch_size": np.array([-(-r[3] // r[2]) for r in records], dtype="int64"),
            "global_batch": np.array([r[3] for r in records], dtype="int64"),
        }
    )


def load_philly(source: str | Path | None, options: LoadOptions | None = None,
                applications: Mapping[str, TunedJobs] | None = None) -> tuple[pd.DataFrame, LoadReport]:
    """Generate a Pollux workload from the processed Philly CSV (module docstring). Options used:
    ``num_jobs`` or ``sample`` (default 160), ``seed``, ``start``/``end`` (seconds of the day) or
    ``busiest_hours``; then ``max_jobs``, ``load`` and ``max_gpus`` as for every trace. ``applications``:
    the Pollux applications' goodput models by name (``sched.models.goodput.load_applications``),
    required: the generator draws from them."""
    opts = options or LoadOptions()
    if source is None:
        raise TraceError("pollux-philly", "format 'pollux-philly' needs the Philly CSV (philly_jobs_pollux.csv)")
    if applications is None:
        raise ValueError("format 'pollux-philly' needs the Pollux applications' goodput models: pass"
                         " load_trace(..., applications=schedlab.sched.models.goodput.load_applications(root))")
    if opts.busiest_hours is not None and (opts.start is not None or opts.end is not None):
        raise ValueError("pollux-philly: give either a window of the day (start/end) or busiest_hours, not both")
    raw = philly.read(Path(source), opts)
    num_jobs = opts.num_jobs or opts.sample or DEFAULT_JOBS
    window = (opts.start if opts.start is not None else DEFAULT_WINDOW[0],
              opts.end if opts.end is not None else DEFAULT_WINDOW[1])
    bad = ~(raw.df["duration"].to_numpy(float) > 0)
    table = generate(raw.df[~bad], num_jobs, opts.seed, window, opts.busiest_hours, models=applications)
    table["_row"] = np.arange(1, len(table) + 1)
    desc = (f"pollux-philly({source}, seed={opts.seed}, num_jobs={num_jobs}, "
            + (f"busiest_hours={opts.busiest_hours})" if opts.busiest_hours is not None else f"window={window})"))
    consumed = opts.model_copy(update={"start": None, "end": None, "busiest_hours": None, "sample": None})
    return finalize(Raw(table, desc, len(table)), "pollux-philly", consumed)
