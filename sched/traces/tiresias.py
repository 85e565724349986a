"""Tiresias simulator CSV: ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``.

``model_name`` becomes ``model``; ``iterations`` is kept; ``interval`` (the generator's
inter-arrival gap) is not used since ``submit_time`` already holds it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .common import LoadOptions, Raw, make_loader, numeric, read_csv, seconds

COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration")


def read(path: Path | None, options: LoadOptions) -> Raw:
    """Columns: job_id, num_gpu, submit_time (s), iterations, model_name, duration (s)."""
    assert path is not None
    file = str(path)
    df = read_csv(path, COLUMNS)
    out = pd.DataFrame(
        {
            "job_id": df["job_id"],
            "submit_time": seconds(df, "submit_time", file),
            "num_gpus": numeric(df, "num_gpu", file, integer=True),
            "duration": numeric(df, "duration", file, allow_missing=True),
            "model": df["model_name"],
            "iterations": numeric(df, "iterations", file, integer=True),
            "_row": df["_row"],
        }
    )
    return Raw(out, file, len(out))


load = make_loader("tiresias", read)
