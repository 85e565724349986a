"""``schedlab reproduce``: the reproduction experiments over Dask and our results beside the papers'
tables (``--report DIR``: the HTML report)."""

from __future__ import annotations

import argparse

from schedlab import checks
from schedlab.cli.common import run_flow
from schedlab.flows import REPRODUCE_CONFIGS


def register(subparsers: argparse._SubParsersAction) -> None:
    r = subparsers.add_parser("reproduce", help="the reproduction experiments and the paper-vs-ours tables",
                              description="Run each reproduction experiment (default: "
                              + ", ".join(REPRODUCE_CONFIGS) + ") over Dask and print our results beside the"
                              " papers' tables.")
    r.add_argument("configs", nargs="*", metavar="CONFIG", help="experiment YAMLs or names in conf/experiments/"
                   " (default: the list above)")
    r.add_argument("--dask-address", metavar="ADDR", help="an existing Dask scheduler (default: a LocalCluster)")
    r.add_argument("--workers", type=checks.workers, metavar="N",
                   help=f"LocalCluster worker processes, 1-{checks.MAX_WORKERS} (default: CPUs, at most 8)")
    r.add_argument("--seeds", type=checks.seed, nargs="+", metavar="SEED",
                   help="replay these seeds in place of each config's `seeds` (distinct, non-negative)")
    r.add_argument("--report", type=checks.output_dir, metavar="DIR",
                   help="also write the HTML report there (index.html and one page per paper table: paper vs ours,"
                   " mean +/- std over seeds with their number, within +/-30 %%, ratios to the baseline beside the"
                   " paper's, paired comparisons over seeds and the Order of the rows, calibrations, causes of"
                   " misses, a figure for every set-up: load sweep or bars over the baseline, and the ablation"
                   " plots) and log it to the reproduce run under report/")
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    args.settings.prefect_ready()
    from schedlab.flows.reproduce import run_reproduce

    def render(report: dict) -> None:
        print()
        print(report["markdown"])
        if report.get("report"):
            print(f"HTML report: {report['report']}")

    return run_flow("reproduce", args, lambda: run_reproduce(
        args.configs or None, dask_address=args.dask_address, workers=args.workers, seeds=args.seeds,
        report_dir=args.report), render)
