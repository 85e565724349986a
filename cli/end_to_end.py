"""``schedlab end-to-end``: profile a sweep on this machine, fit both models, then run an experiment
whose replays use the fitted models."""

from __future__ import annotations

import argparse

from schedlab import checks
from schedlab.cli.common import run_flow


def register(subparsers: argparse._SubParsersAction) -> None:
    e = subparsers.add_parser("end-to-end", help="profile -> fit -> an experiment using the fitted models",
                              description="Profile a sweep on this machine (default: the CPU smoke sweep), fit both"
                              " models, then run an experiment whose replays use the fitted interference model.")
    e.add_argument("--sweep", default="smoke", help="sweep name or YAML path (default smoke)")
    e.add_argument("--experiment", default="quickstart", help="experiment YAML or name (default quickstart)")
    e.add_argument("--dask-address", metavar="ADDR", help="an existing Dask scheduler (default: a LocalCluster)")
    e.add_argument("--workers", type=checks.workers, metavar="N",
                   help=f"LocalCluster worker processes, 1-{checks.MAX_WORKERS} (default: CPUs, at most 8)")
    e.add_argument("--no-track", action="store_true", help="do not log/register the fits (the experiment is logged)")
    e.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    args.settings.prefect_ready()
    from schedlab.flows.end_to_end import run_end_to_end

    def render(report: dict) -> None:
        print()
        for name, fit in report["fits"].items():
            print(f"{name}: {fit['path']}" + (f" ({fit['model_uri']})" if fit.get("model_uri") else ""))
        print(f"experiment {report['experiment']} with the fitted interference model ({report['config_path']}):")
        print(report["table"])

    return run_flow("end-to-end", args, lambda: run_end_to_end(
        args.sweep, args.experiment, dask_address=args.dask_address, workers=args.workers,
        track=not args.no_track), render)
