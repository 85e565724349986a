"""``schedlab status``: each experiment's replays done / running / failed / queued, the runs a crashed
process left RUNNING (``--mark-killed`` ends them), the Prefect deployments' schedules and the stores in use."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    st = subparsers.add_parser("status", help="experiments, runs left RUNNING by a crash, schedules, stores in use",
                               description="Each experiment's replays done / running / failed / queued, the runs a"
                               " crashed or killed process left RUNNING, the Prefect deployments' cron and next run"
                               " (with PREFECT_API_URL set), and the tracking store and artifact root in use.")
    st.add_argument("--mark-killed", action="store_true",
                    help="end the runs left RUNNING by a process that is gone: status KILLED")
    st.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from schedlab.flows.status import collect, render
    from schedlab.tasks.tracking import TrackingError

    try:
        status = collect(mark_killed=args.mark_killed)
    except TrackingError as err:
        print(f"schedlab status: error: {err}", file=sys.stderr)
        return 2
    print(render(status))
    return 0
