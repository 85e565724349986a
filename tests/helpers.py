"""Helpers the tests import (``from helpers import …``; pytest puts tests/ on sys.path)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def shared_data(*parts: str) -> Path:
    """A path in ../shared/data, or skip the test when that data is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not present: {path}")
    return path


def make_table(rows: list[tuple[str, float, int, float]]) -> pd.DataFrame:
    """A canonical job table from (job_id, submit_time, num_gpus, duration) rows."""
    return pd.DataFrame(rows, columns=["job_id", "submit_time", "num_gpus", "duration"])
