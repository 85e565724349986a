"""Microsoft ITP CSV (ElasticFlow raw traces): ``job_id,submission_time,duration,num_gpu``.

``submission_time`` and ``duration`` are seconds. The files carry no VC; ``vc`` is set to the file
name's stem (e.g. ``cluster01``) so that several clusters stay distinguishable.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import LoadOptions, Raw, make_loader, read_mapped

COLUMNS = {
    "job_id": ("job_id", "text"),
    "submit_time": ("submission_time", "seconds"),
    "num_gpus": ("num_gpu", "int"),
    "duration": ("duration", "float"),
}


def read(path: Path | None, options: LoadOptions, rows: np.ndarray | None = None) -> Raw:
    """Columns: job_id, submission_time (s), duration (s), num_gpu; vc = file stem."""
    assert path is not None
    return read_mapped(path, COLUMNS, constant={"vc": path.stem}, rows=rows)


load = make_loader("itp", read, submit="submission_time")
