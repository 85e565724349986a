"""``schedlab fit``: fit the iteration-time model (Castor §3.1) and the ξ model (Castor §6).

    schedlab fit iteration-time --profiles DIR [--holdout 0.2] [--seed N] [--out FILE] [--no-track]
    schedlab fit iteration-time --source pollux --pollux DIR        # Pollux's published T4 step times
    schedlab fit interference --profiles DIR [--holdout 0.2] [--seed N] [--out DIR] [--no-track]
    schedlab fit interference --source gavel --gavel FILE [--worker v100]   # configuration-only variant

Prints the metrics, writes the artifact, logs it to MLflow and registers a new version of
``iteration-time`` / ``interference-ratio`` (unless ``--no-track``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path
from typing import Any

from schedlab import checks

DEFAULT_GAVEL = Path(__file__).resolve().parents[2] / "shared" / "data" / "profiles" / "gavel" / "simulation_throughputs.json"
DEFAULT_POLLUX = DEFAULT_GAVEL.parents[1] / "pollux" / "traces"


def register(subparsers: argparse._SubParsersAction) -> None:
    fit = subparsers.add_parser("fit", help="fit the iteration-time or interference-ratio model")
    sub = fit.add_subparsers(dest="fit_command", required=True)
    it = sub.add_parser("iteration-time", help="Castor §3.1 eq. 1-3 per workload and GPU type")
    it.add_argument("--source", choices=["store", "pollux"], default="store",
                    help="fit from the profile store (default) or from the Pollux traces")
    it.add_argument("--pollux", type=Path, default=DEFAULT_POLLUX, help="Pollux traces folder (--source pollux)")
    it.add_argument("--out", type=Path, default=None, help="artifact file (default: $SCHEDLAB_HOME/models/iteration-time.json)")
    ir = sub.add_parser("interference", help="Castor §6 XGBoost interference-ratio model")
    ir.add_argument("--source", choices=["store", "gavel"], default="store",
                    help="fit from the profile store (default) or from Gavel's measured throughputs")
    ir.add_argument("--gavel", type=Path, default=DEFAULT_GAVEL, help="Gavel simulation_throughputs.json")
    ir.add_argument("--worker", default="v100", help="Gavel worker type (k80, p100, v100)")
    ir.add_argument("--out", type=Path, default=None, help="artifact directory (default: $SCHEDLAB_HOME/models/…)")
    for p in (it, ir):
        p.add_argument("--profiles", type=Path, default=None,
                       help="profile store folder or packed file, e.g. data/profiles/h200/profiles.parquet "
                            "(default: $SCHEDLAB_HOME/profiles)")
        p.add_argument("--holdout", type=checks.fraction, default=0.2,
                       help="fraction held out for validation (between 0 and 1; default 0.2)")
        p.add_argument("--seed", type=checks.seed, default=0, help="seed of the hold-out split and the fit (default 0)")
        p.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    it.set_defaults(func=fit_iteration_time)
    ir.set_defaults(func=fit_interference)


def _store(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The store's newest rows and its version (schema, records, newest record time, content hash)."""
    from schedlab.profiling.store import default_dir, read_profiles

    return read_profiles(args.profiles if args.profiles is not None else default_dir())


def _home() -> Path:
    from schedlab.settings import schedlab_home

    return schedlab_home() / "models"


def _fmt(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def fit_iteration_time(args: argparse.Namespace) -> int:
    from schedlab.profiling import fitting
    from schedlab.sched.models.fitted import ITERATION_KIND, SCHEMA_VERSION, IterationTimeModel

    if args.source == "pollux":
        from schedlab.sched.models.workloads import default_catalog

        cat, fits = default_catalog(), {}
        for wl_dir in sorted(p for p in Path(args.pollux).iterdir() if (p / "placements.csv").exists()):
            mb = cat.workload(wl_dir.name).model_size_mb
            fit, held = fitting.fit_with_holdout(fitting.load_pollux(wl_dir), mb, holdout=args.holdout, seed=args.seed)
            fits[wl_dir.name] = {"t4": {**{k: float(f"{v:.6g}") for k, v in fit.params.items()}, "model_size_mb": mb,
                                        "fixed": fit.fixed, "mape_train": fit.mape, "mape_holdout": held}}
        if not fits:
            raise ValueError(f"no Pollux workloads (placements.csv) under {args.pollux}")
        data_hash = hashlib.sha256(json.dumps(sorted(fits)).encode()).hexdigest()
        store_version: dict[str, Any] = {"pollux": "profiles/pollux/traces", "workloads": sorted(fits)}
        model = IterationTimeModel({
            "schema_version": SCHEMA_VERSION, "kind": ITERATION_KIND, "workloads": fits,
            "training": {"source": args.source, "holdout": args.holdout, "seed": args.seed, "data_sha256": data_hash,
                         "profile_store": store_version},
        })
    else:
        df, store_version = _store(args)
        skipped: list[str] = []
        try:
            model = IterationTimeModel(fitting.store_artifact(df, store_version, holdout=args.holdout, seed=args.seed,
                                                              skipped=skipped))
        finally:
            for why in skipped:
                print(f"not fitted: {why}")
        fits, data_hash = model.data["workloads"], model.data["training"]["data_sha256"]
    print(f"{'workload':12s} {'gpu':6s} {'MAPE train':>10s} {'held-out':>9s} {'rows':>5s}  params")
    metrics: dict[str, float] = {}
    for wl, by_gpu in fits.items():
        for gt, p in by_gpu.items():
            tr, ho = p["mape_train"]["all"], p["mape_holdout"]["all"]
            print(f"{wl:12s} {gt:6s} {tr:10.2%} {ho:9.2%} {p['mape_train']['rows'] + p['mape_holdout']['rows']:5d}  "
                  + " ".join(f"{k}={p[k]:.4g}" for k in fitting.PARAM_NAMES if k not in p["fixed"]))
            metrics |= {f"{wl}.{gt}.mape_train": tr, f"{wl}.{gt}.mape_holdout": ho}
    out = model.save(args.out or _home() / "iteration-time.json")
    print(f"wrote {out}")
    _track(args, out, "iteration-time", metrics, data_hash, store_version)
    return 0


def fit_interference(args: argparse.Namespace) -> int:
    from schedlab.profiling import fit_interference as F

    if args.source == "gavel":
        import yaml

        from schedlab.sched.models.interference import GAVEL_MAPPING

        rows, solo, job_features, dropped = F.rows_from_gavel(args.gavel, args.worker)
        mapping = {k: v["gavel"] for k, v in yaml.safe_load(GAVEL_MAPPING.read_text())["models"].items()}
        store_version = {"gavel": f"profiles/gavel/{Path(args.gavel).name}", "worker": args.worker,
                         "file_sha256": hashlib.sha256(Path(args.gavel).read_bytes()).hexdigest()}
        provenance = {"data": "Gavel (OSDI'20) scheduler/simulation_throughputs.json, commit c4fa400, "
                      f"worker {args.worker}, scale factor 1; xi = solo / paired steps/s (time-sliced); "
                      f"{dropped} pairs measured as 0 dropped", "mapping": str(GAVEL_MAPPING.name)}
        variant, name = "gavel-config", f"interference-gavel-{args.worker}"
    else:
        df, store_version = _store(args)
        rows, solo, job_features = F.rows_from_store(df)
        if rows.empty:
            raise ValueError("the profile store has no ok pair runs with both solo runs")
        mapping = {k: v for k, v in F.CATALOG_TO_PROFILED.items() if any(e["workload"] == v for e in solo)}
        provenance = {"data": f"profile store {store_version['path']}",
                      "devices": sorted(map(str, df["device"].dropna().unique())),
                      "gpu_models": sorted(map(str, df["gpu_model"].dropna().unique()))}
        variant, name = "indicators", "interference-ratio"
    model = F.fit(rows, solo, job_features, variant=variant, workload_map=mapping, holdout=args.holdout,
                  seed=args.seed, provenance={**provenance, "profile_store": store_version}, name=name)
    m = model.meta["metrics"]
    print(f"rows {len(rows)}, pairs {rows['pair'].nunique()}, held out {m['test_rows']} rows "
          f"({args.holdout:.0%} of pairs, seed {args.seed}); features: {len(model.features)}")
    for label, e in (("xgboost", m), ("interpolation", m["interpolation"])):
        print(f"{label:14s} RMSE job0 {_fmt(e['rmse_job0'])}  job1 {_fmt(e['rmse_job1'])}  all {_fmt(e['rmse'])}  "
              f"MAE {_fmt(e['mae'])}  in [1.4,1.6]: RMSE {_fmt(e['rmse_band'])} (n={e['rows_band']})  "
              f"wrong side of 1.5: {e['side_errors_1.5']:.1%}  progress error {e['progress_error']:.1%}")
    for setting, e in m.get("by_setting", {}).items():
        print(f"  {setting:12s} RMSE job0 {_fmt(e['rmse_job0'])}  job1 {_fmt(e['rmse_job1'])}  "
              f"wrong side of 1.5: {e['side_errors_1.5']:.1%}  progress error {e['progress_error']:.1%}  "
              f"(n={e['test_rows']})")
    print("top features (share of total gain): " + ", ".join(f"{k} {v:.3f}" for k, v in m["importance"].items()))
    out = model.save(args.out or _home() / name)
    print(f"wrote {out}/model.json, meta.json")
    flat = {k: v for k, v in m.items() if isinstance(v, (int, float)) and not math.isnan(v)}
    flat |= {f"interpolation.{k}": v for k, v in m["interpolation"].items() if isinstance(v, (int, float)) and not math.isnan(v)}
    _track(args, out, "interference-ratio", flat, model.meta["training"]["data_sha256"], store_version)
    return 0


def _track(args: argparse.Namespace, artifact: Path, name: str, metrics: dict[str, float], data_hash: str,
           store_version: dict[str, Any]) -> None:
    if args.no_track:
        return
    from schedlab.tasks.model_tracking import log_model

    logged = log_model(artifact, name, metrics, params={"source": args.source, "holdout": args.holdout, "seed": args.seed},
                       tags={"schedlab.data_sha256": data_hash, "schedlab.profile_store": json.dumps(store_version)[:4000]})
    print(f"logged to MLflow run {logged['run_id']}; registered {logged['model_uri']} ({logged['tracking_uri']})")
