"""Fit the two models from a profile store (or published measurements): the iteration-time model
(Castor §3.1 eq. 1-3, per workload and GPU type) and the interference-ratio (ξ) model (Castor §6).

What ``schedlab fit`` and the fitting task (:mod:`schedlab.tasks.fit`) share: each function fits,
and returns the model, its metrics, the hash of the data it learned from, the store's version and
the lines that report the fit (the caller prints them)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Fit:
    """A fitted model and what tracking records about it."""

    model: Any  # IterationTimeModel | InterferenceModel: ``save(path)``
    name: str  # the model's name (its default artifact name under $SCHEDLAB_HOME/models)
    metrics: dict[str, float]
    data_hash: str
    store_version: dict[str, Any]
    lines: list[str] = field(default_factory=list)  # the fit's report


def _fmt(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def read_store(profiles: Path | None) -> tuple[Any, dict[str, Any]]:
    """The store's newest rows and its version (schema, records, newest record time, content hash)."""
    from schedlab.profiling.store import default_dir, read_profiles

    return read_profiles(profiles if profiles is not None else default_dir())


def fit_iteration_time(*, source: str = "store", profiles: Path | None = None, pollux: Path | None = None,
                       holdout: float = 0.2, seed: int = 0) -> Fit:
    """Castor §3.1 eq. 1-3 per workload and GPU type, from the profile store (``source="store"``) or
    from Pollux's published T4 step times (``source="pollux"``, the traces folder ``pollux``)."""
    from schedlab.profiling import fitting
    from schedlab.sched.models.fitted import ITERATION_KIND, SCHEMA_VERSION, IterationTimeModel

    lines: list[str] = []
    if source == "pollux":
        from schedlab.sched.models.workloads import default_catalog

        cat, fits = default_catalog(), {}
        for wl_dir in sorted(p for p in Path(pollux).iterdir() if (p / "placements.csv").exists()):
            mb = cat.workload(wl_dir.name).model_size_mb
            fit, held = fitting.fit_with_holdout(fitting.load_pollux(wl_dir), mb, holdout=holdout, seed=seed)
            fits[wl_dir.name] = {"t4": {**{k: float(f"{v:.6g}") for k, v in fit.params.items()}, "model_size_mb": mb,
                                        "fixed": fit.fixed, "mape_train": fit.mape, "mape_holdout": held}}
        if not fits:
            raise ValueError(f"no Pollux workloads (placements.csv) under {pollux}")
        data_hash = hashlib.sha256(json.dumps(sorted(fits)).encode()).hexdigest()
        store_version: dict[str, Any] = {"pollux": "profiles/pollux/traces", "workloads": sorted(fits)}
        model = IterationTimeModel({
            "schema_version": SCHEMA_VERSION, "kind": ITERATION_KIND, "workloads": fits,
            "training": {"source": source, "holdout": holdout, "seed": seed, "data_sha256": data_hash,
                         "profile_store": store_version},
        })
    else:
        df, store_version = read_store(profiles)
        skipped: list[str] = []
        try:
            model = IterationTimeModel(fitting.store_artifact(df, store_version, holdout=holdout, seed=seed,
                                                              skipped=skipped))
        except ValueError as err:
            raise ValueError(str(err) + "".join(f"\nnot fitted: {why}" for why in skipped)) from None
        finally:
            lines += [f"not fitted: {why}" for why in skipped]
        fits, data_hash = model.data["workloads"], model.data["training"]["data_sha256"]
    lines.append(f"{'workload':12s} {'gpu':6s} {'MAPE train':>10s} {'held-out':>9s} {'rows':>5s}  params")
    metrics: dict[str, float] = {}
    for wl, by_gpu in fits.items():
        for gt, p in by_gpu.items():
            tr, ho = p["mape_train"]["all"], p["mape_holdout"]["all"]
            lines.append(f"{wl:12s} {gt:6s} {tr:10.2%} {ho:9.2%} {p['mape_train']['rows'] + p['mape_holdout']['rows']:5d}  "
                         + " ".join(f"{k}={p[k]:.4g}" for k in fitting.PARAM_NAMES if k not in p["fixed"]))
            metrics |= {f"{wl}.{gt}.mape_train": tr, f"{wl}.{gt}.mape_holdout": ho}
    return Fit(model, "iteration-time", metrics, data_hash, store_version, lines)


def fit_interference(*, source: str = "store", profiles: Path | None = None, gavel: Path | None = None,
                     worker: str = "v100", holdout: float = 0.2, seed: int = 0) -> Fit:
    """Castor §6's XGBoost ξ model from the profile store's pairs (``source="store"``), or its
    configuration-only variant from Gavel's measured throughputs (``source="gavel"``, file ``gavel``)."""
    from schedlab.profiling import fit_interference as F

    if source == "gavel":
        import yaml

        from schedlab.sched.models.interference import GAVEL_MAPPING

        rows, solo, job_features, dropped = F.rows_from_gavel(gavel, worker)
        mapping = {k: v["gavel"] for k, v in yaml.safe_load(GAVEL_MAPPING.read_text())["models"].items()}
        store_version = {"gavel": f"profiles/gavel/{Path(gavel).name}", "worker": worker,
                         "file_sha256": hashlib.sha256(Path(gavel).read_bytes()).hexdigest()}
        provenance = {"data": "Gavel (OSDI'20) scheduler/simulation_throughputs.json, commit c4fa400, "
                      f"worker {worker}, scale factor 1; xi = solo / paired steps/s (time-sliced); "
                      f"{dropped} pairs measured as 0 dropped", "mapping": str(GAVEL_MAPPING.name)}
        variant, name = "gavel-config", f"interference-gavel-{worker}"
    else:
        df, store_version = read_store(profiles)
        rows, solo, job_features = F.rows_from_store(df)
        if rows.empty:
            raise ValueError("the profile store has no ok pair runs with both solo runs")
        mapping = {k: v for k, v in F.CATALOG_TO_PROFILED.items() if any(e["workload"] == v for e in solo)}
        provenance = {"data": f"profile store {store_version['path']}",
                      "devices": sorted(map(str, df["device"].dropna().unique())),
                      "gpu_models": sorted(map(str, df["gpu_model"].dropna().unique()))}
        variant, name = "indicators", "interference-ratio"
    model = F.fit(rows, solo, job_features, variant=variant, workload_map=mapping, holdout=holdout,
                  seed=seed, provenance={**provenance, "profile_store": store_version}, name=name)
    m = model.meta["metrics"]
    lines = [f"rows {len(rows)}, pairs {rows['pair'].nunique()}, held out {m['test_rows']} rows "
             f"({holdout:.0%} of pairs, seed {seed}); features: {len(model.features)}"]
    for label, e in (("xgboost", m), ("interpolation", m["interpolation"])):
        lines.append(f"{label:14s} RMSE job0 {_fmt(e['rmse_job0'])}  job1 {_fmt(e['rmse_job1'])}  all {_fmt(e['rmse'])}  "
                     f"MAE {_fmt(e['mae'])}  in [1.4,1.6]: RMSE {_fmt(e['rmse_band'])} (n={e['rows_band']})  "
                     f"wrong side of 1.5: {e['side_errors_1.5']:.1%}  progress error {e['progress_error']:.1%}")
    for setting, e in m.get("by_setting", {}).items():
        lines.append(f"  {setting:12s} RMSE job0 {_fmt(e['rmse_job0'])}  job1 {_fmt(e['rmse_job1'])}  "
                     f"wrong side of 1.5: {e['side_errors_1.5']:.1%}  progress error {e['progress_error']:.1%}  "
                     f"(n={e['test_rows']})")
    lines.append("top features (share of total gain): " + ", ".join(f"{k} {v:.3f}" for k, v in m["importance"].items()))
    flat = {k: v for k, v in m.items() if isinstance(v, (int, float)) and not math.isnan(v)}
    flat |= {f"interpolation.{k}": v for k, v in m["interpolation"].items()
             if isinstance(v, (int, float)) and not math.isnan(v)}
    return Fit(model, name, flat, model.meta["training"]["data_sha256"], store_version, lines)


__all__ = ["Fit", "fit_interference", "fit_iteration_time", "read_store"]
