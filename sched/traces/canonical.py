"""The canonical job table itself, as CSV or Parquet (see ``schedlab.sched.traces.jobtable``).

``submit_time`` and ``deadline`` are seconds or datetimes on the same clock (a Parquet datetime
column is converted to seconds exactly as a CSV datetime is; a timedelta ``duration`` is taken in
seconds); columns outside the canonical set are an error (a misspelled optional column must not
vanish silently). Booleans (``fungible``, ``checkpoint``) accept true/false/1/0/yes/no. ``name`` is
read verbatim; ``time_limit`` (the requested run time) is seconds, > 0 where given.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .jobtable import CANONICAL_COLUMNS, DURATION_COLUMNS, REQUIRED_COLUMNS, WORKLOAD_COLUMNS
from .common import (
    LoadOptions, Raw, TraceError, check_columns, check_file, job_ids, make_loader, numeric, read_csv, seconds,
    suggest,
)

_TEXT = ("job_id", "model", "user", "vc", "name")  # read verbatim: "NA" is a name, not a missing value
_BOOL = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


#: columns a whole-file CSV read first parses as numbers (see :func:`read`)
_NUMBERS = ("submit_time", "num_gpus", "duration", "deadline", "batch_size", "iterations", "elastic_min", "elastic_max",
            "time_limit")


def _read_any(path: Path, rows: np.ndarray | None, numbers: tuple[str, ...] = ()) -> pd.DataFrame:
    if path.suffix.lower() in (".parquet", ".pq"):
        check_file(path)
        try:
            if rows is None:
                df = pd.read_parquet(path)
            else:
                from .stream import read_parquet_rows

                df = read_parquet_rows(path, rows)
        except (OSError, ValueError) as exc:  # pyarrow's errors derive from these
            raise TraceError(path, f"not a readable Parquet file: {exc}") from None
        check_columns(str(path), list(df.columns), REQUIRED_COLUMNS)
        return df if rows is not None else df.assign(_row=np.arange(1, len(df) + 1))
    return read_csv(path, REQUIRED_COLUMNS, text=_TEXT, rows=rows, numbers=numbers)


def _bool(df: pd.DataFrame, col: str, file: str) -> pd.Series:
    s = df[col]
    if s.dtype == bool:
        return s
    mapped = s.astype("str").str.strip().str.lower().map(_BOOL)
    bad = mapped.isna() & s.notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise TraceError(file, "not a boolean", int(df["_row"].iat[i]), col, s.iat[i])
    return mapped.astype("boolean")


def read(path: Path | None, options: LoadOptions, rows: np.ndarray | None = None) -> Raw:
    """Required job_id, submit_time, num_gpus and duration or model/batch_size/iterations."""
    assert path is not None
    if rows is None and path.suffix.lower() not in (".parquet", ".pq"):
        # A whole CSV: its numeric columns parsed by the CSV parser, not kept as text and parsed
        # again (10M jobs: minutes and GBs less). Any problem (a datetime, a bad value) and the text
        # read below runs instead: the same table, and exactly its errors.
        try:
            return _read(path, _NUMBERS)
        except ValueError:  # TraceError included
            pass
    return _read(path, (), rows)


def _read(path: Path, numbers: tuple[str, ...], rows: np.ndarray | None = None) -> Raw:
    file = str(path)
    df = _read_any(path, rows, numbers)
    cols = [c for c in df.columns if c != "_row"]
    for c in cols:
        if c not in CANONICAL_COLUMNS:
            close = [k for k in CANONICAL_COLUMNS if k not in cols]
            raise TraceError(file, f"unknown column {c!r}{suggest(c, close)}", column=c)
    if not set(DURATION_COLUMNS) <= set(cols):
        check_columns(file, cols, WORKLOAD_COLUMNS)
    out = pd.DataFrame({"job_id": job_ids(df, "job_id", file), "_row": df["_row"]})
    out["submit_time"] = seconds(df, "submit_time", file)
    out["num_gpus"] = numeric(df, "num_gpus", file, integer=True)
    for c in cols:
        if c == "duration":
            out[c] = numeric(df, c, file, allow_missing=True)
        elif c == "deadline":  # same clock as submit_time: seconds or datetimes
            out[c] = seconds(df, c, file, allow_missing=True)
        elif c == "iterations":  # fractional: the annotator makes duration / t_iter (sched/models/annotate.py)
            out[c] = numeric(df, c, file)
        elif c in ("batch_size", "elastic_min", "elastic_max"):
            out[c] = numeric(df, c, file, integer=True, allow_missing=c.startswith("elastic"))
        elif c in ("fungible", "heterogeneous", "checkpoint"):
            out[c] = _bool(df, c, file)
        elif c == "time_limit":  # a request: missing where the user gave none, never 0 or negative
            out[c] = numeric(df, c, file, allow_missing=True)
            bad = out[c].notna() & ~(out[c] > 0)
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise TraceError(file, "time limit must be > 0 seconds (or empty: none requested)",
                                 int(df["_row"].iat[i]), c, df[c].iat[i])
        elif c in ("model", "user", "vc", "name"):
            out[c] = df[c].astype("str")
    return Raw(out, file, len(out))


load = make_loader("canonical", read, submit="submit_time")
