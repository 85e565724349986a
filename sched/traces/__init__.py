"""Trace loaders: every supported format -> the canonical job table (``schedlab.sched.traces.jobtable``).

>>> df, report = load_trace("philly_jobs_pollux.csv", options=LoadOptions(load=2.0, max_jobs=500))

Each format lives in its own module with a ``read`` (file -> raw table) and a ``load``; the shared
validation, repair, filtering and load scaling are in :mod:`.common` (see its docstring for the
order of steps and the row convention of :class:`TraceError`: 1-based data rows, header excluded).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd

from . import alibaba_pai, canonical, helios, itp, philly, philly_raw, pollux, synthetic, tiresias
from .common import (
    TIME_ORIGINS, JobError, LoadOptions, LoadReport, TraceError, check_file, first_line, path_problem,
)
from .common import Hint

__all__ = ["FORMATS", "TIME_ORIGINS", "check_format", "JobError", "LoadOptions", "LoadReport", "TraceError", "detect_format",
           "load_trace", "path_problem"]

#: format name -> ``load(source, options=None) -> (table, report)``
FORMATS: dict[str, Callable[..., tuple[pd.DataFrame, LoadReport]]] = {
    "philly": philly.load,
    "philly-raw": philly_raw.load,
    "helios": helios.load,
    "alibaba-pai": alibaba_pai.load,
    "itp": itp.load,
    "tiresias": tiresias.load,
    "canonical": canonical.load,
    "synthetic": synthetic.load,
    "pollux": pollux.load,
    "pollux-philly": pollux.load_philly,
}

# Columns that identify a CSV format from its header (required columns of each reader).
_SIGNATURES: dict[str, tuple[str, ...]] = {
    "philly": philly.COLUMNS,
    "helios": tuple(source for source, _ in helios.COLUMNS.values()),
    "itp": tuple(source for source, _ in itp.COLUMNS.values()),
    "tiresias": tuple(source for source, _ in tiresias.COLUMNS.values()),
    "alibaba-pai": alibaba_pai.JOB_COLUMNS,
    "canonical": ("job_id", "submit_time", "num_gpus"),
    "pollux": pollux.COLUMNS,
}


def _unknown(source: Path, why: str) -> TraceError:
    return TraceError(source, f"cannot detect the trace format ({why})", hint=Hint("fmt", tuple(FORMATS)))


def detect_format(source: str | Path) -> str:
    """Guess the format from the file name, suffix or header row."""
    path = Path(source)
    name, suffix = path.name.lower(), path.suffix.lower()
    if path.is_dir():
        if (path / "pai_job_table.csv").is_file():
            return "alibaba-pai"
        raise _unknown(path, "a directory without pai_job_table.csv")
    check_file(path)
    if suffix in (".yaml", ".yml"):
        return "synthetic"
    if suffix in (".parquet", ".pq"):
        return "canonical"
    if name.startswith("pai_job_table"):
        return "alibaba-pai"
    first = first_line(path)
    if suffix in (".json", ".jsonl") or first.lstrip().startswith(("[", "{")) or "cluster_job_log" in name:
        return "philly-raw"
    header = {c.strip() for c in first.split(",")}
    # Best coverage of a format's required columns; a near miss (one misspelled column) still
    # selects the format, whose reader then names the missing column.
    scores = {f: len(header & set(cols)) / len(cols) for f, cols in _SIGNATURES.items()}
    best = max(scores.values())
    winners = [f for f, s in scores.items() if s == best]
    if best < 0.6 or (len(winners) > 1 and best < 1):
        raise _unknown(path, f"header {sorted(header)}")
    return winners[0]  # a full match of several: the first listed (most specific) wins


def load_trace(
    source: str | Path | None,
    fmt: str | None = None,
    options: LoadOptions | None = None,
    *,
    applications: Mapping[str, pollux.TunedJobs] | None = None,
) -> tuple[pd.DataFrame, LoadReport]:
    """Load a trace into the canonical job table, sorted by (submit_time, job_id), and its report.

    ``source=None`` or ``"synthetic"`` is the synthetic generator (the embedded default);
    ``fmt=None`` detects the format from the file. ``applications``: the Pollux applications' goodput
    models by name, which format ``pollux-philly`` (only) needs and draws jobs from; the trace layer
    reads no model, so the caller loads them (``sched.models.goodput.load_applications``).
    """
    options = options or LoadOptions()
    if source is None or (isinstance(source, str) and source == "synthetic"):
        source, fmt = None, fmt or "synthetic"
    if fmt is None:
        fmt = detect_format(source)  # type: ignore[arg-type]
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; choose one of {list(FORMATS)}")
    if source is None and fmt != "synthetic":
        raise ValueError(f"format {fmt!r} needs a source file")
    if fmt == "pollux-philly":
        return pollux.load_philly(source, options, applications)
    if applications is not None:
        raise ValueError(f"format {fmt!r} takes no goodput models (only pollux-philly does)")
    return FORMATS[fmt](source, options)


def check_format(value: str | None) -> str | None:
    """A trace format name (``None``: detected from the file); the error lists the known ones."""
    if value is not None and value not in FORMATS:
        raise ValueError(f"unknown trace format {value!r}; choose one of {sorted(FORMATS)}")
    return value
