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
  xi_a, xi_b``), e.g. exported from the profile store; the nearest measured batch is used. An optional
  ``share_b`` column makes MPS caps two-dimensional (the nearest ``(share_a, share_b)``, no shares =
  (100, 100); ties go to the nearest share ratio, then the lower shares); rows with an empty
  ``model_b`` are restricted-solo rows: ``xi_a`` = σ of ``model_a`` alone under cap ``share_a``
  (Gimbal's squeezed worker on an unshared GPU, docs/explanation/gimbal.md). Optional ``gpus_a,
  gpus_b`` columns (whole numbers >= 1; absent: 1) key a row by the two jobs' device counts: a job on
  n devices beside a one-device partner on each of them (its ranks wait for each other at every
  all-reduce, so a partner slows the whole job) reads the rows measured that way, and the one-device
  pair's rows where there are none.
- ``mpscap[:rho=R][:eta=E]:BASE``: Gimbal's MPS-cap model over any source (docs/explanation/gimbal.md, OURS):
  with ξ⁰ the base's free-competition ``mps`` ratio, a worker capped at p beside a partner capped at
  q runs at ``ξ = p^-ρ (1 + (ξ⁰ - 1) q^η)`` and alone at ``σ(p) = p^-ρ`` (ρ = 0.5, η = 2 by default).
  Shares are active-thread percentages, as everywhere; ``timeslice`` is the base's unchanged.
- ``model``: an XGBoost ξ predictor fitted by ``schedlab fit interference`` (see ``sched/models/fitted.py``).

Every source counts the pairs it could not answer and sent to the analytic fallback (``fallbacks``).
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd
import yaml

from schedlab import conf

if TYPE_CHECKING:
    from schedlab.sched.core.job import Job
    from schedlab.sched.models.fitted import Fetch

GAVEL_MAPPING = conf.path("interference", "gavel.yaml")
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
    """Shared by the table sources: cache by (models, micro-batches, device counts, mode), analytic fallback."""

    def __init__(self, name: str, fallback: Analytic | None = None) -> None:
        self.name = name
        self.fallback = fallback or Analytic()
        self.fallbacks = 0
        self._cache: dict[tuple, tuple[float, float]] = {}

    def ratio(self, a: Job, b: Job, mode: str, shares: tuple[float, float] | None = None) -> tuple[float, float]:
        _check_mode(mode)
        devices = (a.num_gpus, b.num_gpus)
        key = (a.model, micro_batch(a), b.model, micro_batch(b), mode, shares, devices)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._lookup(a.model, micro_batch(a), b.model, micro_batch(b), mode, shares, devices)
            if hit is None:
                self.fallbacks += 1
                hit = self.fallback.ratio(a, b, mode, shares)
            self._cache[key] = hit
        return hit

    def _lookup(self, model_a, batch_a, model_b, batch_b, mode, shares,
                devices: tuple[int, int]) -> tuple[float, float] | None:
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

    def _lookup(self, model_a, batch_a, model_b, batch_b, mode, shares, devices):  # measured on one GPU each
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


class MpsCap:
    """Gimbal's restriction model over a free-competition ξ source (module docstring; M6 of
    docs/explanation/gimbal.md: X(1, 1) = ξ⁰, squeezing the partner lowers ξ, a capped job slows down)."""

    def __init__(self, base: InterferenceSource, rho: float = 0.5, eta: float = 2.0) -> None:
        for name, value in (("rho", rho), ("eta", eta)):
            if not 0 < value < math.inf:
                raise InterferenceError(f"mpscap: {name} must be a finite number > 0, got {value!r}")
        self.base, self.rho, self.eta = base, float(rho), float(eta)
        self.name = f"mpscap:rho={rho:g}:eta={eta:g}:{base.name}"
        # ratio's answers by both jobs' (model, batch, accumulation steps), mode and caps: kept when the
        # base is a pure function of those (the table sources cache by them, Analytic is a constant)
        self._memo: dict[tuple, tuple[float, float]] | None = {} if isinstance(base, (_Cached, Analytic)) else None

    @property
    def fallbacks(self) -> int:
        return self.base.fallbacks

    def ratio(self, a: Job, b: Job, mode: str, shares: tuple[float, float] | None = None) -> tuple[float, float]:
        if self._memo is None:
            return self._ratio(a, b, mode, shares)
        key = (a.model, a.batch_size, a.accumulation_steps, b.model, b.batch_size, b.accumulation_steps, mode, shares)
        if (hit := self._memo.get(key)) is None:
            hit = self._memo[key] = self._ratio(a, b, mode, shares)
        return hit

    def _ratio(self, a: Job, b: Job, mode: str, shares: tuple[float, float] | None) -> tuple[float, float]:
        _check_mode(mode)
        if mode != "mps":
            return self.base.ratio(a, b, mode, shares)
        xi_a, xi_b = self.base.ratio(a, b, "mps", None)
        if shares is None or shares[0] == shares[1] == 100.0:
            return xi_a, xi_b
        p, q = shares[0] / 100.0, shares[1] / 100.0
        return self.capped(xi_a, p, q), self.capped(xi_b, q, p)

    def capped(self, xi0: float, own: float, other: float) -> float:
        """X(p_own, p_other; ξ⁰)."""
        if own <= 0 or not math.isfinite(xi0):
            return math.inf
        return own ** -self.rho * (1.0 + (xi0 - 1.0) * max(other, 0.0) ** self.eta)

    def restricted_solo(self, job: Job, share: float) -> float:
        """σ(p) = p^-ρ (``share`` a fraction)."""
        return math.inf if share <= 0 else share ** -self.rho


#: ``table:NAME`` also finds a table shipped in ``conf/interference/`` (e.g. ``table:h200-pairs.csv``)
SHIPPED_TABLES = conf.path("interference")


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
        solo = frame["model_b"].isna() | (frame["model_b"].astype(str).str.strip() == "")
        xi = frame[["xi_a", "xi_b"]]
        bad = (xi.lt(1) | xi.isna()).assign(xi_b=lambda d: d["xi_b"] & ~solo.to_numpy()).any(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0]) + 1
            raise InterferenceError(f"{path}, row {row}: xi_a / xi_b must be numbers >= 1")
        self.two_shares = "share_b" in frame.columns
        share_cols = ["share_a", "share_b"] if self.two_shares else ["share_a"]
        bad_share = solo.to_numpy() & ~(frame["share_a"].gt(0) & frame["share_a"].le(100)).to_numpy()
        if self.two_shares:
            bad_share |= (~solo).to_numpy() & frame[share_cols].isna().any(axis=1).to_numpy()
        if bad_share.any():
            row = int(np.flatnonzero(bad_share)[0]) + 1
            raise InterferenceError(f"{path}, row {row}: {' / '.join(share_cols)} must be MPS percentages in (0, 100]")
        counts = _device_counts(frame, solo.to_numpy(), path)
        self.device_keyed = counts is not None
        if self.device_keyed:
            frame[["gpus_a", "gpus_b"]] = counts
        self.solo = frame[solo.to_numpy()]
        self.frame = frame[~solo.to_numpy()] if solo.any() else frame
        self._solo_cache: dict[tuple, float | None] = {}

    def _lookup(self, model_a, batch_a, model_b, batch_b, mode, shares, devices):
        f = self.frame
        rows = f[(f["model_a"] == model_a) & (f["model_b"] == model_b) & (f["mode"] == mode)]
        if self.device_keyed and len(rows):  # measured at these device counts, else as a one-device pair
            at = rows[(rows["gpus_a"] == devices[0]) & (rows["gpus_b"] == devices[1])]
            rows = at if len(at) else rows[(rows["gpus_a"] == 1) & (rows["gpus_b"] == 1)]
        if mode == "mps" and self.two_shares and len(rows):  # nearest (share_a, share_b); none: free competition
            rows = self._nearest_shares(rows, shares if shares is not None else (100.0, 100.0))
        elif mode == "mps" and shares is not None and len(rows):
            rows = rows[np.isclose(rows["share_a"], shares[0])] if np.isclose(rows["share_a"], shares[0]).any() else rows
        if rows.empty:
            return None
        distance = np.abs(np.log(rows["batch_a"].to_numpy() / batch_a)) + np.abs(np.log(rows["batch_b"].to_numpy() / batch_b))
        best = rows.iloc[int(np.argmin(distance))]
        return float(best["xi_a"]), float(best["xi_b"])

    @staticmethod
    def _nearest_shares(rows: pd.DataFrame, want: tuple[float, float]) -> pd.DataFrame:
        """The rows at the measured (share_a, share_b) nearest ``want`` (L1). Ties (e.g. (100, 100) is
        as near 50/50 as 30/70 and 70/30) go to the share ratio nearest the one asked (|log ratio|),
        then to the lower (share_a, share_b): never to row order."""
        sa, sb = rows["share_a"].to_numpy(float), rows["share_b"].to_numpy(float)
        gap = np.abs(sa - want[0]) + np.abs(sb - want[1])
        near = np.isclose(gap, gap.min())
        log_ratio = np.log(np.maximum(sa, 1e-9) / np.maximum(sb, 1e-9))
        skew = np.abs(log_ratio - math.log(max(want[0], 1e-9) / max(want[1], 1e-9)))
        near &= np.isclose(skew, skew[near].min())
        first = min(zip(sa[near], sb[near]))
        return rows[near & (sa == first[0]) & (sb == first[1])]

    def restricted_solo(self, job: Job, share: float) -> float | None:
        """σ(p) from the nearest restricted-solo row of ``job``'s model (``share`` a fraction), or None."""
        key = (job.model, micro_batch(job), share)
        if key not in self._solo_cache:
            rows = self.solo[(self.solo["model_a"] == job.model) & (self.solo["mode"] == "mps")]
            value = None
            if len(rows):
                gap = np.abs(rows["share_a"].to_numpy() - 100.0 * share)
                rows = rows[np.isclose(gap, gap.min())]
                best = rows.iloc[int(np.argmin(np.abs(np.log(rows["batch_a"].to_numpy() / micro_batch(job)))))]
                value = float(best["xi_a"])
            self._solo_cache[key] = value
        return self._solo_cache[key]


def _device_counts(frame: pd.DataFrame, solo: np.ndarray, path: Path) -> np.ndarray | None:
    """The table's ``gpus_a, gpus_b`` columns (both or neither) as whole numbers, checked >= 1 on every pair
    row (a restricted-solo row's are not read: 1 there); None when the table has neither."""
    present = [c for c in ("gpus_a", "gpus_b") if c in frame.columns]
    if not present:
        return None
    if len(present) == 1:
        raise InterferenceError(f"{path}: column {present[0]} without {({'gpus_a', 'gpus_b'} - set(present)).pop()}"
                                " (the two jobs' device counts go together)")
    counts = frame[["gpus_a", "gpus_b"]].apply(pd.to_numeric, errors="coerce").to_numpy(float)
    bad = ~solo & ~((counts >= 1) & (np.floor(counts) == counts)).all(axis=1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0]) + 1
        raise InterferenceError(f"{path}, row {row}: gpus_a / gpus_b must be whole numbers >= 1")
    return np.where(np.isnan(counts), 1, counts).astype(int)


def _mean_throughput(x: float, y: float) -> float:
    """Mean of two measurements of one throughput; 0 (could not run) if either is 0."""
    return 0.0 if x <= 0 or y <= 0 else (x + y) / 2


def _parse(spec: str) -> tuple[str, str, dict[str, float]]:
    """``spec``'s kind, the rest after it and, for ``mpscap``, its options (the rest is then its base)."""
    kind, _, rest = spec.partition(":")
    options: dict[str, float] = {}
    if kind == "mpscap":
        while (head := rest.partition(":")[0]).partition("=")[0] in ("rho", "eta") and "=" in head:
            name, _, value = head.partition("=")
            try:
                options[name] = float(value)
            except ValueError:
                raise InterferenceError(f"interference {spec!r}: {name} must be a number, got {value!r}") from None
            rest = rest.partition(":")[2]
        if not rest or rest.startswith("mpscap"):
            raise InterferenceError(f"interference {spec!r}: mpscap needs a base source, e.g. mpscap:gavel:PATH")
    elif kind == "analytic":
        try:
            options["xi"] = float(rest) if rest else 1.5
        except ValueError:
            raise InterferenceError(f"interference {spec!r}: XI must be a number >= 1, got {rest!r}") from None
    elif kind not in ("gavel", "table", "model"):
        raise InterferenceError(
            f"unknown interference source {spec!r}: use analytic[:XI], gavel:PATH[:WORKER], table:PATH,"
            " model:PATH|URI or mpscap[:rho=R][:eta=E]:BASE"
        )
    return kind, rest, options


def check_interference(spec: str) -> str:
    """``spec`` checked as :func:`make_interference` reads it (kinds, numbers, options) without reading
    any file or model: what a replay's options are validated with before anything is built."""
    kind, rest, options = _parse(spec)
    if kind == "mpscap":
        MpsCap(Analytic(), **options)  # rho and eta in range
        check_interference(rest)
    elif kind == "analytic":
        Analytic(options["xi"])  # finite and >= 1
    return spec


def make_interference(spec: str | None, fetch: Fetch | None = None) -> InterferenceSource:
    """``analytic[:XI]``, ``gavel:PATH[:WORKER]``, ``table:PATH|NAME``, ``model:PATH|NAME|models:/NAME/VERSION``,
    ``mpscap[:rho=R][:eta=E]:BASE`` (BASE any of the others); an MLflow URI through ``fetch``
    (:data:`schedlab.sched.models.fitted.Fetch`)."""
    spec = spec or "analytic"
    kind, rest, options = _parse(spec)
    if kind == "mpscap":
        return MpsCap(make_interference(rest, fetch), **options)
    if kind == "analytic":
        return Analytic(options["xi"]) if rest else Analytic()
    if kind == "gavel":
        path, _, worker = _gavel_path(rest)
        return GavelTable(path, worker or "v100")
    if kind == "table":
        shipped = SHIPPED_TABLES / rest
        return PairsTable(shipped if not Path(rest).exists() and shipped.exists() else rest)
    from schedlab.sched.models.fitted import InterferenceModel

    return InterferenceModel.load(rest, fetch)


def _gavel_path(rest: str) -> tuple[str, str, str]:
    """``PATH[:WORKER]`` of a ``gavel:`` source as (path, ":" or "", worker)."""
    return rest.rpartition(":") if rest.rsplit(":", 1)[-1] in ("k80", "p100", "v100") else (rest, "", "")


def with_paths(spec: str, resolve: Callable[[str], str]) -> str:
    """``spec`` with each file path in it (``gavel:PATH``, ``table:PATH``, ``model:PATH``, those inside
    ``mpscap:``) replaced by ``resolve(path)``: an experiment makes its relative paths absolute so that its
    workers read the files it means, whatever their working folder. Names and MLflow URIs go unchanged
    through ``resolve`` as the caller decides (a shipped table's name is no path it finds)."""
    from schedlab.sched.models.fitted import is_uri

    kind, rest, _ = _parse(spec)
    head = spec[:len(spec) - len(rest)]
    if kind == "mpscap":
        return head + with_paths(rest, resolve)
    if kind == "gavel":
        path, colon, worker = _gavel_path(rest)
        return head + resolve(path) + colon + worker
    if kind in ("table", "model") and not is_uri(rest):
        return head + resolve(rest)
    return spec


def fresh(source: InterferenceSource) -> InterferenceSource:
    """A copy of ``source`` that shares what it read (tables, a model) but counts its own fallbacks
    and keeps its own caches, as if just built: each policy's replay gets one, so that its
    ``xi_fallback_pairs`` counts its own pairs only."""
    import copy

    if isinstance(source, MpsCap):
        return MpsCap(fresh(source.base), source.rho, source.eta)
    copied = copy.copy(source)
    copied.fallbacks = 0
    for cache in ("_cache", "_solo_cache"):
        if hasattr(copied, cache):
            setattr(copied, cache, {})
    return copied
