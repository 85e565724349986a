"""What an estimator may read of a job before it ends: its trace row's submit-time fields
(:class:`JobFeatures`), and per-job random draws that depend only on (seed, the job's trace position)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

DAY_S = 86400.0
_BLOCK = 4096  # draws are made this many jobs at a time


@dataclass(frozen=True)
class JobFeatures:
    """Per job, in the order of the replay's job table (``Job.index``): ``user`` and ``name`` as codes
    (-1 where the trace gives none), GPUs, the submit hour of day (on the trace's clock, which for most
    formats starts at the first job, ``sched/traces/common.py``), the requested ``time_limit`` (None
    when the table has no such column; NaN where a job gives none) and the true ``duration``, which
    only an estimator defined on it (``noisy``, ``requested`` without a limit) is handed."""

    user: np.ndarray
    name: np.ndarray
    gpus: np.ndarray
    hour: np.ndarray
    time_limit: np.ndarray | None
    duration: np.ndarray

    @classmethod
    def of(cls, table: pd.DataFrame) -> JobFeatures:
        n = len(table)
        return cls(
            user=_codes(table, "user", n),
            name=_codes(table, "name", n),
            gpus=table["num_gpus"].to_numpy(dtype=np.int64),
            hour=(table["submit_time"].to_numpy(dtype=float) % DAY_S) / 3600.0,
            time_limit=table["time_limit"].to_numpy(dtype=float, na_value=math.nan) if "time_limit" in table else None,
            duration=table["duration"].to_numpy(dtype=float),
        )


def _codes(table: pd.DataFrame, column: str, n: int) -> np.ndarray:
    if column not in table:
        return np.full(n, -1, dtype=np.int64)
    codes, _ = pd.factorize(table[column], use_na_sentinel=True)
    return codes.astype(np.int64)


class Draws:
    """One random value per job, a function of (seed, stream, the job's index) only: whatever order the
    jobs arrive in and however many there are, job ``i`` always gets the same draw."""

    def __init__(self, seed: int, stream: int, kind: str) -> None:
        self.seed, self.stream, self.kind = seed, stream, kind
        self._block, self._values = -1, np.empty(0)

    def __getitem__(self, index: int) -> float:
        block = index // _BLOCK
        if block != self._block:
            rng = np.random.default_rng([self.seed, self.stream, block])
            self._values = rng.standard_normal(_BLOCK) if self.kind == "normal" else rng.random(_BLOCK)
            self._block = block
        return float(self._values[index % _BLOCK])
