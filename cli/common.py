"""What the sub-commands share: signals that interrupt as Ctrl-C does, and running a flow command
(set-up errors exit 2 before any work, then its report, failures and MLflow link)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def interrupted_by(*signums: int) -> Iterator[None]:
    """While the ``with`` lasts, these signals (SIGTERM, SIGHUP) raise KeyboardInterrupt as Ctrl-C
    does, so that the command cleans up before it exits; the previous handlers come back after."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in signums}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def setup_errors() -> tuple[type[BaseException], ...]:
    """What a flow command raises before any work: its message is the whole story (exit 2)."""
    from schedlab.flows.api_server import PrefectUnavailable
    from schedlab.flows.orchestration import DaskUnreachable
    from schedlab.sched.spec import ConfigError
    from schedlab.tasks.tracking import TrackingError

    return (ConfigError, TrackingError, DaskUnreachable, PrefectUnavailable, FileNotFoundError, ValueError)


def run_flow(command: str, args: argparse.Namespace, run: Callable[[], dict[str, Any]],
             render: Callable[[dict[str, Any]], int | None]) -> int:
    """Shared by the flow commands: run the flow (set-up errors: exit 2 before any work), print its
    report with ``render`` (which may return an exit code of its own), the failures and the MLflow link."""
    if getattr(args, "workers", None) is not None and args.workers < 1:
        print(f"schedlab {command}: error: --workers must be at least 1", file=sys.stderr)
        return 2
    try:
        report = run()
    except setup_errors() as err:
        print(f"schedlab {command}: error: {err}", file=sys.stderr)
        return 2
    code = render(report)
    if code is not None:
        return code
    for what, msg in report["failures"].items():
        print(f"FAILED {what}: {msg}", file=sys.stderr)
    print(f"MLflow: {report['ui_url']}")
    return 1 if report["failures"] else 0
