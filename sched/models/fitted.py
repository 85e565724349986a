"""Fitted-model artifacts and the ``model`` ξ source (Castor §6: the IR prediction model).

An **interference-ratio** artifact is a directory::

    model.json   XGBoost's own JSON: one booster; the job whose ξ is predicted is ``job0``
    meta.json    schema_version, kind, variant, feature order, the per-workload solo table
                 (indicators / throughput) the features are built from, the catalog-to-profiled
                 workload mapping, target transform, metrics, training-data hash, data provenance

An **iteration-time** artifact is one plain JSON file (see :mod:`schedlab.profiling.fitting`). Both
load from a path, or from an MLflow URI (``models:/NAME/VERSION``, ``runs:/RUN/PATH``) through a
:data:`Fetch` the caller passes (:func:`schedlab.tasks.model_tracking.fetcher`: the tasks layer knows
the tracking store; this module imports no MLflow and reads no environment); nothing is pickled. A
missing file, corrupt JSON or another schema version raises :class:`ModelError` naming the file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from schedlab import conf
from schedlab.sched.models.interference import Analytic, _check_mode, micro_batch, mps_from_timeslice

if TYPE_CHECKING:
    import xgboost

    from schedlab.sched.core.job import Job

SCHEMA_VERSION = 1
INTERFERENCE_KIND = "interference-ratio"
ITERATION_KIND = "iteration-time"
_META_KEYS = ("schema_version", "kind", "variant", "feature_names", "job_features", "pair_features",
              "solo", "workload_map", "modes", "target")


SHIPPED_MODELS = conf.path("models")


class ModelError(ValueError):
    """A model artifact that cannot be used; the message names the file."""


def is_uri(spec: str) -> bool:
    return spec.startswith(("models:/", "runs:/", "mlflow-artifacts:/"))


#: downloads an MLflow artifact URI into a folder and returns the local path of what it downloaded
#: (``fetch(uri, folder)``); raises :class:`ModelError` naming the URI and the store when it cannot
Fetch = Callable[[str, Path], Path]


@contextlib.contextmanager
def local_artifact(spec: str | os.PathLike[str], fetch: Fetch | None = None) -> Iterator[Path]:
    """A local path for ``spec`` while the ``with`` lasts: the path itself (or a model shipped in
    ``conf/models/``, by name), or an MLflow URI's artifacts fetched by ``fetch`` into a temporary
    folder removed afterwards."""
    spec = str(spec)
    if not is_uri(spec):
        path = Path(spec).expanduser()
        if not path.exists() and (SHIPPED_MODELS / spec).exists():
            path = SHIPPED_MODELS / spec  # a model shipped in conf/models/, by name
        if not path.exists():
            raise ModelError(f"{path}: model not found (nor a shipped model in {SHIPPED_MODELS})")
        yield path
        return
    if fetch is None:
        raise ModelError(f"{spec}: an MLflow URI, which only a caller that knows the tracking store can fetch"
                         " (schedlab replay, schedlab experiment; in code: pass"
                         " fetch=schedlab.tasks.model_tracking.fetcher(settings))")
    with tempfile.TemporaryDirectory(prefix="schedlab-model-") as dst:
        yield fetch(spec, Path(dst))


def read_json(path: Path, kind: str) -> dict[str, Any]:
    """A model JSON file of ``kind`` with the current schema version, else :class:`ModelError`."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelError(f"{path}: file missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a JSON object, got {type(data).__name__}")
    if data.get("kind") != kind:
        raise ModelError(f"{path}: kind is {data.get('kind')!r}, expected {kind!r}")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ModelError(f"{path}: schema_version {data.get('schema_version')!r}; this schedlab reads {SCHEMA_VERSION}")
    return data


def find_artifact(root: Path, filename: str) -> Path:
    """``root/filename``, or the single such file below ``root`` (MLflow downloads nest a folder);
    ``filename`` may be a glob pattern."""
    if root.is_file():
        return root
    if (root / filename).exists():
        return root / filename
    found = sorted(root.rglob(filename))
    if len(found) != 1:
        raise ModelError(f"{root}: {'no' if not found else 'several'} {filename} in the model directory")
    return found[0]


class InterferenceModel:
    """ξ source backed by an XGBoost regressor (Castor §6.2); implements ``InterferenceSource``.

    Features for a pair (a, b): a's solo features as ``job0_*``, b's as ``job1_*``, then the pair's
    (MPS on, shares, GPUs); ξ_b is the same model with the jobs swapped. A job is looked up by its
    catalog model through ``workload_map`` (or directly by a profiled workload name), at the nearest
    profiled GPU count and micro-batch (log scale); its own micro-batch and GPU count are used as
    features. Predictions are clipped to ξ >= 1 and cached; unknown workloads go to the analytic
    fallback (counted in ``fallbacks``)."""

    def __init__(self, booster: xgboost.Booster, meta: dict[str, Any], source: str = "") -> None:
        self.booster, self.meta = booster, meta
        self.name = f"model:{meta.get('name', source)}"
        self.fallbacks = 0
        self.fallback = Analytic()
        self.features: list[str] = list(meta["feature_names"])
        self._solo: dict[str, list[dict[str, Any]]] = {}
        for entry in meta["solo"]:
            self._solo.setdefault(entry["workload"], []).append(entry)
        self._cache: dict[tuple, tuple[float, float]] = {}

    # ----------------------------------------------------------------- loading / saving
    @classmethod
    def load(cls, spec: str | os.PathLike[str], fetch: Fetch | None = None) -> InterferenceModel:
        """From an artifact directory or an MLflow ``models:/…`` / ``runs:/…`` URI (through ``fetch``)."""
        import xgboost as xgb

        with local_artifact(spec, fetch) as root:
            meta_path = find_artifact(root, "meta.json")
            meta = read_json(meta_path, INTERFERENCE_KIND)
            missing = [k for k in _META_KEYS if k not in meta]
            if missing:
                raise ModelError(f"{meta_path}: missing keys {missing}")
            model_path = meta_path.parent / "model.json"
            try:
                json.loads(model_path.read_text())
                booster = xgb.Booster()
                booster.load_model(str(model_path))
                booster.set_param({"nthread": 1})  # one row per call: threads cost ~15x (2.4 vs 0.16 ms)
            except FileNotFoundError:
                raise ModelError(f"{model_path}: file missing") from None
            except (json.JSONDecodeError, UnicodeDecodeError, xgb.core.XGBoostError) as err:
                raise ModelError(f"{model_path}: not a valid XGBoost JSON model ({str(err)[:200]})") from None
            if list(booster.feature_names or []) != list(meta["feature_names"]):
                raise ModelError(f"{model_path}: its feature names differ from {meta_path}'s feature_names")
        return cls(booster, meta, str(spec))

    def save(self, out_dir: str | os.PathLike[str]) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(out / "model.json"))
        (out / "meta.json").write_text(json.dumps(self.meta, indent=1, sort_keys=False) + "\n")
        return out

    # ----------------------------------------------------------------- prediction
    def predict(self, x: np.ndarray) -> np.ndarray:
        """Raw model output as ξ (target transform undone), not clipped; ``x`` in ``feature_names`` order."""
        raw = self.booster.inplace_predict(np.asarray(x, dtype=np.float64).reshape(-1, len(self.features)))
        raw = np.asarray(raw, dtype=np.float64)
        return np.exp(raw) if self.meta["target"] == "log_xi" else raw

    def _entry(self, model: str, batch: float, gpus: int) -> dict[str, Any] | None:
        name = self.meta["workload_map"].get(model, model)
        entries = self._solo.get(name)
        if not entries:
            return None
        nearest_gpus = min({e.get("gpus") or 1 for e in entries}, key=lambda g: (abs(g - gpus), g))
        cands = [e for e in entries if (e.get("gpus") or 1) == nearest_gpus]
        return min(cands, key=lambda e: abs(math.log(max(e["batch"] or batch, 1e-9)) - math.log(max(batch, 1e-9))))

    def _job_vector(self, entry: dict[str, Any], batch: float, gpus: int) -> list[float]:
        values = entry["values"]
        out = []
        for f in self.meta["job_features"]:
            if f == "batch":
                out.append(float(batch) if entry.get("batch") is not None else math.nan)
            elif f == "gpus":
                out.append(float(gpus))
            else:
                v = values.get(f)
                out.append(math.nan if v is None else float(v))
        return out

    def _pair_vector(self, mode: str, shares: tuple[float, float] | None, gpus: int, swap: bool) -> list[float]:
        s0, s1 = (shares if shares is not None and mode == "mps" else (math.nan, math.nan))
        if swap:
            s0, s1 = s1, s0
        known = {"mps": float(mode == "mps"), "share0": s0, "share1": s1, "gpus": float(gpus)}
        return [known[f] for f in self.meta["pair_features"]]

    def ratio(self, a: Job, b: Job, mode: str, shares: tuple[float, float] | None = None) -> tuple[float, float]:
        _check_mode(mode)
        ma, mb = micro_batch(a), micro_batch(b)
        key = (a.model, ma, a.num_gpus, b.model, mb, b.num_gpus, mode, shares)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._ratio(a, b, ma, mb, mode, shares)
            self._cache[key] = hit
        return hit

    def _ratio(self, a: Job, b: Job, ma: float, mb: float, mode: str,
               shares: tuple[float, float] | None) -> tuple[float, float]:
        ea, eb = self._entry(str(a.model), ma, a.num_gpus), self._entry(str(b.model), mb, b.num_gpus)
        if ea is None or eb is None:
            self.fallbacks += 1
            return self.fallback.ratio(a, b, mode, shares)
        emulate_mps = mode == "mps" and "mps" not in self.meta["modes"]
        m = "timeslice" if emulate_mps else mode
        gpus = max(a.num_gpus, b.num_gpus)
        va, vb = self._job_vector(ea, ma, a.num_gpus), self._job_vector(eb, mb, b.num_gpus)
        x = np.array([va + vb + self._pair_vector(m, shares, gpus, False),
                      vb + va + self._pair_vector(m, shares, gpus, True)])
        xi_a, xi_b = (max(1.0, float(v)) for v in self.predict(x))
        if emulate_mps:  # trained on time-sliced pairs only: Castor §8's MPS rule, as the gavel source
            xi_a, xi_b = mps_from_timeslice(xi_a), mps_from_timeslice(xi_b)
        return xi_a, xi_b


class IterationTimeModel:
    """Eq. 1-3 parameters per workload and GPU type (Castor §3.1), from ``schedlab fit iteration-time``."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    @classmethod
    def load(cls, spec: str | os.PathLike[str], fetch: Fetch | None = None) -> IterationTimeModel:
        with local_artifact(spec, fetch) as root:
            path = find_artifact(root, "iteration-time*.json")  # fits are content-named when registered
            data = read_json(path, ITERATION_KIND)
        if not isinstance(data.get("workloads"), dict):
            raise ModelError(f"{path}: missing the 'workloads' mapping")
        try:
            for wl, by_gpu in data["workloads"].items():
                for gt, p in by_gpu.items():
                    cls._params(p)
        except (TypeError, ValueError) as err:
            raise ModelError(f"{path}: workloads.{wl}.{gt}: {err}") from None
        return cls(data)

    def save(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.data, indent=1) + "\n")
        return path

    @staticmethod
    def _params(p: dict[str, Any]):
        from schedlab.sched.models.workloads import IterationParams

        names = IterationParams.model_fields
        return IterationParams(**{k: v for k, v in p.items() if k in names})

    def params(self, workload: str, gpu_type: str | None = None):
        """:class:`~schedlab.sched.models.workloads.IterationParams` of ``workload`` (default: its only GPU type)."""
        by_gpu = self.data["workloads"].get(workload)
        if not by_gpu:
            raise KeyError(f"no iteration-time fit for {workload!r}; have {sorted(self.data['workloads'])}")
        if gpu_type is None and len(by_gpu) == 1:
            gpu_type = next(iter(by_gpu))
        if gpu_type not in by_gpu:
            raise KeyError(f"no iteration-time fit for {workload!r} on {gpu_type!r}; have {sorted(by_gpu)}")
        return self._params(by_gpu[gpu_type])

    def fits(self) -> dict[str, dict[str, Any]]:
        """Every fitted (workload, GPU type) as :class:`~schedlab.sched.models.workloads.IterationParams`."""
        return {wl: {gt: self._params(p) for gt, p in by_gpu.items()} for wl, by_gpu in self.data["workloads"].items()}

    def iteration_time(self, workload: str, batch_per_gpu: float, num_gpus: int = 1, servers: int = 1,
                       accumulation_steps: int = 1, gpu_type: str | None = None) -> float:
        """Eq. 3 seconds per iteration, also for batch / accumulation / GPU counts never measured."""
        from schedlab.sched.models.workloads import iteration_time

        return iteration_time(self.params(workload, gpu_type), batch_per_gpu, num_gpus, servers, accumulation_steps)


def make_iteration_time(spec: str | os.PathLike[str] | None, fetch: Fetch | None = None):
    """The workload catalog a replay takes iteration times from: ``catalog`` (default: the packaged
    one) or a fitted iteration-time model (a path, a shipped name or ``models:/iteration-time/N``
    through ``fetch``),
    whose parameters replace the catalog's for the workloads and GPU types it covers (Castor §3.1)."""
    from schedlab.sched.models.workloads import default_catalog

    spec = str(spec) if spec is not None else "catalog"
    if spec == "catalog":
        return default_catalog()
    if spec == "latest":
        raise ModelError("iteration time 'latest' names the newest registered version: an experiment resolves it"
                         " through MLflow; pass a path or models:/iteration-time/N here")
    model = IterationTimeModel.load(spec, fetch)
    try:
        return default_catalog().with_fitted(model.fits(), spec)
    except KeyError as err:
        raise ModelError(str(err.args[0])) from None


__all__ = ["Fetch", "INTERFERENCE_KIND", "IterationTimeModel", "ITERATION_KIND", "InterferenceModel", "ModelError", "SCHEMA_VERSION",
           "find_artifact", "is_uri", "local_artifact", "make_iteration_time", "read_json"]
