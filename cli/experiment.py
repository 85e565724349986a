"""``schedlab experiment``: replay every (trace, cluster, policy, params, seed) of an experiment file
over Dask, one MLflow run each, and print the comparison against its baseline. Exit 0 done, 1 some
replays failed, 2 nothing ran (bad config, unreachable tracking store / Dask scheduler / Prefect server)."""

from __future__ import annotations

import argparse
import sys

from schedlab import checks, settings
from schedlab.cli.common import interrupted_by, setup_errors


def register(subparsers: argparse._SubParsersAction) -> None:
    from schedlab.sched.contained import DEFAULT_TIME_LIMIT_S
    from schedlab.sched.reporting.compare import RANKABLE

    p = subparsers.add_parser("experiment", help="run an experiment (YAML) over Dask, tracked in MLflow",
                              description="Replay every (trace, cluster, policy, params, seed) of an experiment"
                              " file, one MLflow run each, and print the comparison against its baseline."
                              " Re-running resumes: replays already logged are not run again.")
    p.add_argument("path", help="experiment YAML (a bare name looks in conf/experiments/)")
    p.add_argument("--dask-address", metavar="ADDR", help="an existing Dask scheduler, tcp://host:8786"
                   " (default: a LocalCluster)")
    p.add_argument("--workers", type=checks.workers, metavar="N",
                   help=f"LocalCluster worker processes, 1-{checks.MAX_WORKERS} (default: CPUs, at most 8)")
    p.add_argument("--rank-by", default="avg_jct_s", choices=list(RANKABLE), metavar="METRIC",
                   help=f"the metric policies are ranked by, best first: {', '.join(RANKABLE)} (default avg_jct_s)")
    p.add_argument("--table-every", type=checks.number(int, ge=1), default=5, metavar="N",
                   help="print the ranked table and the replays in flight every N finished replays (default 5;"
                   " the table is always printed at the end)")
    p.add_argument("--time-limit", type=checks.number(float, gt=0), metavar="S",
                   help="seconds a replay may run before it is stopped and fails, e.g. a policy that never returns"
                   f" (> 0; default: the file's time_limit_s, else {DEFAULT_TIME_LIMIT_S:g}, about 12 x the longest"
                   " shipped replay)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    args.settings.prefect_ready()
    from schedlab.cli.ui import ui_hint
    from schedlab.flows.experiment import run_experiment

    if args.workers is not None and args.workers < 1:
        print("schedlab experiment: error: --workers must be at least 1", file=sys.stderr)
        return 2
    import signal

    try:
        with interrupted_by(signal.SIGTERM, signal.SIGHUP):
            report = run_experiment(args.path, dask_address=args.dask_address, workers=args.workers,
                                    rank_by=args.rank_by, table_every=args.table_every,
                                    time_limit_s=args.time_limit)
    except setup_errors() as err:
        print(f"schedlab experiment: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("schedlab experiment: interrupted", file=sys.stderr)
        return 130
    print()
    print(f"experiment {report['experiment']}: {report['replays']} replays ({report['replays_run']} run now,"
          f" {report['replays_skipped']} logged before, {report['replays_failed']} failed)")
    print(report["table"])
    print(report["legend"])
    if report["failures"]:
        print(f"\n{len(report['failures'])} replay(s) FAILED (their MLflow runs hold error.txt):", file=sys.stderr)
        for label, msg in report["failures"].items():
            print(f"  {label}: {msg}", file=sys.stderr)
    print(f"\nMLflow: {report['ui_url']}\n  (the runs table: one row per policy, the baseline first, means and spreads (_sd) over seeds in hours; chart view: policies side by side)")
    print(f"comparison run (table, plots): {report['parent_url']}")
    if not report["tracking_uri"].startswith(("http://", "https://")):
        print(f"open them with `{ui_hint()}` (MLflow UI on {settings.ui_base()}), then the links above")
    return 1 if report["failures"] else 0
