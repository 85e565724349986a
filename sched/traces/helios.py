"""SenseTime Helios CSV: ``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,
end_time,duration,queue``.

Times may be datetimes or seconds. ``duration`` (s) is the run time. CPU-only jobs
(``gpu_num == 0``) are dropped and counted as ``no_gpu``. All final states are kept (a cancelled
job with zero duration is then a bad duration, see ``on_bad_duration``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .common import LoadOptions, Raw, make_loader, numeric, read_csv, seconds

COLUMNS = ("job_id", "user", "vc", "gpu_num", "submit_time", "duration")


def read(path: Path | None, options: LoadOptions) -> Raw:
    """Columns used: job_id, user, vc, gpu_num, submit_time, duration; gpu_num 0 -> dropped no_gpu."""
    assert path is not None
    file = str(path)
    df = read_csv(path, COLUMNS)
    out = pd.DataFrame(
        {
            "job_id": df["job_id"],
            "submit_time": seconds(df, "submit_time", file),
            "num_gpus": numeric(df, "gpu_num", file, integer=True),
            "duration": numeric(df, "duration", file, allow_missing=True),
            "user": df["user"],
            "vc": df["vc"],
            "_row": df["_row"],
        }
    )
    cpu_only = out["num_gpus"] == 0
    dropped = {"no_gpu": int(cpu_only.sum())} if cpu_only.any() else {}
    return Raw(out[~cpu_only], file, len(out), dropped)


load = make_loader("helios", read)
