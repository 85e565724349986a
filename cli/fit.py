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
import json
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


def _home() -> Path:
    from schedlab.settings import schedlab_home

    return schedlab_home() / "models"


def fit_iteration_time(args: argparse.Namespace) -> int:
    from schedlab.profiling import fit_models

    fit = fit_models.fit_iteration_time(source=args.source, profiles=args.profiles, pollux=args.pollux,
                                        holdout=args.holdout, seed=args.seed)
    print("\n".join(fit.lines))
    out = fit.model.save(args.out or _home() / "iteration-time.json")
    print(f"wrote {out}")
    _track(args, out, "iteration-time", fit)
    return 0


def fit_interference(args: argparse.Namespace) -> int:
    from schedlab.profiling import fit_models

    fit = fit_models.fit_interference(source=args.source, profiles=args.profiles, gavel=args.gavel,
                                      worker=args.worker, holdout=args.holdout, seed=args.seed)
    print("\n".join(fit.lines))
    out = fit.model.save(args.out or _home() / fit.name)
    print(f"wrote {out}/model.json, meta.json")
    _track(args, out, "interference-ratio", fit)
    return 0


def _track(args: argparse.Namespace, artifact: Path, name: str, fit: Any) -> None:
    if args.no_track:
        return
    from schedlab.tasks.model_tracking import log_model

    logged = log_model(artifact, name, fit.metrics, params={"source": args.source, "holdout": args.holdout, "seed": args.seed},
                       tags={"schedlab.data_sha256": fit.data_hash,
                             "schedlab.profile_store": json.dumps(fit.store_version)[:4000]})
    print(f"logged to MLflow run {logged['run_id']}; registered {logged['model_uri']} ({logged['tracking_uri']})")
