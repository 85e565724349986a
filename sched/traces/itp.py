"""Microsoft ITP CSV (ElasticFlow raw traces): ``job_id,submission_time,duration,num_gpu``.

``submission_time`` and ``duration`` are seconds. The files carry no VC; ``vc`` is set to the file
name's stem (e.g. ``cluster01``) so that several clusters stay distinguishable.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .common import LoadOptions, Raw, make_loader, numeric, read_csv, seconds

COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")


def read(path: Path | None, options: LoadOptions) -> Raw:
    """Columns: job_id, submission_time (s), duration (s), num_gpu; vc = file stem."""
    assert path is not None
    file = str(path)
    df = read_csv(path, COLUMNS)
    out = pd.DataFrame(
        {
            "job_id": df["job_id"],
            "submit_time": seconds(df, "submission_time", file),
            "num_gpus": numeric(df, "num_gpu", file, integer=True),
            "duration": numeric(df, "duration", file, allow_missing=True),
            "vc": path.stem,
            "_row": df["_row"],
        }
    )
    return Raw(out, file, len(out))


load = make_loader("itp", read)
