"""``schedlab serve``: register a flow's cron schedule with a Prefect server and serve it (stopping the
process pauses the schedule)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    from schedlab.flows.serve import DEFAULT_CRON, DEFAULT_FLOW, DEFAULT_TIMEZONE

    s = subparsers.add_parser("serve", help="register a flow's cron schedule with a Prefect server and serve it",
                              description="Needs a running Prefect server (`prefect server start`,"
                              " PREFECT_API_URL=http://127.0.0.1:4200/api). Stopping this process pauses"
                              " the schedule.")
    s.add_argument("--flow", default=DEFAULT_FLOW, help=f"import path module:flow (default {DEFAULT_FLOW})")
    s.add_argument("--cron", default=DEFAULT_CRON, help=f"cron expression (default {DEFAULT_CRON!r})")
    s.add_argument("--timezone", default=DEFAULT_TIMEZONE, help=f"IANA time zone of the cron (default {DEFAULT_TIMEZONE})")
    s.add_argument("--name", help="deployment name (default: the flow's name)")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    args.settings.prefect_ready()
    from schedlab.flows.serve import ServeError, check_server, load_flow, serve_flow, validate_schedule

    try:
        flow = load_flow(args.flow)
        validate_schedule(args.cron, args.timezone)
        check_server()
    except ServeError as err:
        print(f"schedlab serve: error: {err}", file=sys.stderr)
        return 2
    serve_flow(flow, args.cron, args.timezone, args.name)
    return 0
