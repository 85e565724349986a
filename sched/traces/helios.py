"""SenseTime Helios CSV: ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,
end_time,duration,queue``, and ``jobname`` where the file has it (the Helios artifact's QSSF estimator
reads it from ``cluster_log.csv``; the public release leaves it out) as the job's ``name``.

Times may be datetimes or seconds. ``duration`` (s) is the run time. CPU-only jobs
(``gpu_num == 0``) are dropped and counted as ``no_gpu``. All final states are kept (a cancelled
job with zero duration is then a bad duration, see ``on_bad_duration``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import LoadOptions, Raw, make_loader, read_mapped

COLUMNS = {
    "job_id": ("job_id", "text"),
    "submit_time": ("submit_time", "seconds"),
    "num_gpus": ("gpu_num", "int"),
    "duration": ("duration", "float"),
    "user": ("user", "text"),
    "vc": ("vc", "text"),
}
OPTIONAL = {"name": ("jobname", "text")}


def read(path: Path | None, options: LoadOptions, rows: np.ndarray | None = None) -> Raw:
    """Columns used: job_id, user, vc, gpu_num, submit_time, duration (jobname if present); gpu_num 0 ->
    dropped no_gpu."""
    assert path is not None
    raw = read_mapped(path, COLUMNS, rows=rows, optional=OPTIONAL)
    cpu_only = raw.df["num_gpus"] == 0
    dropped = {"no_gpu": int(cpu_only.sum())} if cpu_only.any() else {}
    return Raw(raw.df[~cpu_only], raw.file, raw.read, dropped, columns=raw.columns)


load = make_loader("helios", read, submit="submit_time")
