"""``schedlab nightly``: run the nightly_profile flow once (profile on the Dask cluster's GPU workers,
refit and register both models). Exit 3 when there is no GPU worker (and no ``--cpu-smoke``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from schedlab.cli.common import run_flow


def register(subparsers: argparse._SubParsersAction) -> None:
    n = subparsers.add_parser("nightly", help="profile on the Dask cluster's GPU workers, refit and register both models",
                              description="Run the nightly_profile flow once: the sweep on every GPU host of the Dask"
                              " cluster (workers started with `--resources GPU=1`), appended to the profile store,"
                              " then both models refitted, logged and registered in MLflow. Exit 3 when there is no"
                              " GPU worker (and no --cpu-smoke).")
    n.add_argument("--sweep", default="nightly", help="sweep name in conf/sweeps/ or a YAML path (default nightly)")
    n.add_argument("--cpu-smoke", action="store_true", help="with no GPU worker, run the CPU smoke sweep instead")
    n.add_argument("--dask-address", metavar="ADDR", help="Dask scheduler tcp://host:8786 (default"
                   " $SCHEDLAB_DASK_ADDRESS, else a LocalCluster with this machine's GPUs)")
    n.add_argument("--store", type=Path, help="profile store (default $SCHEDLAB_HOME/profiles)")
    n.add_argument("--dcgm-url", help="dcgm-exporter metrics URL on the GPU nodes, e.g. http://localhost:9400/metrics")
    n.add_argument("--force", action="store_true", help="re-measure configurations already in the store")
    n.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    args.settings.prefect_ready()
    from schedlab.flows.nightly import run_nightly

    def render(report: dict) -> int | None:
        if report["status"] == "no-gpu-worker":
            print(f"schedlab nightly: {report['message']}; nothing profiled (--cpu-smoke runs the CPU smoke sweep)",
                  file=sys.stderr)
            return 3
        for p in report["profiles"]:
            print(f"profiled {report['sweep']} on {p.get('host', p.get('worker'))}: "
                  + (f"FAILED: {p['error']}" if "error" in p else f"{p.get('counts') or 'nothing to do'}"))
        for name, fit in report["fits"].items():
            print(f"{name}: {fit['model_uri']} ({fit['path']})")
        return None

    return run_flow("nightly", args, lambda: run_nightly(
        args.sweep, cpu_fallback=args.cpu_smoke, dask_address=args.dask_address,
        store=str(args.store) if args.store else None, dcgm_url=args.dcgm_url, force=args.force), render)
