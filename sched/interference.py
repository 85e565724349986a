"""Interference ratios ξ (Castor §3.2, eq. 4-5): how much slower each of two co-located jobs runs.

``ratio(a, b, mode, shares) -> (ξ_a, ξ_b)`` with ξ = t_coloc / t_solo >= 1 (``inf``: the pair cannot
run together). Jobs are described by their workload (``model``) and per-GPU micro-batch
(``batch_size / accumulation_steps``). Modes: ``timeslice`` (CUDA's default time-slicing) and ``mps``
(NVIDIA MPS; ``shares`` are the two active-thread percentages).

Sources, interchangeable:

- ``analytic``: a constant ξ per mode. Time-slicing defaults to 1.5, the middle of the range
  SJF-BSBF §VI-C injects (1.0-2.0) and where Castor §6.4 says decisions flip. MPS removes 43% of
  the excess (ξ_mps = 1 + 0.57 (ξ_ts - 1)): Castor §8 / Fig. 8a measured MPS up to 43% lower.
  Active-thread shares are ignored. Used as the fallback for pairs a table does not cover.
- ``gavel``: Gavel's measured co-located throughputs (its published JSON), ξ = solo / paired
  throughput per job, one GPU (scale factor 1), via the mapping in ``conf/interference/gavel.yaml``.
  Gavel measured without MPS, so ``timeslice`` reads the table and ``mps`` applies the 43% rule.
  A pair Gavel measured as 0 (could not run together) is ``inf``.
- ``table``: a CSV/Parquet of measured pairs (``model_a, batch_a, model_b, batch_b, mode, share_a,
  xi_a, xi_b``), e.g. exported from the profile store; the nearest measured batch is used.
- ``model``: an XGBoost ξ predictor fitted by ``schedlab fit interference`` (see ``sched/models.py``).

Every source counts the pairs it could not answer and sent to the analytic fallback (``fallbacks``).
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd
import yaml

if TYPE_CHECKING:
    from schedlab.sched.job import Job

GAVEL_MAPPING = Path(__file__).resolve().parent.parent / "conf" / "interference" / "gavel.yaml"
MODES = ("timeslice", "mps")
MPS_EXCESS_KEPT = 0.57  # Castor §8: MPS lowers ξ by up to 43%


class InterferenceError(ValueError):
    pass


class InterferenceSource(Protocol):
    name: str
    fallbacks: int

    def ratio(self, a: Job, b: Job, mode: str, shares: tuple[float, float] | None = None) -> tuple[float, float]:
        ...


def micro_batch(job: Job) -> float:
    return job.batch_size / job.accumulation_steps


def mps_from_timeslice(xi: float) -> float:
    return 1.0 + MPS_EXCESS_KEPT * (xi - 1.0) if math.isfinite(xi) else xi


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise InterferenceError(f"unknown sharing mode {mode!r}; choose one of {', '.join(MODES)}")


class Analytic:
    """A constant ratio per mode (see the module docstring for the defaults' provenance)."""

    def __init__(self, timeslice: float = 1.5, mps: float | None = None) -> None:
        if not (1 <= timeslice < math.inf) or (mps is not None and not 1 <= mps < math.inf):
            raise InterferenceError(f"interference ratios must be finite and >= 1 (timeslice={timeslice}, mps={mps})")
        self.name = f"analytic:{timeslice:g}"
        self.xi = {"timeslice": timeslice, "mps": mps if mps is not None else mps_from_timeslice(timeslice)}
        self.fallbacks = 0

    def ratio(self, a: Job, b: Job, mode: str, shares: tuple[float, float] | None = None) -> tuple[float, float]:
        _check_mode(mode)
        return self.xi[mode], self.xi[mode]


class _Cached:
    """Shared by the table sources: cache by (models, micro-batches, mode), analytic fallback."""

    def __init__(self, name: str, fallback: Analytic | None = None) -> None:
        self.name = name
        self.fallback = fallback or Analytic()
        self.fallbacks = 0
        self._cache: dict[tuple, tuple[float, float]] = {}

    def ratio(self, a: Job, b: Job, mode: str, shares: tuple[float, float] | None = None) -> tuple[float, float]:
        _check_mode(mode)
        key = (a.model, micro_batch(a), b.model, micro_batch(b), mode, shares)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._lookup(a.model, micro_batch(a), b.model, micro_batch(b), mode, shares)
            if hit is None:
                self.fallbacks += 1
                hit = self.fallback.ratio(a, b, mode, shares)
            self._cache[key] = hit
        return hit

    def _lookup(self, model_a, batch_a, model_b, batch_b, mode, shares) -> tuple[float, float] | None:
        raise NotImplementedError


class GavelTable(_Cached):
    def __init__(self, path: str | Path, worker_type: str = "v100", mapping: str | Path = GAVEL_MAPPING) -> None:
        super().__init__(f"gavel:{worker_type}")
        path = Path(path)
        try:
            table = json.loads(path.read_text())[worker_type]
        except FileNotFoundError:
            raise InterferenceError(f"Gavel throughput file not found: {path}") from None
        except KeyError:
            raise InterferenceError(f"{path}: no worker type {worker_type!r}") from None
        self.solo: dict[str, float] = {}
        self.pairs: dict[tuple[str, str], tuple[float, float]] = {}
        for key, entry in table.items():
            job_type, scale = ast.literal_eval(key)
            if scale != 1:
                continue
            self.solo[job_type] = entry["null"]
            for other, both in entry.items():
                if other != "null":
                    self.pairs[(job_type, ast.literal_eval(other)[0])] = (both[0], both[1])
        self.mapping = yaml.safe_load(Path(mapping).read_text())["models"]

    def _job_type(self, model: str, batch: float) -> str | None:
        entry = self.mapping.get(model)
        if entry is None:
            return None
        if not entry["batches"]:
            return entry["gavel"]
        nearest = min(entry["batches"], key=lambda b: abs(math.log(b) - math.log(max(batch, 1e-9))))
        return f"{entry['gavel']} (batch size {nearest})"

    def _lookup(self, model_a, batch_a, model_b, batch_b, mode, shares):
        type_a, type_b = self._job_type(model_a, batch_a), self._job_type(model_b, batch_b)
        measured = self.pairs.get((type_a, type_b))
        reverse = self.pairs.get((type_b, type_a))
        if measured is None and reverse is None:
            return None
        if measured is None or reverse is None:  # Gavel measured most pairs in both orders; use both
            measured = measured or (reverse[1], reverse[0])
        else:
            measured = (_mean_throughput(measured[0], reverse[1]), _mean_throughput(measured[1], reverse[0]))
        xi = tuple(
            self.solo[t] / thr if thr > 0 else math.inf for t, thr in ((type_a, measured[0]), (type_b, measured[1]))
        )
        return xi if mode == "timeslice" else (mps_from_timeslice(xi[0]), mps_from_timeslice(xi[1]))


class PairsTable(_Cached):
    COLUMNS = ("model_a", "batch_a", "model_b", "batch_b", "mode", "share_a", "xi_a", "xi_b")

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"table:{Path(path).name}")
        path = Path(path)
        if not path.exists():
            raise InterferenceError(f"interference table not found: {path}")
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        missing = [c for c in self.COLUMNS if c not in frame.columns]
        if missing:
            raise InterferenceError(f"{path}: missing columns {missing} (need {', '.join(self.COLUMNS)})")
        bad = frame[["xi_a", "xi_b"]].lt(1).any(axis=1) | frame[["xi_a", "xi_b"]].isna().any(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0]) + 1
            raise InterferenceError(f"{path}, row {row}: xi_a / xi_b must be numbers >= 1")
        self.frame = frame

    def _lookup(self, model_a, batch_a, model_b, batch_b, mode, shares):
        f = self.frame
        rows = f[(f["model_a"] == model_a) & (f["model_b"] == model_b) & (f["mode"] == mode)]
        if mode == "mps" and shares is not None and len(rows):
            rows = rows[np.isclose(rows["share_a"], shares[0])] if np.isclose(rows["share_a"], shares[0]).any() else rows
        if rows.empty:
            return None
        distance = np.abs(np.log(rows["batch_a"].to_numpy() / batch_a)) + np.abs(np.log(rows["batch_b"].to_numpy() / batch_b))
        best = rows.iloc[int(np.argmin(distance))]
        return float(best["xi_a"]), float(best["xi_b"])


def _mean_throughput(x: float, y: float) -> float:
    """Mean of two measurements of one throughput; 0 (could not run) if either is 0."""
    return 0.0 if x <= 0 or y <= 0 else (x + y) / 2


def make_interference(spec: str | None) -> InterferenceSource:
    """``analytic[:XI]``, ``gavel:PATH[:WORKER]``, ``table:PATH``, ``model:PATH|models:/NAME/VERSION``."""
    spec = spec or "analytic"
    kind, _, rest = spec.partition(":")
    if kind == "analytic":
        try:
            xi = float(rest) if rest else None
        except ValueError:
            raise InterferenceError(f"interference {spec!r}: XI must be a number >= 1, got {rest!r}") from None
        return Analytic(xi) if xi is not None else Analytic()
    if kind == "gavel":
        path, _, worker = rest.rpartition(":") if rest.rsplit(":", 1)[-1] in ("k80", "p100", "v100") else (rest, "", "")
        return GavelTable(path, worker or "v100")
    if kind == "table":
        return PairsTable(rest)
    if kind == "model":
        from schedlab.sched.models import InterferenceModel

        return InterferenceModel.load(rest)
    raise InterferenceError(
        f"unknown interference source {spec!r}: use analytic[:XI], gavel:PATH[:WORKER], table:PATH or model:PATH|URI"
    )
