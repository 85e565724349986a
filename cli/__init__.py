"""The ``schedlab`` command line: one entry point, one module per sub-command (each a ``register``
that adds its parser and a ``run`` that is its handler).

Every option is checked before any work starts: a bad value exits 2 with a message naming the option
as typed; Ctrl-C exits 130 without a traceback."""

from __future__ import annotations

import argparse
import sys

from schedlab import __version__, settings
from schedlab.cli import (
    check_policy,
    compare,
    end_to_end,
    experiment,
    fit,
    nightly,
    policies,
    profile,
    replay,
    reproduce,
    serve,
    status,
    testbed,
    ui,
)
from schedlab.sched.core.cluster import ClusterError
from schedlab.sched.results.outdir import os_reason
from schedlab.sched.traces import TraceError

DESCRIPTION = ("Replay GPU-cluster job traces through schedulers, run experiments over Dask tracked in"
               " MLflow, profile training workloads and fit the models that decide how fast shared jobs run.")
#: the sub-commands, in the order ``--help`` lists them
COMMANDS = (replay, policies, check_policy, experiment, compare, ui, status, serve, nightly, reproduce, end_to_end, profile, fit, testbed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="schedlab", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"schedlab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    settings.skip_exit_collection()
    args = build_parser().parse_args(_attach_dash_values(sys.argv[1:] if argv is None else argv))
    # built once here and passed down (args.settings); exported before any command imports prefect or mlflow
    args.settings = settings.Settings.from_env().apply()
    try:
        return int(args.func(args) or 0)
    except (TraceError, ClusterError, ValueError) as err:
        message = err.describe(replay.flag) if isinstance(err, TraceError) else err
        print(f"schedlab {args.command}: error: {message}", file=sys.stderr)
        return 2
    except OSError as err:  # read-only, full disk, no permission: the user's to fix, not a crash
        where = f"{err.filename}: " if err.filename else ""
        print(f"schedlab {args.command}: error: {where}{os_reason(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nschedlab {args.command}: interrupted", file=sys.stderr)
        return 130


#: options whose value may start with a dash: ``--cluster -1x8`` must reach the cluster check, which names the
#: number out of range, instead of argparse's "expected one argument"
DASH_VALUES = ("--cluster",)


def _attach_dash_values(argv: list[str]) -> list[str]:
    """``argv`` with ``--cluster -1x8`` written as ``--cluster=-1x8``."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in DASH_VALUES and arg[:1] == "-" and arg[1:2].isdigit():
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


__all__ = ["build_parser", "main"]
