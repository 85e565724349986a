"""Streamed reads: with ``start``/``end`` or ``max_jobs``, read only the rows a load needs.

1. **Scan** the submit-time column of the whole file, and only that column (CSV: in chunks of
   ``CHUNK`` rows; Parquet: that one column), each chunk parsed as the whole-file read parses it.
   This gives the trace start, the file-order check and every row's submit time.
2. **Select** the rows submitted in ``[start, end)`` (from the time origin: the trace start, or
   the file's time 0 with ``time_origin='file'``), and of those, with
   ``max_jobs``, the first ``k`` in submit order (with every row tied with the k-th), ``k`` starting
   at ``max_jobs``.
3. **Read** only the selected rows, with the format's own reader, and :func:`~.common.finalize`
   them. Where rows are dropped (VC filter, bad durations, oversize, duplicates, ...) and fewer than
   ``max_jobs`` jobs are left while rows remain, ``k`` doubles and step 3 repeats.

The table is the whole-file load's, bit for bit, and so are ``read``, ``kept``,
``repaired["unsorted_sorted"]`` and every error the scan can see (submit times: not a time,
implausible, negative, out of order with ``on_unsorted='error'``, missing). What differs, by design:

* a row the selection leaves out is parsed only for its submit time: a bad value in another column
  of such a row is not an error (that job is not replayed), nor is a duplicate id among such rows;
* such rows are counted as ``dropped["outside_window"]`` (submitted outside the window) or
  ``dropped["max_jobs"]`` (in the window, after the jobs kept): never under a reason only their
  other columns would show (``no_gpu``, ``vc_filter``, ``bad_duration``, ``oversize``,
  ``duplicate_id``). Nothing is dropped silently: ``read == kept + sum(dropped)`` still holds;
* ``repaired["oversize_clipped"]`` and ``["duplicate_id_renamed"]`` count the rows read only (a
  whole read also counts rows it repairs and then drops as beyond ``max_jobs``).
* the scan parses one field per row: a malformed row (more fields than the header) is the whole
  read's error where it is selected, but left out it is counted like any row left out, its
  submit time taken from its field in the submit column's position.

Anything unusual in the scan (an unreadable chunk, a submit-time error, times given in different
forms in different chunks, an implausible or negative time, unsorted times under ``on_unsorted='error'``)
falls back to the whole-file read, so that errors are exactly the whole-file read's.
``busiest_hours`` and ``sample`` need every job of the window: with them only the window streams.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .common import (
    MAX_SECONDS, NA_STRINGS, LoadOptions, LoadReport, NothingLeft, Reader, Scan, TraceError, _header, finalize,
    origin, seconds,
)

#: rows per chunk, in the scan and in reading selected rows
CHUNK = 500_000
#: selected rows further apart than this are read by separate reads (each skips the rows before it)
GAP = 2_000_000
_FAILED = (TraceError, ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError)


def _kind(value: Any) -> tuple[bool, bool]:
    """(a number?, a datetime with a UTC offset?) of a submit time as text."""
    if pd.notna(pd.to_numeric(value, errors="coerce")):
        return True, False
    try:
        return False, pd.Timestamp(value).tzinfo is not None
    except (ValueError, TypeError):
        return False, False


def _scan_numbers(path: Path, raw_name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The fast scan of a column of plain numbers, parsed by the CSV parser itself (the same
    correctly rounded parser ``pd.to_numeric`` uses); None where a value is not a number."""
    try:
        chunks = pd.read_csv(path, usecols=[raw_name], dtype={raw_name: "float64"}, skip_blank_lines=False,
                             skipinitialspace=True, keep_default_na=False, na_values={raw_name: NA_STRINGS},
                             chunksize=CHUNK)
        v = np.concatenate([c[raw_name].to_numpy(dtype="float64") for c in chunks] or [np.zeros(0)])
    except ValueError:
        return None
    if np.isinf(v).any():  # an error: the string scan names it
        return None
    known = ~np.isnan(v)
    if known.all():
        return np.arange(len(v)), v, np.zeros(0, "int64")
    idx = np.arange(len(v))
    return idx[known], v[known], idx[~known]


def _scan_csv(path: Path, col: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(positions, submit seconds) of the rows with a submit time, and positions of the rows
    without one (blank lines, or missing values the full read of those rows reports); None: fall back."""
    names = [c.strip() for c in _header(path)]
    if names.count(col) != 1:
        return None
    raw_name = _header(path)[names.index(col)]
    fast = _scan_numbers(path, raw_name)
    if fast is not None:
        return fast
    pos, st, missing, kinds = [], [], [], set()
    offset = 0
    chunks = pd.read_csv(path, usecols=[raw_name], dtype=str, skip_blank_lines=False, skipinitialspace=True,
                         keep_default_na=False, na_values={raw_name: NA_STRINGS}, chunksize=CHUNK)
    for chunk in chunks:
        s = chunk[raw_name]
        idx = np.arange(offset, offset + len(s))
        offset += len(s)
        miss = s.isna().to_numpy()
        missing.append(idx[miss])
        if miss.all():
            continue
        part = pd.DataFrame({col: s[~miss].to_numpy(), "_row": idx[~miss] + 1})
        kinds.add(_kind(part[col].iat[0]))
        st.append(seconds(part, col, str(path)).to_numpy(dtype="float64"))
        pos.append(idx[~miss])
    if len(kinds) > 1:  # numbers in one chunk, datetimes in another: the whole read names the row
        return None
    empty = np.zeros(0, "int64")
    return (np.concatenate(pos or [empty]), np.concatenate(st or [np.zeros(0)]),
            np.concatenate(missing or [empty]))


def _scan_parquet(path: Path, col: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    import pyarrow.parquet as pq

    if col not in pq.ParquetFile(path).schema_arrow.names:
        return None
    s = pq.read_table(path, columns=[col]).to_pandas()[col]
    if s.isna().any():  # the whole read names the row
        return None
    st = seconds(pd.DataFrame({col: s, "_row": np.arange(1, len(s) + 1)}), col, str(path))
    return np.arange(len(s)), st.to_numpy(dtype="float64"), np.zeros(0, "int64")


def _spans(rows: np.ndarray) -> Iterator[tuple[int, int]]:
    """[first, last] of runs of sorted ``rows`` no more than ``GAP`` apart."""
    if not len(rows):
        return
    cut = np.flatnonzero(np.diff(rows) > GAP)
    for a, b in zip(np.r_[0, cut + 1], np.r_[cut, len(rows) - 1], strict=True):
        yield int(rows[a]), int(rows[b])


def read_rows(path: Path, rows: np.ndarray, *, na_values: dict[str, Any], **kw: Any) -> pd.DataFrame:
    """The data rows ``rows`` (0-based, sorted) of a CSV with a header row, as ``pd.read_csv(path,
    **kw)`` reads them, with ``_row`` (1-based); only the spans holding them are parsed."""
    names = list(pd.read_csv(path, nrows=0, skipinitialspace=True).columns)
    parts = [pd.DataFrame(columns=names, dtype=str)]
    for first, last in _spans(rows):
        chunks = pd.read_csv(path, header=None, names=names, skiprows=1 + first, nrows=last - first + 1,
                             chunksize=CHUNK, na_values=na_values, **kw)
        offset = first
        for chunk in chunks:
            idx = np.arange(offset, offset + len(chunk))
            offset += len(chunk)
            keep = np.isin(idx, rows)
            parts.append(chunk[keep].assign(_row=idx[keep] + 1))
    df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].assign(_row=np.zeros(0, "int64"))
    df["_row"] = df["_row"].astype("int64")
    return df


def read_parquet_rows(path: Path, rows: np.ndarray) -> pd.DataFrame:
    """The rows ``rows`` (0-based, sorted) of a Parquet file, reading only the row groups holding them."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    ends = np.cumsum([f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)])
    starts = ends - np.array([f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)])
    groups = sorted(set(np.searchsorted(ends, rows, side="right").tolist()))
    df = f.read_row_groups(groups).to_pandas() if groups else f.schema_arrow.empty_table().to_pandas()
    index = np.concatenate([np.arange(starts[g], ends[g]) for g in groups] or [np.zeros(0, "int64")])
    keep = np.isin(index, rows)
    return df[keep].reset_index(drop=True).assign(_row=index[keep] + 1)


def load_streamed(
    path: Path, fmt: str, reader: Reader, submit: str, options: LoadOptions
) -> tuple[pd.DataFrame, LoadReport] | None:
    """Load reading only the rows the window and ``max_jobs`` need; None: read the whole file."""
    parquet = path.suffix.lower() in (".parquet", ".pq")
    try:
        scanned = (_scan_parquet if parquet else _scan_csv)(path, submit)
    except _FAILED:
        return None
    if scanned is None:
        return None
    pos, st, missing = scanned
    if not len(st) or (np.abs(st) > MAX_SECONDS).any() or (st < 0).any():  # the whole read's error
        return None
    late = int(np.count_nonzero(st < np.maximum.accumulate(st)))
    if late and options.on_unsorted == "error":
        return None
    t0 = float(st.min())
    span = float(st.max()) - t0
    rel = st if origin(options) == "file" else st - t0  # the window counts from the time origin
    w, sw = pos, st  # the window's rows (positions in the file) and their submit times
    if options.start is not None or options.end is not None:
        window = np.ones(len(st), bool)
        if options.start is not None:
            window &= rel >= options.start
        if options.end is not None:
            window &= rel < options.end
        w, sw = pos[window], st[window]
    del rel
    prune = options.max_jobs is not None and options.busiest_hours is None and options.sample is None
    k = options.max_jobs if prune else len(w)
    assert k is not None
    while True:
        # the first k window rows in submit order, with every row tied with the k-th
        chosen = w if k >= len(w) else w[sw <= np.partition(sw, k - 1)[k - 1]]
        n = len(chosen)
        unread = {"outside_window": len(st) - len(w), "max_jobs": len(w) - n}
        raw = reader(path, options, rows=np.sort(np.concatenate([chosen, missing])))
        assert raw.read == n, (raw.read, n)  # a row without a submit time is blank, or an error above
        raw.read = len(st)
        raw.scan = Scan(t0, late, span, len(w), {r: c for r, c in unread.items() if c})
        try:
            table, report = finalize(raw, fmt, options)
        except NothingLeft:
            if n == len(w):
                raise
        else:
            if n == len(w) or options.max_jobs is None or report.kept >= options.max_jobs:
                return table, report
        k *= 2
