"""Processed Philly CSV (Pollux/Sia artifact): ``timestamp,duration,num_gpus,gpu_time,cluster``.

``timestamp`` is the submit datetime, ``duration`` solo seconds, ``cluster`` the Philly VC hash
(used as ``vc``). The file has no job ids: ``job_id`` is ``philly-<row>`` (1-based data row), so ids
are stable for a given file. ``gpu_time`` (= duration * num_gpus) is not used.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .common import LoadOptions, Raw, make_loader, numeric, read_csv, seconds

COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


def read(path: Path | None, options: LoadOptions, rows: np.ndarray | None = None) -> Raw:
    """Columns: timestamp (datetime), duration (s), num_gpus, cluster (-> vc)."""
    assert path is not None
    file = str(path)
    df = read_csv(path, COLUMNS, text=("cluster",), rows=rows)
    out = pd.DataFrame(
        {
            "job_id": "philly-" + df["_row"].astype(str),
            "submit_time": seconds(df, "timestamp", file),
            "num_gpus": numeric(df, "num_gpus", file, integer=True),
            "duration": numeric(df, "duration", file, allow_missing=True),
            "vc": df["cluster"],
            "_row": df["_row"],
        }
    )
    return Raw(out, file, len(out), columns={"submit_time": "timestamp", "vc": "cluster"})


load = make_loader("philly", read, submit="timestamp")
