"""Shared validation, repair and option logic for every trace loader.

A format module only *reads* its file into a :class:`Raw` table (canonical column names, a
``_row`` column holding each job's 1-based data row in the source file, its own drop counts);
:func:`finalize` then applies, in this order:

0. implausible times (not finite, or beyond ``MAX_SECONDS``), negative submit times -> error
1. unsorted submit times     -> error, or stable sort (``on_unsorted``; counted in ``repaired``)
2. time window ``start/end`` -> on submit_time minus the time origin (``time_origin``, below)
3. VC filter ``vcs``
4. bad durations (NaN/zero/negative) -> ``on_bad_duration``
5. demand larger than the cluster (``max_gpus``) -> ``on_oversize``
6. duplicate job ids          -> ``on_duplicate_id`` (first occurrence wins)
7. sort by (submit_time, job_id), keep the first ``max_jobs``
8. rebase (``time_origin``) and load scaling (submit_time / load)

``time_origin`` says which trace time becomes the replay's 0 (:data:`TIME_ORIGINS`): ``first-job``
(every format but ``pollux``) puts the earliest kept job at 0 and counts the window from the earliest
submit time read; ``file`` (``pollux``'s default) keeps the file's own clock, so both count from
the file's time 0. Per-job JCT (end - submit) and makespan (last end - first submit, not from 0) do
not depend on it; what does is any grid on the absolute replay clock: the 60 s rounds of
``pollux``/``optimus``/``afs``/``tiresias`` on goodput workloads (a job arriving at ``t`` waits for
the first multiple of 60 s >= ``t``, as in Pollux's simulator) and the lending period of
``--inference-load``. Event-driven policies give the same schedule shifted in time (their times
may differ in the last float bits).

With a window or ``max_jobs``, a format whose reader takes ``rows=`` reads only the rows it needs
(:mod:`.stream`); :class:`Raw` ``.scan`` then carries what steps 1-2 need from the whole file.

Row convention of every :class:`TraceError`: **row N is the N-th data row of the file, 1-based,
header excluded** (so in a CSV with a header, row N is on line N+1; in a headerless CSV, row N is
line N; in a JSON job list, row N is the N-th job object). A :class:`JobError` found after loading
(annotation, durations) names the N-th row of the job table the same way until
:meth:`LoadReport.locate` names the source file's data row; the inference-load reader
(``sched/models/inference.py``) follows the same convention.
"""

from __future__ import annotations

import csv
import difflib
import errno
import re
import stat
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd
from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from schedlab.checks import plain
from schedlab.sched.strict import UserModel

from .jobtable import CANONICAL_COLUMNS, in_canonical_order

ROW_CONVENTION = "rows are 1-based data rows, header excluded"
#: which trace time becomes the replay's 0 (module docstring); ``first-job`` is the default but for ``pollux``
TimeOrigin = Literal["first-job", "file"]
TIME_ORIGINS: tuple[str, ...] = get_args(TimeOrigin)
_NO_VALUE = object()


@dataclass(frozen=True)
class Hint:
    """An option that would get past an error: ``option`` (a ``load_trace``/:class:`LoadOptions`
    name), the ``choices`` to give it, and what that does."""

    option: str
    choices: tuple[str, ...]
    effect: str = ""


class TraceError(ValueError):
    """Bad trace input. The message names the file, the row (1-based data row, header excluded)
    and the column (the file's own name) where known; the same are kept as attributes. A ``hint``
    names the option that would help: ``str(err)`` spells it as in Python (``on_oversize='drop'``),
    :meth:`describe` as the caller spells options (the CLI: ``--on-oversize drop``)."""

    def __init__(
        self,
        file: str | Path,
        message: str,
        row: int | None = None,
        column: str | None = None,
        value: Any = _NO_VALUE,
        hint: Hint | None = None,
        job: str | None = None,
    ) -> None:
        self.file, self.row, self.column, self.message, self.hint = str(file), row, column, message, hint
        self.value = plain(value)  # 5, not np.int64(5)
        self.job = job  # the row's job id, where the row is a job of a table already loaded
        super().__init__(self.describe())

    def describe(self, flag: Callable[[str], str] | None = None) -> str:
        """The message, with the hint's option named by ``flag(option)`` (default: as in Python)."""
        where = [self.file]
        if self.row is not None:
            where.append(f"row {self.row}" + (f" (job {self.job!r})" if self.job is not None else ""))
        if self.column is not None:
            where.append(f"column {self.column!r}")
        msg = ", ".join(where) + ": " + self.message
        if self.hint is not None:
            h = self.hint
            if flag is None:
                values = " or ".join(map(repr, h.choices)) if len(h.choices) <= 3 else f"one of {list(h.choices)}"
                msg += f"; pass {h.option}={values}"
            else:
                values = " or ".join(h.choices) if len(h.choices) <= 3 else f"one of {', '.join(h.choices)}"
                msg += f"; pass {flag(h.option)} {values}"
            msg += f" {h.effect}" if h.effect else ""
        if self.value is not _NO_VALUE:
            msg += f" (value {self.value!r})"
        return msg


#: what a :class:`JobError` names as its file while its table is not tied to a source file
JOB_TABLE = "job table"


class JobError(TraceError):
    """A job table that a stage after loading (annotation, solo durations, goodput durations) cannot
    use. With ``mask``, the first job it marks is named by its row (the N-th row of ``table``,
    1-based) and job id, and the count of the other jobs marked is added; ``file`` is
    :data:`JOB_TABLE` until :meth:`LoadReport.locate` names the source file, its data row and column."""

    def __init__(self, message: str, table: pd.DataFrame | None = None, mask: np.ndarray | pd.Series | None = None,
                 column: str | None = None, value: Any = _NO_VALUE) -> None:
        self.position: int | None = None  # 0-based, in table order
        row = job = None
        if table is not None and mask is not None:
            hits = np.flatnonzero(np.asarray(mask))
            self.position = int(hits[0])
            row = self.position + 1
            job = str(table["job_id"].iat[self.position]) if "job_id" in table.columns else None
            if column is not None and value is _NO_VALUE:
                value = table[column].iat[self.position]
            if len(hits) > 1:
                message += f" ({len(hits) - 1} more such job{'s' if len(hits) > 2 else ''})"
        super().__init__(JOB_TABLE, message, row, column, value, job=job)


#: the most jobs a trace may be cut to or generated with (``max_jobs``, ``sample``, ``num_jobs``): above the
#: largest public traces (Helios: 3.4 M jobs)
MAX_JOBS = 5_000_000


class LoadOptions(UserModel):
    """Options every loader honours (all optional); numbers must be finite and in range."""

    model_config = ConfigDict(allow_inf_nan=False)

    start: float | None = Field(default=None, ge=0)  # window on submit_time, seconds from the time origin (before load scaling)
    end: float | None = Field(default=None, gt=0)  # exclusive
    vcs: list[str] | None = None
    max_jobs: int | None = Field(default=None, ge=1, le=MAX_JOBS)  # first N jobs after filters, in submit order
    load: float = Field(default=1.0, gt=0)  # submit times are divided by load
    # a calibration, not a sweep: submit times (from the origin) are multiplied by ``arrival_scale`` before
    # the load divides them. For a generated workload whose arrival period a paper leaves open (Castor
    # §9.1 and SJF-BSBF §VI-A sample 240 jobs from "the busiest period" without its length), it sets what
    # load 1.0 is; ``load`` stays the figures' axis around it (Castor Fig. 16, SJF-BSBF Fig. 6a)
    arrival_scale: float = Field(default=1.0, gt=0)
    max_gpus: int | None = Field(default=None, ge=1)  # cluster capacity, for the oversize check
    on_oversize: Literal["error", "drop", "clip"] = "error"
    on_bad_duration: Literal["error", "drop"] = "error"
    on_duplicate_id: Literal["error", "drop", "rename"] = "error"
    on_unsorted: Literal["error", "sort"] = "sort"
    seed: int = Field(default=0, ge=0)  # synthetic, and the random sample below
    num_jobs: int | None = Field(default=None, ge=1, le=MAX_JOBS)  # synthetic
    # the papers' set-up (Castor §9.1, SJF-BSBF §VI-A, after Pollux §5): N jobs sampled at random
    # from the busiest period: the window of ``busiest_hours`` with the most GPU-time submitted
    # among the windows that hold at least ``sample`` jobs
    busiest_hours: float | None = Field(default=None, gt=0)
    sample: int | None = Field(default=None, ge=1, le=MAX_JOBS)  # random sample of N jobs (seeded), after the window
    # which trace time becomes the replay's 0 (module docstring); None: the format's own default
    time_origin: TimeOrigin | None = None

    @field_validator("end")
    @classmethod
    def _window(cls, value: float | None, info: ValidationInfo) -> float | None:
        start = info.data.get("start")
        if value is not None and start is not None and value <= start:
            raise ValueError(f"must be greater than start ({start:g}), got {value:g}")
        return value


@dataclass
class LoadReport:
    """What a load did: jobs read from the source, kept, dropped and repaired (by reason).
    Invariant: ``read == kept + sum(dropped.values())``."""

    source: str
    format: str
    read: int
    kept: int
    dropped: dict[str, int] = field(default_factory=dict)
    repaired: dict[str, int] = field(default_factory=dict)
    #: each kept job's data row in the source, in table order, and the source's own column names
    #: (canonical -> file's): what :meth:`locate` names
    rows: np.ndarray | None = field(default=None, repr=False, compare=False)
    columns: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def locate(self, err: JobError) -> TraceError:
        """``err`` about the loaded table, naming the source instead: its file, the job's data row
        there and the file's own column name (``err`` itself where its job is not in this load)."""
        row = None
        if err.position is not None:
            if self.rows is None or err.position >= len(self.rows):
                return err
            row = int(self.rows[err.position])
        column = self.columns.get(err.column, err.column) if err.column is not None else None
        return TraceError(self.source, err.message, row, column, err.value, err.hint, err.job)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "format": self.format,
            "read": self.read,
            "kept": self.kept,
            "dropped": dict(self.dropped),
            "repaired": dict(self.repaired),
        }


@dataclass
class Raw:
    """A format reader's output: canonical columns (absolute submit_time in seconds) + ``_row``."""

    df: pd.DataFrame
    file: str
    read: int
    dropped: dict[str, int] = field(default_factory=dict)
    repaired: dict[str, int] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)  # canonical name -> the file's own, where renamed
    scan: Scan | None = None  # a streamed read (``.stream``): ``df`` holds only the rows it selected


@dataclass(frozen=True)
class Scan:
    """What a streamed read learnt from the submit times of the whole file (see :mod:`.stream`)."""

    t0: float  # earliest submit time in the file (the trace start)
    late: int  # rows whose submit time is earlier than a previous row's
    span: float  # latest submit time minus t0
    in_window: int  # rows submitted in [start, end)
    unread: dict[str, int]  # rows read only for their submit time, by the reason they are left out


class NothingLeft(TraceError):
    """No job is left to replay after the filters."""


Reader = Callable[..., Raw]  # (path, options[, rows=...]) -> Raw
Loader = Callable[..., tuple[pd.DataFrame, LoadReport]]


# --------------------------------------------------------------------------- reading helpers


def suggest(name: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_columns(file: str, found: Sequence[str], required: Sequence[str]) -> None:
    """Raise a TraceError for the first required column missing from ``found``."""
    for col in required:
        if col not in found:
            raise TraceError(
                file,
                f"missing column {col!r}{suggest(col, found)} (columns found: {list(found)})",
                column=col,
            )


#: the strings pandas reads as missing by default; only numeric and time columns use them: ids and
#: names (``NA``, ``None``, ``nan``…) are read verbatim, where only an empty field is missing
NA_STRINGS = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
              "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null")


#: what a path is when it is not a regular file or a directory
_SPECIAL_FILES = ((stat.S_ISFIFO, "a pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                  (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def path_problem(path: Path, *, folder: bool = False) -> str | None:
    """What keeps ``path`` from being read as a trace file (None: nothing): missing, a symlink loop
    or to a missing file, a directory (unless ``folder``), a FIFO, device or socket (the loaders
    read a file more than once, so a pipe cannot be a trace), or not readable."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop (a link that points back to itself), not a file"
        if isinstance(exc, FileNotFoundError):
            return "a symbolic link to a missing file" if path.is_symlink() else "file not found"
        return f"cannot read the file: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return None if folder else "is a directory, not a trace file"
    for test, kind in _SPECIAL_FILES:
        if test(mode):
            return f"is {kind}, not a regular file (traces are read more than once: save the data to a file first)"
    try:
        path.open("rb").close()
    except OSError as exc:
        return f"cannot read the file: {exc.strerror or exc}"
    return None


def check_file(path: Path) -> None:
    """A TraceError unless ``path`` is a regular file this process can open (:func:`path_problem`)."""
    problem = path_problem(path)
    if problem is not None:
        raise TraceError(path, problem)


#: leading bytes of compressed files (a pattern), their format and the tool that decompresses them
_COMPRESSED = ((rb"\x1f\x8b", "gzip", "gunzip"), (rb"BZh[1-9]1AY&SY", "bzip2", "bunzip2"),
               (rb"\xfd7zXZ\x00", "xz", "unxz"), (rb"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
               (rb"PK\x03\x04", "zip", "unzip"))


def not_utf8(path: Path, *, header: bool | None = True) -> TraceError:
    """The error for a file that is not UTF-8 text: a compressed file (gzip, bzip2, xz, zstd, zip)
    named as such, else the first bad line and how to re-encode it; also its data row for a CSV
    (``header``: whether line 1 is a header; None: no rows, JSON)."""
    with path.open("rb") as fh:
        magic = fh.read(10)
    for pattern, kind, tool in _COMPRESSED:
        if re.match(pattern, magic):
            return TraceError(path, f"a {kind}-compressed file, not text: decompress it first "
                              f"(e.g. {tool} {path.name}) and load the decompressed file")
    with path.open("rb") as fh:
        for n, line in enumerate(fh, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                row = None if header is None else n - 1 if header else n
                return TraceError(
                    path,
                    f"not UTF-8 text: byte 0x{line[exc.start]:02x} on line {n} (a latin-1 or other "
                    "8-bit encoding?); re-encode the file as UTF-8, e.g. iconv -f latin1 -t utf-8",
                    row=row or None,
                )
    return TraceError(path, "not UTF-8 text; re-encode the file as UTF-8")


def first_line(path: Path) -> str:
    """The first line of a text file (UTF-8, a byte-order mark skipped)."""
    check_file(path)
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            return fh.readline()
    except UnicodeDecodeError:
        raise not_utf8(path) from None


def _header(path: Path) -> list[str]:
    """The first line's fields, as pandas names them (leading blanks skipped)."""
    return next(csv.reader([first_line(path)], skipinitialspace=True), [])


def read_csv(
    path: Path, required: Sequence[str], *, header_optional: bool = False, text: Sequence[str] = (),
    rows: np.ndarray | None = None, numbers: Sequence[str] = (),
) -> pd.DataFrame:
    """Read a CSV as strings, check the required columns, add ``_row``; blank lines are skipped.

    ``text``: columns read verbatim (ids, names): ``NA`` or ``None`` there is a value, only an
    empty field is missing. ``header_optional``: a file whose first line names none of ``required``
    is read as headerless with ``required`` as its column names (Alibaba's release has no header row).
    ``rows``: read only these data rows (0-based, sorted; see :mod:`.stream`). ``numbers``: columns
    parsed as float64 by the CSV parser itself (the parser ``pd.to_numeric`` uses on the text, with
    the same missing values), not kept as text: a value that is not a number is a ``ValueError``.
    """
    file = str(path)
    first = _header(path)
    names = None
    if header_optional and not {c.strip() for c in first} & set(required):
        if len(first) != len(required):
            raise TraceError(
                file,
                f"headerless file must have {len(required)} fields {list(required)}, "
                f"the first line has {len(first)}",
                row=1,
            )
        names = list(required)
    na_values = {c: NA_STRINGS for c in names or first if c.strip() not in text}
    typed = {c: "float64" for c in names or first if c.strip() in numbers and c.strip() not in text}
    dtype: Any = defaultdict(lambda: str, typed) if typed else str
    # index_col=False: a first row with an extra field is not taken as holding an index (every
    # column shifted by one); pandas warns of the field it drops instead, an error here
    kw: dict[str, Any] = {"dtype": dtype, "skip_blank_lines": False, "skipinitialspace": True, "keep_default_na": False,
                          "index_col": False}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            if rows is not None:
                from .stream import read_rows

                df = read_rows(path, rows, na_values=na_values, **kw)
            else:
                df = pd.read_csv(path, names=names, header=None if names else "infer", na_values=na_values, **kw)
    except (pd.errors.ParserError, pd.errors.ParserWarning) as exc:  # "Expected 5 fields in line 7, saw 6"
        raise _malformed(path, exc, len(names or first), header=names is None, rows=rows) from None
    except pd.errors.EmptyDataError:
        raise TraceError(file, "empty file") from None
    except UnicodeDecodeError:
        raise not_utf8(path, header=names is None) from None
    except OSError as exc:
        raise TraceError(file, f"cannot read the file: {exc.strerror or exc}") from None
    df.columns = [str(c).strip() for c in df.columns]
    check_columns(file, list(df.columns), required)
    for col in text:
        if col in df.columns:
            df[col] = df[col].mask(df[col] == "")
    if rows is None:
        df["_row"] = np.arange(1, len(df) + 1)
    data = df.columns.drop("_row")
    return df[df[data].notna().any(axis=1)].reset_index(drop=True)


def _malformed(path: Path, exc: Exception, width: int, *, header: bool, rows: np.ndarray | None) -> TraceError:
    """The error for a CSV pandas cannot split into ``width`` columns: the first (selected, where
    ``rows`` are given: 0-based data rows) data row with more fields, or else pandas' own words."""
    wanted = None if rows is None else set(rows.tolist())
    with path.open(encoding="utf-8-sig", newline="") as fh:
        records = csv.reader(fh, skipinitialspace=True)
        if header:
            next(records, None)
        for row, fields in enumerate(records, start=1):
            if len(fields) > width and (wanted is None or row - 1 in wanted):
                expected = f"the header has {width} columns" if header else f"{width} columns are expected"
                return TraceError(path, f"{len(fields)} fields, but {expected} (a comma too many, or a value "
                                  "with a comma that is not quoted?)", row)
    return TraceError(path, f"malformed CSV: {exc}")


def job_ids(df: pd.DataFrame, col: str, file: str) -> pd.Series:
    """Job ids as strings, verbatim (``NA``, ``None``, ``nan`` are ids); a missing or blank id is an error."""
    s = df[col]
    text = s.astype("str")
    missing = s.isna().to_numpy() | (text.str.strip() == "").to_numpy()
    if missing.any():
        raise TraceError(file, "missing job id (empty or null)", int(df["_row"].iat[_first(missing)]), col)
    return text


def _first(mask: pd.Series | np.ndarray) -> int:
    return int(np.flatnonzero(np.asarray(mask))[0])


#: the largest plausible time or duration in seconds (about 317 years; a Unix time up to the year
#: 2286): beyond it a value is a typo, an overflow, or milliseconds taken for seconds
MAX_SECONDS = 1e10
#: the largest integer a column may hold: every integer up to it is exact in float64, as parsed
MAX_INTEGER = 2.0**53


def numeric(
    df: pd.DataFrame, col: str, file: str, *, integer: bool = False, allow_missing: bool = False
) -> pd.Series:
    """Column as float64 (or int64): non-numeric, non-finite, missing, fractional or (for integers)
    out-of-range values are errors. A timedelta column (Parquet) is taken in seconds; a datetime column is an error."""
    s = df[col]
    if pd.api.types.is_timedelta64_dtype(s):
        s = s.dt.total_seconds()
    elif pd.api.types.is_datetime64_any_dtype(s):
        raise TraceError(file, "a datetime column where a number is expected", column=col)
    num = pd.to_numeric(s, errors="coerce").astype("float64")
    bad = (num.isna() & s.notna()) | np.isinf(num)
    if bad.any():
        i = _first(bad)
        raise TraceError(file, "not a finite number", int(df["_row"].iat[i]), col, s.iat[i])
    if not allow_missing and num.isna().any():
        i = _first(num.isna())
        raise TraceError(file, "missing value", int(df["_row"].iat[i]), col)
    if integer:
        frac = num.notna() & (num != np.floor(num))
        if frac.any():
            i = _first(frac)
            raise TraceError(file, "not an integer", int(df["_row"].iat[i]), col, s.iat[i])
        huge = num.abs() > MAX_INTEGER
        if huge.any():  # would wrap around in int64 (1e308 GPUs read as -9223372036854775808)
            i = _first(huge)
            raise TraceError(file, "integer out of range (larger than 2**53)", int(df["_row"].iat[i]), col, s.iat[i])
        if not num.isna().any():
            return num.astype("int64")
    return num


def at_least(df: pd.DataFrame, col: str, file: str, values: pd.Series, minimum: float) -> pd.Series:
    """``values`` (column ``col`` of ``df`` as numbers); the first row below ``minimum`` is an error."""
    low = (values < minimum).to_numpy()
    if low.any():
        i = _first(low)
        raise TraceError(file, f"must be >= {minimum:g}", int(df["_row"].iat[i]), col, df[col].iat[i])
    return values


def _epoch_seconds(dt: pd.Series) -> pd.Series:
    """Datetimes (naive = UTC, aware = converted to UTC) as float seconds since the Unix epoch."""
    if dt.dt.tz is not None:
        dt = dt.dt.tz_convert("UTC").dt.tz_localize(None)
    return (dt - pd.Timestamp(0)).dt.total_seconds()


def _datetimes(s: pd.Series, df: pd.DataFrame, col: str, file: str) -> pd.Series:
    """Parse ISO 8601 text; times with different UTC offsets are converted to UTC, but times with
    an offset mixed with times without one (whose zone is unknown) are an error naming the row."""
    try:
        return pd.to_datetime(s, errors="coerce", format="ISO8601")
    except ValueError:  # "Mixed timezones detected"
        pass

    def has_offset(value: Any) -> bool | None:
        try:
            return pd.Timestamp(value).tzinfo is not None
        except (ValueError, TypeError):
            return None  # missing or not a datetime: reported after parsing

    aware = [has_offset(v) for v in s]
    kinds = {a for a in aware if a is not None}
    if kinds == {True}:
        return pd.to_datetime(s, errors="coerce", format="ISO8601", utc=True)
    first = next(a for a in aware if a is not None)
    i = next(k for k, a in enumerate(aware) if a is not None and a != first)
    raise TraceError(file, f"a time {'with' if aware[i] else 'without'} a UTC offset among times "
                     f"{'without' if aware[i] else 'with'} one: give every time an offset (e.g. +00:00) or none",
                     int(df["_row"].iat[i]), col, s.iat[i])


def seconds(df: pd.DataFrame, col: str, file: str, *, allow_missing: bool = False) -> pd.Series:
    """Times as float seconds: numbers are taken as seconds, otherwise datetimes (ISO 8601; a
    datetime column, e.g. from Parquet, is converted the same way, never read as its raw ticks)."""
    s = df[col]
    if pd.api.types.is_datetime64_any_dtype(s):
        if not allow_missing and s.isna().any():
            raise TraceError(file, "missing value", int(df["_row"].iat[_first(s.isna())]), col)
        return _epoch_seconds(s)
    num = pd.to_numeric(s, errors="coerce")
    is_num = num.notna().to_numpy()
    if (is_num == s.notna().to_numpy()).all():
        return numeric(df, col, file, allow_missing=allow_missing)
    if is_num.any():  # numbers among datetimes: which clock? ("1.5" would parse as a date)
        known = s.notna().to_numpy()
        i = _first(known & (is_num != is_num[_first(known)]))
        kind = "a number" if is_num[i] else "a datetime"
        raise TraceError(file, f"{kind} among {'datetimes' if is_num[i] else 'numbers of seconds'}: "
                         "give every time in the same form", int(df["_row"].iat[i]), col, s.iat[i])
    dt = _datetimes(s, df, col, file)
    bad = dt.isna() & s.notna()
    if bad.any():
        i = _first(bad)
        raise TraceError(file, "not a datetime or number of seconds", int(df["_row"].iat[i]), col, s.iat[i])
    if not allow_missing and dt.isna().any():
        i = _first(dt.isna())
        raise TraceError(file, "missing value", int(df["_row"].iat[i]), col)
    return _epoch_seconds(dt)


def read_mapped(path: Path, columns: dict[str, tuple[str, str]], constant: dict[str, Any] | None = None,
                rows: np.ndarray | None = None, optional: dict[str, tuple[str, str]] | None = None) -> Raw:
    """A CSV whose canonical columns are plain conversions of its own: ``columns`` maps a canonical
    name to ``(source column, kind)``, kind one of ``text``, ``seconds``, ``int``, ``float``
    (``duration`` may be missing: the bad-duration rule decides); ``optional``: the same, read when the
    file has the column; ``rows``: only these (see :func:`read_csv`)."""
    file = str(path)
    header = set(_header(path)) if optional else set()
    columns = {**columns, **{name: c for name, c in (optional or {}).items() if c[0] in header}}
    df = read_csv(path, tuple(source for source, _ in columns.values()),
                  text=[source for source, kind in columns.values() if kind == "text"], rows=rows)
    convert = {
        "text": lambda col, name: job_ids(df, col, file) if name == "job_id" else df[col],
        "seconds": lambda col, name: seconds(df, col, file),
        "int": lambda col, name: numeric(df, col, file, integer=True),
        "float": lambda col, name: numeric(df, col, file, allow_missing=name == "duration"),
    }
    out = pd.DataFrame({name: convert[kind](col, name) for name, (col, kind) in columns.items()})
    for name, value in (constant or {}).items():
        out[name] = value
    out["_row"] = df["_row"]
    return Raw(out, file, len(out), columns={name: source for name, (source, _) in columns.items()})


# --------------------------------------------------------------------------- finalize


def _bad(raw: Raw, df: pd.DataFrame, mask: np.ndarray | pd.Series, col: str, msg: str,
         hint: Hint | None = None) -> TraceError:
    """The error for the first masked row, naming the file's own column for canonical ``col``."""
    i = _first(mask)
    return TraceError(raw.file, msg, int(df["_row"].iat[i]), raw.columns.get(col, col), df[col].iat[i], hint)


def finalize(raw: Raw, fmt: str, options: LoadOptions) -> tuple[pd.DataFrame, LoadReport]:
    """Validate, repair, filter, rebase and scale a reader's table (steps in the module docstring)."""
    df, file, scan = raw.df, raw.file, raw.scan
    dropped: Counter[str] = Counter(raw.dropped) + Counter(scan.unread if scan else {})
    repaired: Counter[str] = Counter(raw.repaired)

    def drop(mask: np.ndarray | pd.Series, reason: str) -> pd.DataFrame:
        n = int(np.count_nonzero(mask))
        if n:
            dropped[reason] += n
        return df[~np.asarray(mask)] if n else df

    # 0. implausible times: beyond MAX_SECONDS (1e308 read as a submit time, milliseconds as seconds)
    for col in ("submit_time", "duration", "deadline", "time_limit"):
        if col in df.columns:
            v = df[col].to_numpy(dtype="float64")
            bad = ~np.isfinite(v) if col == "submit_time" else np.isinf(v)
            bad |= np.abs(v) > MAX_SECONDS  # NaN: missing, decided below
            if bad.any():
                raise _bad(raw, df, bad, col, f"implausible {col.replace('_', ' ')}: not finite or beyond "
                           f"{MAX_SECONDS:g} s (about 317 years); times are in seconds")
    # ... and a negative submit time: before the trace's clock starts, which rebasing would hide
    before = df["submit_time"].to_numpy(dtype="float64") < 0
    if before.any():
        raise _bad(raw, df, before, "submit_time", "negative submit time: times count from the trace start "
                   "(seconds >= 0, or datetimes from 1970 on)")

    # 1. unsorted submit times (in file order)
    st = df["submit_time"].to_numpy()
    late = st < np.maximum.accumulate(st) if len(st) else np.zeros(0, bool)
    if late.any() and options.on_unsorted == "error":  # (a streamed read has checked the whole file)
        raise _bad(raw, df, late, "submit_time", "submit time is earlier than a previous row's",
                   Hint("on_unsorted", ("sort",), "to sort"))
    if scan.late if scan else late.any():
        repaired["unsorted_sorted"] += scan.late if scan else int(late.sum())
    if late.any():
        df = df.sort_values("submit_time", kind="stable")

    # 2-3. window and VC filter
    keep_clock = origin(options) == "file"
    first = scan.t0 if scan else float(st.min()) if len(st) else 0.0  # the earliest submit time read
    t0 = 0.0 if keep_clock else first  # what the window counts from
    rel = df["submit_time"] - t0
    if options.start is not None:
        df = drop(rel < options.start, "outside_window")
        rel = df["submit_time"] - t0
    if options.end is not None:
        df = drop(rel >= options.end, "outside_window")
    if options.vcs is not None:
        if "vc" not in df.columns:
            raise TraceError(file, f"VC filter given but format {fmt!r} has no VC column", column="vc")
        df = drop(~df["vc"].isin(options.vcs).to_numpy(), "vc_filter")

    # 4. durations (and iterations where there is no duration)
    col = "duration" if "duration" in df.columns else "iterations"
    if col in df.columns:
        bad = ~(df[col].to_numpy(dtype="float64") > 0)  # NaN counts as bad
        if bad.any():
            if options.on_bad_duration == "error":
                raise _bad(raw, df, bad, col, f"{col} must be > 0 (missing, zero or negative)",
                           Hint("on_bad_duration", ("drop",), "to drop such jobs"))
            df = drop(bad, f"bad_{col}")
    if (df["num_gpus"] < 1).any():
        raise _bad(raw, df, df["num_gpus"] < 1, "num_gpus", "GPU count must be >= 1")

    # 5. oversize
    if options.max_gpus is not None:
        over = (df["num_gpus"] > options.max_gpus).to_numpy()
        if over.any():
            if options.on_oversize == "error":
                raise _bad(raw, df, over, "num_gpus", f"demand exceeds the cluster's {options.max_gpus} GPUs",
                           Hint("on_oversize", ("drop", "clip")))
            if options.on_oversize == "drop":
                df = drop(over, "oversize")
            else:
                df = df.assign(num_gpus=df["num_gpus"].clip(upper=options.max_gpus))
                repaired["oversize_clipped"] += int(over.sum())

    # 6. duplicate ids
    dup = df["job_id"].duplicated(keep="first").to_numpy()
    if dup.any():
        if options.on_duplicate_id == "error":
            i = _first(dup)
            first_row = int(df["_row"][df["job_id"] == df["job_id"].iat[i]].iat[0])
            raise TraceError(file, f"duplicate job_id (first seen in row {first_row})",
                             int(df["_row"].iat[i]), raw.columns.get("job_id", "job_id"), df["job_id"].iat[i],
                             Hint("on_duplicate_id", ("drop", "rename")))
        if options.on_duplicate_id == "drop":
            df = drop(dup, "duplicate_id")
        else:
            k = df.groupby("job_id", sort=False).cumcount().astype(str)
            ids = df["job_id"].where(~dup, df["job_id"] + "#" + k)
            if ids.duplicated().any():
                raise _bad(raw, df.assign(job_id=ids), ids.duplicated().to_numpy(), "job_id",
                           "renamed duplicate collides with an existing job_id")
            df = df.assign(job_id=ids)
            repaired["duplicate_id_renamed"] += int(dup.sum())

    # 7. order, busiest window, random sample, first N
    if not in_canonical_order(df):  # (a sorted table, as most are, is left as it is)
        df = df.sort_values(["submit_time", "job_id"], kind="stable")
    if options.busiest_hours is not None and len(df):
        keep = _busiest_window(df, options.busiest_hours * 3600.0, options.sample or 1)
        dropped["outside_busiest_window"] += int((~keep).sum())
        df = df[keep]
    if options.sample is not None and len(df) > options.sample:
        chosen = np.sort(np.random.default_rng(options.seed).choice(len(df), options.sample, replace=False))
        dropped["not_sampled"] += len(df) - options.sample
        df = df.iloc[chosen]
    if options.max_jobs is not None and len(df) > options.max_jobs:
        dropped["max_jobs"] += len(df) - options.max_jobs
        df = df.iloc[: options.max_jobs]

    if not len(df):
        raise NothingLeft(file, _nothing_left(raw, dropped, options, t0, first, st))

    # 8. rebase, arrival scale and load scaling (deadlines keep their slack after submission)
    df = df.reset_index(drop=True)
    base = 0.0 if keep_clock else float(df["submit_time"].min())
    submit = (df["submit_time"] - base) * options.arrival_scale / options.load  # x 1.0: bit-identical
    if "deadline" in df.columns:
        df["deadline"] = submit + (df["deadline"] - df["submit_time"])
    df["submit_time"] = submit.astype("float64")
    out = df[[c for c in CANONICAL_COLUMNS if c in df.columns]].copy()
    out["job_id"] = out["job_id"].astype("str")
    out["num_gpus"] = out["num_gpus"].astype("int64")
    if "duration" in out.columns:
        out["duration"] = out["duration"].astype("float64")
    report = LoadReport(raw.file, fmt, raw.read, len(out), dict(dropped), dict(repaired),
                        df["_row"].to_numpy(), dict(raw.columns))
    assert report.read == report.kept + sum(report.dropped.values()), report
    return out, report


def origin(options: LoadOptions) -> str:
    """The time origin a load uses: ``options.time_origin``, else ``first-job`` (a format whose default
    differs, ``pollux``, sets it before :func:`finalize`)."""
    return options.time_origin or "first-job"


def _nothing_left(raw: Raw, dropped: Counter[str], options: LoadOptions, t0: float, first: float,
                  st: np.ndarray) -> str:
    """Why no job is left to replay: an empty file, or the reasons every job read was dropped (with
    the filter that matches no job of the file at all, where one does)."""
    if raw.read == 0:
        return "no job to replay: the file has no jobs (no data rows)"
    reasons = ", ".join(f"{k}: {v}" for k, v in dropped.items())
    why = [f"no job left to replay: every job read ({raw.read}) was dropped ({reasons})"]
    rel = st - t0
    in_window = np.ones(len(rel), bool)
    if options.start is not None:
        in_window &= rel >= options.start
    if options.end is not None:
        in_window &= rel < options.end
    n_window, span = (raw.scan.in_window, raw.scan.span) if raw.scan else (
        int(in_window.sum()), float(st.max()) - first if len(st) else 0.0)
    if not n_window and (options.start is not None or options.end is not None):
        zero = "the trace start" if t0 == first else "the file's time 0"
        why.append(f"no job is submitted in the window [{options.start or 0:g}, "
                   f"{'end' if options.end is None else format(options.end, 'g')}) s; submit times "
                   f"span {first - t0:g} to {first - t0 + span:g} s from {zero}")
    # (a streamed read that left rows unread does not know every VC of the file)
    if options.vcs is not None and not (raw.scan and raw.scan.unread) and not raw.df["vc"].isin(options.vcs).any():
        found = sorted(raw.df["vc"].dropna().astype(str).unique())
        shown = found[:20] + (["..."] if len(found) > 20 else [])
        why.append(f"no job is in VC {', '.join(map(repr, options.vcs))}; VCs in the file: {shown}")
    return "; ".join(why)


def _busiest_window(df: pd.DataFrame, width_s: float, min_jobs: int) -> np.ndarray:
    """Mask of the jobs submitted in the ``width_s`` window (starting at a submission) with the most
    GPU-time submitted (jobs, when durations are unknown) among the windows with at least
    ``min_jobs`` jobs (or the fullest window, if none has that many). ``df`` is sorted by submit time."""
    times = df["submit_time"].to_numpy(dtype=float)
    weight = (df["num_gpus"] * df["duration"]).to_numpy(dtype=float) if "duration" in df else np.ones(len(df))
    cumulative = np.concatenate([[0.0], np.cumsum(np.nan_to_num(weight))])
    starts = np.arange(len(times))
    ends = np.searchsorted(times, times + width_s, side="left")
    counts = ends - starts
    if counts.max() < min_jobs:
        min_jobs = int(counts.max())
    demand = np.where(counts >= min_jobs, cumulative[ends] - cumulative[starts], -1.0)
    best = int(np.argmax(demand))
    mask = np.zeros(len(df), dtype=bool)
    mask[best : ends[best]] = True
    return mask


def make_loader(fmt: str, reader: Reader, submit: str | None = None) -> Loader:
    """Wrap a format reader into ``load(source, options=None) -> (table, report)``. ``submit``: the
    file's submit-time column, for a reader that can read selected rows only (``rows=``): a window
    or ``max_jobs`` then reads only what it needs (:mod:`.stream`)."""

    def load(source: str | Path | None, options: LoadOptions | None = None) -> tuple[pd.DataFrame, LoadReport]:
        opts = options or LoadOptions()
        path = Path(source) if source is not None else None
        if submit is not None and path is not None and (opts.start, opts.end, opts.max_jobs) != (None,) * 3:
            from .stream import load_streamed

            streamed = load_streamed(path, fmt, reader, submit, opts)
            if streamed is not None:
                return streamed
        return finalize(reader(path, opts), fmt, opts)

    load.__name__ = f"load_{fmt.replace('-', '_')}"
    load.__doc__ = f"Load a {fmt!r} trace into the canonical job table. {reader.__doc__ or ''}"
    return load
