"""Inference-load series: the fraction of inference GPUs serving requests over time (Lyra Fig. 1).

``u(t)`` is a step function (each value holds until the next time) that repeats with period
``span`` (the series' last time plus one step), so a 14-day series covers a 15-day replay (day 15 =
day 1, docs/explanation/lyra.md). t = 0 is the trace's start. Sources (:func:`load_inference`):

- ``PATH`` of a CSV with ``time`` (s) and ``utilization`` / ``utilisation`` / ``util`` (fraction in
  [0, 1]) columns, any other numeric CSV with ``--`` named columns via :func:`from_csv`;
- ``PATH[:MODEL]`` of ServeGen's ``servegen_total_rate_per_10min.csv`` (columns ``model,
  window_start_s, total_rate_req_per_s``): request rates, not GPUs, mapped to occupancy as
  schedlab chose (docs/explanation/lyra.md, ours): zero windows (dropouts) take the previous value, an affine map
  sends the 1st percentile to 0.42 and the 99th to 0.95 (the paper's range, §2), clipped to [0, 1].
  ``MODEL`` defaults to ``m-small`` (hourly peak/trough 2.05, the paper's ~2.2). Limits: a rate is
  not an occupancy (no per-request GPU time, no batching), so only the shape is borrowed;
- ``constant:U`` (tests, sensitivity);
- ``diurnal:LOW:HIGH`` : a synthetic day, ``LOW + (HIGH - LOW) (1 - cos 2πt/24h) / 2`` in 10-minute steps
  (trough at midnight, peak at noon; Lyra §2 reports 42-95 %: ``diurnal:0.42:0.95``). Only a shape for
  runs without a measured series (the quickstart); the papers' set-ups read ServeGen's.

Errors name the file, and the row and column where known: row N is the N-th data row (1-based,
header excluded, so on line N+1), as in every trace loader (``sched/traces/common.py``).

Predictors (§6; ours): ``oracle`` = the peak of ``u`` over the coming period (inference is never
short by construction), ``last`` = ``u`` at the tick (may fall short; the shortfall is logged).
"""

from __future__ import annotations

import math
import os
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.sched.traces.common import TraceError, not_utf8, path_problem

SERVEGEN_DEFAULT_MODEL = "m-small"
SERVEGEN_RANGE = (0.42, 0.95)  # Lyra §2: inference utilisation 42-95 %
UTIL_COLUMNS = ("utilization", "utilisation", "util")
PREDICTORS = ("oracle", "last")
DAY_S, DIURNAL_STEP_S = 86400.0, 600.0
#: the prefixes of the sources that are generated, not read from a file
SYNTHETIC = ("constant:", "diurnal:")


def is_synthetic(spec: str) -> bool:
    """Whether ``spec`` names a generated load (``constant:U``, ``diurnal:LOW:HIGH``), not a file."""
    return spec.startswith(SYNTHETIC)


class InferenceLoadError(ValueError):
    pass


@dataclass(frozen=True)
class InferenceLoad:
    """``u(t)``: ``util[i]`` holds over ``[times[i], times[i+1])``, repeating every ``span`` seconds."""

    times: np.ndarray
    util: np.ndarray
    span: float
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.times) == 0 or len(self.times) != len(self.util):
            raise InferenceLoadError(f"{self.source}: an inference load needs matching, non-empty times and values")
        if self.times[0] != 0 or np.any(np.diff(self.times) <= 0) or self.span <= self.times[-1]:
            raise InferenceLoadError(f"{self.source}: times must start at 0 and increase, span past the last")
        object.__setattr__(self, "_times", self.times.tolist())  # plain lists: the per-tick look-ups
        object.__setattr__(self, "_util", self.util.tolist())

    @classmethod
    def diurnal(cls, low: float, high: float) -> InferenceLoad:
        if not (0 <= low <= high <= 1):
            raise InferenceLoadError(f"diurnal:{low:g}:{high:g}: needs 0 <= LOW <= HIGH <= 1")
        times = np.arange(0.0, DAY_S, DIURNAL_STEP_S)
        util = low + (high - low) * (1 - np.cos(2 * np.pi * times / DAY_S)) / 2
        return cls(times, util, DAY_S, f"diurnal:{low:g}:{high:g}")

    @classmethod
    def constant(cls, u: float) -> InferenceLoad:
        if not 0 <= u <= 1:
            raise InferenceLoadError(f"constant:{u}: utilisation must be in [0, 1]")
        return cls(np.array([0.0]), np.array([float(u)]), 86400.0, f"constant:{u:g}")

    def at(self, t: float) -> float:
        """``u(t)``."""
        return self._util[bisect_right(self._times, t % self.span) - 1]

    def segments(self, t0: float, t1: float):
        """``(start, end, u)`` pieces of ``u`` over ``[t0, t1)``."""
        t, times, n = t0, self._times, len(self._times)
        while t < t1:
            base = math.floor(t / self.span) * self.span
            i = bisect_right(times, t - base) - 1
            end = min(base + (times[i + 1] if i + 1 < n else self.span), t1)
            if end <= t:  # float edge at a span boundary
                end = math.nextafter(t, math.inf)
            yield t, end, self._util[i]
            t = end

    def peak(self, t0: float, t1: float) -> float:
        """The largest ``u`` over ``[t0, t1)`` (the oracle's prediction)."""
        return max(u for _, _, u in self.segments(t0, t1))

    def integral(self, t0: float, t1: float) -> float:
        """``∫ u dt`` over ``[t0, t1)``."""
        return sum((b - a) * u for a, b, u in self.segments(t0, t1))

    def predict(self, predictor: str, t: float, period_s: float) -> float:
        if predictor == "oracle":
            return self.peak(t, t + period_s)
        if predictor == "last":
            return self.at(t)
        raise InferenceLoadError(f"unknown predictor {predictor!r}; choose one of {', '.join(PREDICTORS)}")


def load_inference(spec: str) -> InferenceLoad:
    """An inference load from ``constant:U``, ``diurnal:LOW:HIGH``, ``PATH`` or ``PATH:MODEL`` (module doc)."""
    if spec.startswith("diurnal:"):
        try:
            low, high = (float(x) for x in spec.split(":")[1:])
        except ValueError:
            raise InferenceLoadError(f"{spec!r}: diurnal:LOW:HIGH needs two numbers in [0, 1]") from None
        if not all(math.isfinite(x) for x in (low, high)):
            raise InferenceLoadError(f"{spec!r}: diurnal:LOW:HIGH needs two finite numbers in [0, 1]")
        return InferenceLoad.diurnal(low, high)
    if spec.startswith("constant:"):
        try:
            value = float(spec.split(":", 1)[1])
        except ValueError:
            raise InferenceLoadError(f"{spec!r}: constant:U needs a number U in [0, 1]") from None
        return InferenceLoad.constant(value)
    path, model = Path(spec), None
    if not path.exists() and ":" in spec:
        head, model = spec.rsplit(":", 1)
        path = Path(head)
    problem = path_problem(path)  # missing, a symlink loop, a FIFO or device, a directory, unreadable
    if problem is not None:
        hint = "" if os.path.lexists(path) else " (expected PATH, PATH:MODEL, constant:U or diurnal:LOW:HIGH)"
        raise InferenceLoadError(f"{path}: {problem}{hint}")
    try:
        columns = list(pd.read_csv(path, nrows=0).columns)
    except UnicodeDecodeError:
        raise InferenceLoadError(str(not_utf8(path))) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise InferenceLoadError(f"{path}: not a readable CSV ({err})") from None
    if {"model", "window_start_s", "total_rate_req_per_s"} <= set(columns):
        return from_servegen(path, model or SERVEGEN_DEFAULT_MODEL)
    if model is not None:
        raise InferenceLoadError(f"{path}: ':{model}' selects a ServeGen model, but the file is not ServeGen's")
    value = next((c for c in UTIL_COLUMNS if c in columns), None)
    if "time" not in columns or value is None:
        raise InferenceLoadError(f"{path}: needs columns 'time' and one of {', '.join(UTIL_COLUMNS)}"
                                 f" (or ServeGen's model, window_start_s, total_rate_req_per_s); has {columns}")
    return from_csv(path, "time", value)


def from_csv(path: str | Path, time_col: str = "time", value_col: str = "utilization") -> InferenceLoad:
    """A series of ``time`` (s, increasing, from 0) and utilisation (fraction of GPUs busy, [0, 1])."""
    frame = _read(path)
    times = _numeric(frame, time_col, path)
    values = _numeric(frame, value_col, path)
    bad = np.flatnonzero((values < 0) | (values > 1))
    if len(bad):
        raise _error(path, frame, bad[0], value_col, "not a fraction in [0, 1]", values[bad[0]])
    steps = np.diff(times)
    if len(steps) and np.any(steps <= 0):
        i = int(np.flatnonzero(steps <= 0)[0]) + 1
        raise _error(path, frame, i, time_col, "times must increase", times[i])
    return _series(times, values, f"{path}")


def _read(path: str | Path) -> pd.DataFrame:
    """The CSV, its index the 0-based data row (blank lines counted, as the trace loaders count
    them, and left out)."""
    return pd.read_csv(path, skip_blank_lines=False).dropna(how="all")


def _error(path: str | Path, frame: pd.DataFrame, i: int, column: str, message: str,
           value: object) -> InferenceLoadError:
    """The error naming the file, the data row of ``frame``'s ``i``-th row, the column and the value,
    worded as the trace loaders' errors."""
    return InferenceLoadError(str(TraceError(path, message, int(frame.index[i]) + 1, column, value)))


def from_servegen(path: str | Path, model: str = SERVEGEN_DEFAULT_MODEL,
                  lo: float = SERVEGEN_RANGE[0], hi: float = SERVEGEN_RANGE[1]) -> InferenceLoad:
    """ServeGen request rates of ``model`` mapped to occupancy (see the module doc and docs/explanation/lyra.md)."""
    frame = _read(path)
    models = sorted(frame["model"].astype(str).unique())
    part = frame[frame["model"] == model]
    if part.empty:
        raise InferenceLoadError(f"{path}: no model {model!r} (models: {', '.join(models)})")
    times = _numeric(part, "window_start_s", path)
    rates = _numeric(part, "total_rate_req_per_s", path)
    if np.any(rates < 0):
        i = int(np.flatnonzero(rates < 0)[0])
        raise _error(path, part, i, "total_rate_req_per_s", f"negative request rate (model {model!r})", rates[i])
    order = np.argsort(times, kind="stable")
    times, rates = times[order], rates[order]
    for i in range(len(rates)):  # dropouts (zero windows) take the previous value
        if rates[i] == 0 and i:
            rates[i] = rates[i - 1]
    p1, p99 = np.percentile(rates, [1, 99])
    scaled = lo + (rates - p1) * (hi - lo) / (p99 - p1) if p99 > p1 else np.full_like(rates, (lo + hi) / 2)
    return _series(times, np.clip(scaled, 0.0, 1.0), f"{path}:{model}")


def _numeric(frame: pd.DataFrame, column: str, path) -> np.ndarray:
    if column not in frame.columns:
        raise InferenceLoadError(f"{path}: no column {column!r} (columns: {list(frame.columns)})")
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        raise _error(path, frame, bad[0], column, "not a finite number", frame[column].iloc[bad[0]])
    return values


def _series(times: np.ndarray, values: np.ndarray, source: str) -> InferenceLoad:
    if len(times) == 0:
        raise InferenceLoadError(f"{source}: no rows")
    times = times - times[0]
    step = float(np.median(np.diff(times))) if len(times) > 1 else 86400.0
    return InferenceLoad(times.astype(float), values.astype(float), float(times[-1] + step), source)
