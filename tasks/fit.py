"""Fitting tasks: the iteration-time model (Castor §3.1) and the ξ model (Castor §6) from a profile
store, through ``schedlab fit``'s own code (:mod:`schedlab.profiling.fit_models`), then logged to MLflow and
registered (:func:`schedlab.tasks.model_tracking.log_model`) with links to the runs it came from.

Each artifact lands in a folder named after its content (``iteration-time-<sha12>.json``,
``interference-ratio-<sha12>/``): an experiment that names a model by path (``model:<dir>``) then
names exactly one model, so a re-run resumes correctly and a later fit never changes what an
earlier run used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

#: fit kind -> registered model name
KINDS = {"iteration-time": "iteration-time", "interference": "interference-ratio"}


def _finite(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(float(v))}


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if f.is_file():
            h.update(f.relative_to(path if path.is_dir() else path.parent).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _summary(kind: str, artifact: Path) -> dict[str, Any]:
    """Metrics, data hash and profile store version, read back from the artifact written."""
    if kind == "iteration-time":
        doc = json.loads(artifact.read_text())
        metrics: dict[str, Any] = {}
        for wl, by_gpu in doc["workloads"].items():
            for gt, p in by_gpu.items():
                metrics[f"{wl}.{gt}.mape_train"] = p["mape_train"]["all"]
                metrics[f"{wl}.{gt}.mape_holdout"] = p["mape_holdout"]["all"]
        training = doc["training"]
        return {"metrics": _finite(metrics), "data_sha256": training["data_sha256"],
                "profile_store": training.get("profile_store", {})}
    meta = json.loads((artifact / "meta.json").read_text())
    m = meta["metrics"]
    flat = {**_finite(m), **{f"interpolation.{k}": v for k, v in _finite(m["interpolation"]).items()}}
    return {"metrics": flat, "data_sha256": meta["training"]["data_sha256"],
            "profile_store": meta.get("provenance", {}).get("profile_store", {})}


def fit_model(kind: str, store_dir: str, out_dir: str, *, holdout: float = 0.2, seed: int = 0) -> dict[str, Any]:
    """Fit ``kind`` (``iteration-time`` | ``interference``) from the store, write the artifact under
    ``out_dir`` (content-named). Returns ``kind, name, path, metrics, data_sha256, profile_store,
    params``. Raises ValueError when the store cannot train it (no records, fewer than 2 pairs)."""
    from schedlab.profiling import fit_models

    if kind not in KINDS:
        raise ValueError(f"unknown fit {kind!r}; one of {sorted(KINDS)}")
    name = KINDS[kind]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".fit-{name}-", dir=out) as tmp:
        target = Path(tmp) / (f"{name}.json" if kind == "iteration-time" else name)
        fit = (fit_models.fit_iteration_time if kind == "iteration-time" else fit_models.fit_interference)(
            profiles=Path(store_dir), holdout=holdout, seed=seed)
        print("\n".join(fit.lines))
        fit.model.save(target)
        final = out / (f"{name}-{_digest(target)}" + (".json" if kind == "iteration-time" else ""))
        if not final.exists():  # the same content fitted before: keep that one
            with contextlib.suppress(FileExistsError, OSError):
                target.rename(final)
        if not final.exists():
            shutil.copytree(target, final) if target.is_dir() else shutil.copy2(target, final)
    return {"kind": kind, "name": name, "path": str(final.resolve()), **_summary(kind, final),
            "params": {"source": "store", "holdout": holdout, "seed": seed, "profiles": str(store_dir)}}


def log_fit(fit: dict[str, Any], uri: str, *, parent_run_id: str | None = None,
            tags: dict[str, str] | None = None) -> dict[str, str]:
    """Log a fit as an MLflow run (experiment ``models``) and register a new version of its model;
    with ``parent_run_id`` the run is nested under it. Returns ``run_id, version, model_uri``."""
    from schedlab.tasks.model_tracking import log_model
    from schedlab.tasks.tracking import PARENT_TAG, client, retrying

    all_tags = {"schedlab.data_sha256": fit["data_sha256"],
                "schedlab.profile_store": json.dumps(fit["profile_store"])[:4000], **(tags or {})}
    logged = log_model(Path(fit["path"]), fit["name"], fit["metrics"], params=fit["params"], tags=all_tags, uri=uri)
    if parent_run_id:
        c = client(uri)
        retrying(lambda: c.set_tag(logged["run_id"], PARENT_TAG, parent_run_id))
    return logged


@task(name="fit", cache_policy=NO_CACHE, retries=0, task_run_name="fit {kind}")
def fit_task(kind: str, store_dir: str, out_dir: str, holdout: float = 0.2, seed: int = 0,
             tracking_uri: str | None = None, parent_run_id: str | None = None,
             tags: dict[str, str] | None = None) -> dict[str, Any]:
    """Fit, and (with ``tracking_uri``) log and register: the fit's summary plus ``run_id``,
    ``version`` and ``model_uri`` when logged."""
    fit = fit_model(kind, store_dir, out_dir, holdout=holdout, seed=seed)
    if tracking_uri:
        fit.update(log_fit(fit, tracking_uri, parent_run_id=parent_run_id, tags=tags))
    return fit


__all__ = ["KINDS", "fit_model", "fit_task", "log_fit"]
