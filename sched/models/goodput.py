"""The goodput job model of Pollux's simulator study, from its measured data (docs/explanation/pollux.md).

One :class:`GoodputModel` per application, read from ``traces/<application>/`` of the Pollux data:

- ``placements.csv`` (placement digits = GPUs per node, per-GPU batch, step_time, sync_time) and
  ``scalability.csv`` (nodes, replicas, per-GPU batch, step_time, sync_time) give the iteration
  time: linear in the per-GPU batch for a measured placement, else linear over
  (nodes, replicas, per-GPU batch) on the Delaunay triangulation of all measured points;
- a global batch ``B`` on ``r`` GPUs runs per-GPU batch ``ceil(B/r)`` in ``a + 1`` passes
  (``a = ceil(per-GPU / max per-GPU batch) - 1``, at least 1 on one GPU when ``B > B0``), micro-batch
  ``ceil(per-GPU / (a + 1))`` (capped so the batch stays within the measured range), iteration time
  ``step + a (step - sync)``;
- ``validation-<B>.csv`` (one row per epoch) give the gradient statistics: statistical efficiency
  at scale ``s = B / B0`` is ``(var + sqr) / (var / s + sqr)``, with the epoch's ``grad_sqr`` and
  ``grad_var`` interpolated linearly between the two nearest measured batch sizes;
- progress rate (goodput) = efficiency / iteration time; epoch ``e`` ends at the smallest cumulative
  progress after ``e`` epochs over the measured batch sizes; a job converges after its
  application's epochs (bert 2, cifar10 100, ncf 10, imagenet 90, deepspeech2 80, yolov3 50).

A placement is the tuple of GPUs per node, largest first. The measured nodes have 4 GPUs: a server
with more GPUs (castor-sim's 8) counts as several measured nodes of at most 4 (chunks of 4).
Everything that repeats (iteration times, efficiencies, goodputs, best batches) is memoised per
model; :func:`load_applications` reads a data folder once per process.
"""

from __future__ import annotations

import bisect
import functools
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from schedlab.sched.traces.common import TraceError

#: the study's per-application settings (its simulator; docs/explanation/pollux.md)
STUDY_SETTINGS: dict[str, dict[str, int]] = {
    "bert": {"epochs": 2},
    "cifar10": {"epochs": 100},
    "ncf": {"epochs": 10},
    "imagenet": {"epochs": 90},
    "deepspeech2": {"epochs": 80},
    "yolov3": {"epochs": 50, "max_local_batch": 8},
}
#: TunedJobs' GPU counts (docs/explanation/pollux.md)
TUNED_GPU_COUNTS = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48)
BATCH_CANDIDATES = 50  # Pollux: 50 geometrically spaced global batch sizes
MAX_INTERPOLATED_NODES = 16  # the scalability data stops at 16 nodes; more count as 16 (as the study)
_EPS = 1e-8  # tolerance of the study's ceil operations
_PLACEMENT_COLUMNS = ("placement", "local_bsz", "step_time", "sync_time")
_SCALABILITY_COLUMNS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
_VALIDATION_COLUMNS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")


class GoodputDataError(TraceError):
    """Bad goodput data; the message names the file, the 1-based data row and the column."""


def _ceil(x: float) -> int:
    return math.ceil(x - _EPS)


@dataclass(frozen=True, eq=False)
class GoodputModel:
    """One application's goodput model (docs/explanation/pollux.md). Progress is in the data's own units (about
    one iteration at ``min_batch``); ``boundaries[e]`` is the cumulative progress at the end of epoch
    ``e + 1``, and ``boundaries[-1] == total_progress``."""

    name: str
    epochs: int
    boundaries: tuple[float, ...]
    min_batch: int  # B0: the smallest measured global batch
    max_batch: int  # the largest measured global batch
    min_local_batch: int
    max_local_batch: int
    total_progress: float
    node_size: int  # GPUs per measured node (4)
    batches: tuple[int, ...] = field(repr=False)  # measured global batches, ascending
    grad_sqr: np.ndarray = field(repr=False)  # [batch, epoch]
    grad_var: np.ndarray = field(repr=False)
    iterations: np.ndarray = field(repr=False)  # [batch, epoch] cumulative iterations at the epoch's end
    placements: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(repr=False)
    points: np.ndarray = field(repr=False)  # (nodes, replicas, local_bsz) for the 3-D interpolation
    values: np.ndarray = field(repr=False)  # (step_time, sync_time) at ``points``
    _memo: dict = field(default_factory=dict, repr=False)

    @property
    def max_nodes(self) -> int:
        """The most measured nodes a placement may span (the data's range)."""
        return int(self.points[:, 0].max())

    @property
    def max_gpus(self) -> int:
        """The most GPUs a job may hold (the data's range)."""
        return int(self.points[:, 1].max())

    def max_servers(self, gpus_per_server: int) -> int:
        """The most servers of ``gpus_per_server`` GPUs a placement may span and stay within the
        measured nodes (a server above ``node_size`` GPUs counts as several measured nodes)."""
        return max(1, self.max_nodes // -(-gpus_per_server // self.node_size))

    # ---- iteration time ----------------------------------------------------------------------
    def canonical(self, placement: tuple[int, ...] | list[int]) -> tuple[int, ...]:
        """GPUs per measured node, largest first (servers above ``node_size`` GPUs split in chunks)."""
        key = ("canon", placement if isinstance(placement, tuple) else tuple(placement))
        memo = self._memo.get(key)
        if memo is None:
            memo = self._memo[key] = self._canonical(key[1])
        return memo

    def _canonical(self, placement: tuple[int, ...]) -> tuple[int, ...]:
        out: list[int] = []
        for n in placement:
            n = int(n)
            if n < 0:
                raise ValueError(f"{self.name}: placement {tuple(placement)} has a negative GPU count")
            out.extend([self.node_size] * (n // self.node_size) + ([n % self.node_size] if n % self.node_size else []))
        if not out:
            raise ValueError(f"{self.name}: empty placement {tuple(placement)}")
        return tuple(sorted(out, reverse=True))

    def config(self, num_replicas: int, batch: int) -> tuple[int, int, int]:
        """``(micro-batch, accumulation passes, batch actually trained)`` for global ``batch`` on
        ``num_replicas`` GPUs (docs/explanation/pollux.md), or a ValueError if no measured micro-batch fits."""
        key = ("config", num_replicas, batch)
        memo = self._memo.get(key)
        if memo is None:
            if num_replicas < 1 or batch < 1:
                raise ValueError(f"{self.name}: batch {batch} on {num_replicas} GPUs")
            local = _ceil(batch / num_replicas)
            accum = _ceil(local / self.max_local_batch) - 1
            if num_replicas == 1 and batch > self.min_batch:
                accum = max(1, accum)
            micro = _ceil(local / (accum + 1))
            micro = min(micro, self.max_batch // (num_replicas * (accum + 1)))  # stay in the measured range
            if micro < self.min_local_batch:
                raise ValueError(self._batch_error(num_replicas, batch, micro))
            memo = self._memo[key] = (micro, accum, num_replicas * micro * (accum + 1))
        return memo

    def _batch_error(self, num_replicas: int, batch: int, micro: int) -> str:
        """Why no measured configuration runs global ``batch`` on ``num_replicas`` GPUs: the bound it breaks
        and the allowed range."""
        measured = (f"measured: global batch {self.min_batch}-{self.max_batch}, per-GPU batch"
                    f" {self.min_local_batch}-{self.max_local_batch}")
        if batch > self.max_batch:
            return (f"{self.name}: global batch {batch} on {num_replicas} GPUs is above the largest measured global"
                    f" batch {self.max_batch} (allowed: up to {self.max_batch}; {measured})")
        fewest = num_replicas * self.min_local_batch  # about the least that gives every GPU its smallest batch
        if fewest > self.max_batch:
            return (f"{self.name}: global batch {batch} on {num_replicas} GPUs: {num_replicas} GPUs need at least"
                    f" {fewest}, above the largest measured {self.max_batch} (allowed: at most"
                    f" {self.max_batch // self.min_local_batch} GPUs; {measured})")
        return (f"{self.name}: global batch {batch} on {num_replicas} GPUs is a per-GPU batch of {micro}, below the"
                f" smallest measured {self.min_local_batch} (on {num_replicas} GPUs the global batch must be about"
                f" {fewest} or more, up to {self.max_batch}; {measured})")

    def step_sync(self, placement: tuple[int, ...], micro_batch: int) -> tuple[float, float]:
        """Measured (interpolated) ``(step_time, sync_time)`` of one pass at ``micro_batch`` per GPU."""
        shape = self.canonical(placement)
        key = ("step", shape, micro_batch)
        memo = self._memo.get(key)
        if memo is None:
            memo = self._memo[key] = self._interpolate(shape, micro_batch)
        return memo

    def _interpolate(self, shape: tuple[int, ...], micro_batch: int) -> tuple[float, float]:
        # the data names a placement by its lexicographically smallest rotation (a ring of nodes)
        rotation = min(shape[i:] + shape[:i] for i in range(len(shape)))
        measured = self.placements.get(rotation)
        if measured is not None:
            local, step, sync = measured
            if not local[0] <= micro_batch <= local[-1]:
                raise ValueError(f"{self.name}: per-GPU batch {micro_batch} outside the measured"
                                 f" {local[0]}-{local[-1]} for placement {shape}")
            return float(np.interp(micro_batch, local, step)), float(np.interp(micro_batch, local, sync))
        step, sync = self._interpolate_nd(min(len(shape), MAX_INTERPOLATED_NODES), sum(shape), micro_batch)
        if not (math.isfinite(step) and math.isfinite(sync)):
            raise ValueError(f"{self.name}: placement {shape} at per-GPU batch {micro_batch} is outside the"
                             " measured placements and scalability data")
        return float(step), float(sync)

    def _interpolate_nd(self, nodes: int, replicas: int, micro_batch: int) -> tuple[float, float]:
        """(step, sync) over (nodes, replicas, per-GPU batch), one point per call: the triangulation
        of the measured points is degenerate in places, and a batch of points walks it from the
        previous point's simplex, which can land on another simplex than a lone query (up to 0.04 s
        apart on the Pollux data); lone queries give the study simulator's values."""
        key = ("nd", nodes, replicas, micro_batch)
        memo = self._memo.get(key)
        if memo is None:
            step, sync = _linear_nd(self)(np.array([[nodes, replicas, micro_batch]], dtype=float))[0]
            memo = self._memo[key] = (float(step), float(sync))
        return memo

    def iteration_time(self, placement: tuple[int, ...], batch: int) -> float:
        """Seconds per iteration of global ``batch`` on ``placement`` (with gradient accumulation)."""
        shape = self.canonical(placement)
        key = ("iter", shape, batch)
        memo = self._memo.get(key)
        if memo is None:
            micro, accum, _ = self.config(sum(shape), batch)
            step, sync = self.step_sync(shape, micro)
            memo = self._memo[key] = step + accum * (step - sync)
        return memo

    # ---- statistical efficiency and progress ---------------------------------------------------
    def epoch(self, progress: float) -> int:
        """0-based epoch that ``progress`` lies in (the last one at or after convergence)."""
        return min(bisect.bisect_right(self.boundaries, progress), self.epochs - 1)

    def epoch_end(self, progress: float) -> float:
        """Progress at the end of the epoch that ``progress`` lies in: exactly at a boundary, the
        next one; at or after the last boundary, ``total_progress``."""
        i = bisect.bisect_right(self.boundaries, progress)
        return self.boundaries[i] if i < self.epochs else self.total_progress

    def _efficiency_at(self, batch: int, epoch: int) -> float:
        key = ("eff", batch, epoch)
        memo = self._memo.get(key)
        if memo is None:
            if not self.min_batch <= batch <= self.max_batch:
                raise ValueError(f"{self.name}: global batch {batch} outside the measured {self.min_batch}-{self.max_batch}")
            memo = self._memo[key] = float(self._efficiency_table()[batch - self.min_batch, epoch])
        return memo

    def _efficiency_table(self) -> np.ndarray:
        """Efficiency of every integer global batch in the measured range (rows from ``min_batch``)
        at every epoch (columns), computed once: one vectorised ``np.interp`` per epoch, the same
        floating-point operations as a lone query."""
        table = self._memo.get("eff_table")
        if table is None:
            batch = np.arange(self.min_batch, self.max_batch + 1)
            scale = batch / self.min_batch
            table = np.empty((len(batch), self.epochs))
            with np.errstate(divide="ignore", invalid="ignore"):
                for e in range(self.epochs):
                    sqr = np.interp(batch, self.batches, self.grad_sqr[:, e])
                    var = np.interp(batch, self.batches, self.grad_var[:, e])
                    denom = var / scale + sqr
                    table[:, e] = np.where(denom > 0, (var + sqr) / denom, 1.0)
            self._memo["eff_table"] = table
        return table

    def grad_stats(self, batch: int, epoch: int) -> tuple[float, float]:
        """``(grad_sqr, grad_var)`` at global ``batch`` in 0-based ``epoch``, interpolated between the
        two nearest measured batches as for the efficiency (what a job's agent measures)."""
        return (float(np.interp(batch, self.batches, self.grad_sqr[:, epoch])),
                float(np.interp(batch, self.batches, self.grad_var[:, epoch])))

    def efficiency(self, batch: int, progress: float) -> float:
        """Statistical efficiency of global ``batch`` in the epoch of ``progress`` (progress per iteration)."""
        return self._efficiency_at(int(batch), self.epoch(progress))

    def goodput(self, placement: tuple[int, ...], batch: int, progress: float) -> float:
        """Progress per second of global ``batch`` on ``placement`` in the epoch of ``progress``."""
        epoch = self.epoch(progress)
        key = ("goodput", placement if isinstance(placement, tuple) else tuple(placement), batch, epoch)
        memo = self._memo.get(key)
        if memo is None:
            shape = self.canonical(placement)
            _, _, trained = self.config(sum(shape), batch)
            memo = self._memo[key] = self._efficiency_at(trained, epoch) / self.iteration_time(shape, batch)
        return memo

    # ---- batch choice ------------------------------------------------------------------------
    def batch_choices(self, num_replicas: int) -> tuple[int, ...]:
        """Pollux's candidate global batches on ``num_replicas`` GPUs: 50 geometrically spaced sizes
        from max(B0, smallest per-GPU batch x GPUs) to the largest measured batch, as trained (after
        accumulation and rounding); empty if even the smallest does not fit."""
        key = ("choices", num_replicas)
        memo = self._memo.get(key)
        if memo is None:
            low = max(self.min_batch, self.min_local_batch * num_replicas)
            out: set[int] = set()
            if low <= self.max_batch:
                for b in np.geomspace(low, self.max_batch, BATCH_CANDIDATES):
                    local = b / num_replicas
                    accum = _ceil(local / self.max_local_batch) - 1
                    if num_replicas == 1 and local > self.min_batch + _EPS:
                        accum = max(1, accum)
                    micro = _ceil(local / (accum + 1))
                    micro = min(micro, self.max_batch // (num_replicas * (accum + 1)))
                    if self.min_local_batch <= micro <= self.max_local_batch:
                        out.add(num_replicas * micro * (accum + 1))
            memo = self._memo[key] = tuple(sorted(out))
        return memo

    def best_batch(self, placement: tuple[int, ...], progress: float) -> tuple[int, float]:
        """The goodput-optimal global batch on ``placement`` in the epoch of ``progress`` and its
        goodput; ``(0, 0.0)`` when no batch fits that many GPUs."""
        key = ("best", placement if isinstance(placement, tuple) else tuple(placement))
        table = self._memo.get(key)
        if table is None:
            table = self._memo[key] = self._best_per_epoch(self.canonical(placement))
        return table[self.epoch(progress)]

    def _best_per_epoch(self, shape: tuple[int, ...]) -> list[tuple[int, float]]:
        """``best_batch`` on ``shape`` for every epoch at once: goodput of every candidate batch
        (rows) at every epoch (columns); the first largest positive one per epoch."""
        best_key = ("best_shape", shape)
        table = self._memo.get(best_key)
        if table is not None:
            return table
        choices = self.batch_choices(sum(shape))
        if not choices:
            table = [(0, 0.0)] * self.epochs
        else:
            times = np.array([self.iteration_time(shape, b) for b in choices])
            trained = np.array([self.config(sum(shape), b)[2] for b in choices])
            outside = (trained < self.min_batch) | (trained > self.max_batch)
            if outside.any():
                bad = int(trained[outside][0])
                raise ValueError(f"{self.name}: global batch {bad} outside the measured {self.min_batch}-{self.max_batch}")
            goodput = self._efficiency_table()[trained - self.min_batch] / times[:, None]
            pick = goodput.argmax(axis=0)
            table = [(int(choices[i]), float(goodput[i, e])) if goodput[i, e] > 0 else (0, 0.0)
                     for e, i in enumerate(pick)]
        self._memo[best_key] = table
        return table

    # ---- whole runs --------------------------------------------------------------------------
    def run_time(self, num_gpus: int, batch: int, gpus_per_node: int = 4) -> float:
        """Seconds to convergence alone on ``num_gpus`` GPUs packed on the fewest ``gpus_per_node``
        nodes at fixed global ``batch`` (no allocation stall)."""
        key = ("run", num_gpus, batch, gpus_per_node)
        memo = self._memo.get(key)
        if memo is None:
            shape = packed(num_gpus, gpus_per_node)
            start, total = 0.0, 0.0
            for end in self.boundaries:
                total += (end - start) / self.goodput(shape, batch, start)
                start = end
            memo = self._memo[key] = total
        return memo

    def tuned_configs(self, lo: float = 0.5, hi: float = 0.8, max_hours: float = 12.0) -> tuple[tuple[int, int, float], ...]:
        """TunedJobs (docs/explanation/pollux.md): ``(GPUs, batch, seconds alone)`` choices. For each GPU count,
        packed on measured nodes, the measured batch with the shortest run (measured iterations to
        convergence x iteration time, no forced accumulation); kept if it runs < ``max_hours`` with
        scaling efficiency T(1) / (r T(r)) in (lo, hi); the 1-GPU choice if none is kept."""
        key = ("tuned", lo, hi, max_hours)
        memo = self._memo.get(key)
        if memo is not None:
            return memo
        kept: list[tuple[int, int, float]] = []
        base: tuple[int, int, float] | None = None
        for r in TUNED_GPU_COUNTS:
            if r * self.min_local_batch > self.max_batch:
                break
            shape = packed(r, self.node_size)
            best: tuple[float, int] | None = None
            for i, b in enumerate(self.batches):
                local = _ceil(b / r)
                if local < self.min_local_batch:
                    continue
                accum = _ceil(local / self.max_local_batch) - 1
                step, sync = self.step_sync(shape, _ceil(local / (accum + 1)))
                seconds = float(self.iterations[i, self.epochs - 1]) * (step + accum * (step - sync))
                if best is None or seconds < best[0]:
                    best = (seconds, b)
            if best is None:
                continue
            if r == 1:
                base = (1, best[1], best[0])
            elif base is not None and best[0] < max_hours * 3600 and lo < base[2] / best[0] / r < hi:
                kept.append((r, best[1], best[0]))
        if not kept:
            if base is None:
                raise ValueError(f"{self.name}: no measured batch runs on one GPU")
            kept.append(base)
        memo = self._memo[key] = tuple(kept)
        return memo


def packed(num_gpus: int, gpus_per_node: int = 4) -> tuple[int, ...]:
    """``num_gpus`` on the fewest nodes of ``gpus_per_node``: full nodes then the rest."""
    if num_gpus < 1 or gpus_per_node < 1:
        raise ValueError(f"cannot pack {num_gpus} GPUs on nodes of {gpus_per_node}")
    full, rest = divmod(num_gpus, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())


def _linear_nd(model: GoodputModel) -> Any:
    """Linear interpolation over (nodes, replicas, per-GPU batch): built once per model."""
    interp = model._memo.get("linear_nd")
    if interp is None:
        from scipy.interpolate import LinearNDInterpolator

        interp = LinearNDInterpolator(model.points, model.values)
        # the triangulation's barycentric transforms take one tiny LAPACK call per simplex: with
        # BLAS threads on a busy machine that costs seconds (up to 12 s per application seen on
        # 2 shared cores) instead of milliseconds, so compute them now on one thread
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover - a dependency of scikit-learn
            interp.tri.transform  # noqa: B018
        else:
            with threadpool_limits(limits=1, user_api="blas"):
                interp.tri.transform  # noqa: B018
        model._memo["linear_nd"] = interp
    return interp


# ---- loading ---------------------------------------------------------------------------------
def default_root() -> Path:
    """``$SCHEDLAB_POLLUX_DATA``, else ``<repo>/../shared/data/profiles/pollux``, else the same
    below the working directory's parent (where experiment files find ``../shared/data``)."""
    env = os.environ.get("SCHEDLAB_POLLUX_DATA")
    if env:
        return Path(env).expanduser()
    relative = Path("shared", "data", "profiles", "pollux")
    beside_repo = Path(__file__).resolve().parents[3] / relative
    beside_cwd = Path.cwd().parent / relative
    return beside_repo if beside_repo.is_dir() or not beside_cwd.is_dir() else beside_cwd


def load_applications(root: str | Path | None = None) -> dict[str, GoodputModel]:
    """Every application under ``root/traces/`` (or ``root`` itself if it has no ``traces``
    folder), by name; read once per process and folder."""
    path = (Path(root).expanduser() if root is not None else default_root()).resolve()
    return _load_all(str(path / "traces" if (path / "traces").is_dir() else path))


@functools.lru_cache(maxsize=8)
def _load_all(root: str) -> dict[str, GoodputModel]:
    folder = Path(root)
    if not folder.is_dir():
        raise GoodputDataError(folder, "goodput data folder not found (set $SCHEDLAB_POLLUX_DATA or goodput_root)")
    apps = sorted(p for p in folder.iterdir() if (p / "placements.csv").is_file())
    if not apps:
        raise GoodputDataError(folder, "no application folder with a placements.csv")
    return {p.name: load_application(p) for p in apps}


def load_application(folder: str | Path, epochs: int | None = None, max_local_batch: int | None = None) -> GoodputModel:
    """One application's model from its folder; ``epochs`` and ``max_local_batch`` default to the
    study's settings for its name, else all validation rows and the largest measured per-GPU batch."""
    folder = Path(folder)
    name = folder.name
    settings = STUDY_SETTINGS.get(name, {})
    placements = _read(folder / "placements.csv", _PLACEMENT_COLUMNS)
    scalability = _read(folder / "scalability.csv", _SCALABILITY_COLUMNS)
    file = str(folder / "placements.csv")
    for i, p in enumerate(placements["placement"]):
        if not (float(p).is_integer() and re.fullmatch(r"[1-9]+", str(int(p)))):
            raise GoodputDataError(file, "placement must be digits 1-9 (GPUs per node)", i + 1, "placement", p)
    _check_times(placements, file)
    _check_times(scalability, str(folder / "scalability.csv"))
    by_placement: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for pid, rows in placements.groupby("placement", sort=True):
        rows = rows.sort_values("local_bsz")
        local = rows["local_bsz"].to_numpy(float)
        if np.any(np.diff(local) <= 0):
            i = int(rows.index[int(np.flatnonzero(np.diff(local) <= 0)[0]) + 1])
            raise GoodputDataError(file, f"placement {int(pid)} repeats a per-GPU batch", i + 1, "local_bsz", local)
        by_placement[tuple(int(c) for c in str(int(pid)))] = (
            local, rows["step_time"].to_numpy(float), rows["sync_time"].to_numpy(float))
    node_size = max(max(k) for k in by_placement)
    placements = placements.assign(
        num_nodes=[len(str(int(p))) for p in placements["placement"]],
        num_replicas=[sum(map(int, str(int(p)))) for p in placements["placement"]],
    )
    xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
    grouped = placements.groupby(xs, sort=True)[ys].mean().reset_index()
    table = pd.concat([grouped[xs + ys], scalability[xs + ys]], ignore_index=True)

    validation: dict[int, pd.DataFrame] = {}
    for path in folder.glob("validation-*.csv"):
        m = re.fullmatch(r"validation-(\d+)\.csv", path.name)
        if m is None:
            raise GoodputDataError(path, "expected a name validation-<global batch>.csv")
        validation[int(m.group(1))] = _read(path, _VALIDATION_COLUMNS)
    if not validation:
        raise GoodputDataError(folder, "no validation-<batch>.csv file")
    batches = tuple(sorted(validation))
    rows = min(len(v) for v in validation.values())
    epochs = epochs or settings.get("epochs") or rows
    if epochs > rows:
        short = min(validation, key=lambda b: len(validation[b]))
        raise GoodputDataError(folder / f"validation-{short}.csv", f"{rows} epoch rows, the model needs {epochs}")
    for b, v in validation.items():
        progress = v["progress"].to_numpy(float)[:epochs]
        bad = np.flatnonzero(np.diff(np.concatenate([[0.0], progress])) <= 0)
        if len(bad):
            raise GoodputDataError(folder / f"validation-{b}.csv", "cumulative progress must rise",
                                   int(bad[0]) + 1, "progress", progress[bad[0]])
        for col in ("grad_sqr", "grad_var"):
            neg = np.flatnonzero(v[col].to_numpy(float)[:epochs] < 0)
            if len(neg):
                raise GoodputDataError(folder / f"validation-{b}.csv", "must be >= 0", int(neg[0]) + 1, col,
                                       v[col].iat[neg[0]])
    stack = {col: np.array([validation[b][col].to_numpy(float)[:epochs] for b in batches])
             for col in ("progress", "iteration", "grad_sqr", "grad_var")}
    boundaries = tuple(float(x) for x in stack["progress"].min(axis=0))
    min_local = int(placements["local_bsz"].min())
    max_local = int(max_local_batch or settings.get("max_local_batch") or placements["local_bsz"].max())
    if batches[-1] < min_local:
        raise GoodputDataError(folder, f"largest measured batch {batches[-1]} is below the smallest per-GPU batch {min_local}")
    return GoodputModel(
        name=name, epochs=epochs, boundaries=boundaries, min_batch=batches[0], max_batch=batches[-1],
        min_local_batch=min_local, max_local_batch=max_local, total_progress=boundaries[-1], node_size=node_size,
        batches=batches, grad_sqr=stack["grad_sqr"], grad_var=stack["grad_var"], iterations=stack["iteration"],
        placements=by_placement, points=table[xs].to_numpy(float), values=table[ys].to_numpy(float),
    )


def _read(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """A numeric CSV with ``columns``; errors name the file, row (1-based, header excluded) and column."""
    if not path.is_file():
        raise GoodputDataError(path, "file not found")
    try:
        df = pd.read_csv(path, dtype=str, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise GoodputDataError(path, f"malformed CSV: {exc}") from None
    df.columns = [c.strip() for c in df.columns]
    for col in columns:
        if col not in df.columns:
            raise GoodputDataError(path, f"missing column {col!r} (columns found: {list(df.columns)})", column=col)
    if df.empty:
        raise GoodputDataError(path, "no data rows")
    out = pd.DataFrame(index=df.index)
    for col in columns:
        num = pd.to_numeric(df[col], errors="coerce")
        bad = ~np.isfinite(num.to_numpy(float))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise GoodputDataError(path, "not a finite number", i + 1, col, df[col].iat[i])
        out[col] = num.astype(float)
    return out


def _check_times(df: pd.DataFrame, file: str) -> None:
    for col, ok in (("local_bsz", df["local_bsz"] >= 1), ("step_time", df["step_time"] > 0),
                    ("sync_time", (df["sync_time"] >= 0) & (df["sync_time"] < df["step_time"]))):
        if not ok.all():
            i = int(np.flatnonzero(~ok.to_numpy())[0])
            rule = "must be >= 0 and below step_time" if col == "sync_time" else "must be positive"
            raise GoodputDataError(file, rule, i + 1, col, df[col].iat[i])
