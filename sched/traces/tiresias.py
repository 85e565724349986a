"""Tiresias simulator CSV: ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``.

``model_name`` becomes ``model``; ``iterations`` is kept; ``interval`` (the generator's
inter-arrival gap) is not used since ``submit_time`` already holds it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import LoadOptions, Raw, make_loader, read_mapped

COLUMNS = {
    "job_id": ("job_id", "text"),
    "submit_time": ("submit_time", "seconds"),
    "num_gpus": ("num_gpu", "int"),
    "duration": ("duration", "float"),
    "model": ("model_name", "text"),
    "iterations": ("iterations", "int"),
}


def read(path: Path | None, options: LoadOptions, rows: np.ndarray | None = None) -> Raw:
    """Columns: job_id, num_gpu, submit_time (s), iterations, model_name, duration (s)."""
    assert path is not None
    return read_mapped(path, COLUMNS, rows=rows)


load = make_loader("tiresias", read, submit="submit_time")
