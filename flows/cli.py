"""Sub-commands ``experiment``, ``ui`` and ``serve`` of the ``schedlab`` command line.

``register(subparsers)`` adds them to the main parser (``schedlab.cli``); each handler returns its
exit code: 0 done, 1 some replays failed (``experiment``), 2 nothing ran (bad config, unreachable
tracking store / Dask scheduler / Prefect server).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from schedlab.flows import settings

UI_HOST, UI_PORT = "127.0.0.1", 5000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("experiment", help="run an experiment (YAML) over Dask, tracked in MLflow",
                              description="Replay every (trace, cluster, policy, params, seed) of an experiment"
                              " file, one MLflow run each, and print the comparison against its baseline."
                              " Re-running resumes: replays already logged are not run again.")
    p.add_argument("path", help="experiment YAML (a bare name looks in conf/experiments/)")
    p.add_argument("--dask-address", metavar="ADDR", help="an existing Dask scheduler, tcp://host:8786"
                   " (default: a LocalCluster)")
    p.add_argument("--workers", type=int, metavar="N", help="LocalCluster worker processes (default: CPUs, at most 8)")
    p.set_defaults(func=_experiment)

    u = subparsers.add_parser("ui", help="the MLflow UI over the project's tracking store",
                              description="Start MLflow's UI (one worker, no job execution) over"
                              " $SCHEDLAB_HOME/mlflow.db; Ctrl-C stops it.")
    u.add_argument("--host", default=UI_HOST)
    u.add_argument("--port", type=int, default=UI_PORT)
    u.set_defaults(func=_ui)

    from schedlab.flows.serve import DEFAULT_CRON, DEFAULT_FLOW, DEFAULT_TIMEZONE

    s = subparsers.add_parser("serve", help="register a flow's cron schedule with a Prefect server and serve it",
                              description="Needs a running Prefect server (`prefect server start`,"
                              " PREFECT_API_URL=http://127.0.0.1:4200/api). Stopping this process pauses"
                              " the schedule.")
    s.add_argument("--flow", default=DEFAULT_FLOW, help=f"import path module:flow (default {DEFAULT_FLOW})")
    s.add_argument("--cron", default=DEFAULT_CRON, help=f"cron expression (default {DEFAULT_CRON!r})")
    s.add_argument("--timezone", default=DEFAULT_TIMEZONE, help=f"IANA time zone of the cron (default {DEFAULT_TIMEZONE})")
    s.add_argument("--name", help="deployment name (default: the flow's name)")
    s.set_defaults(func=_serve)


def _experiment(args: argparse.Namespace) -> int:
    from schedlab.flows.config import ConfigError
    from schedlab.flows.experiment import DaskUnreachable, run_experiment
    from schedlab.tasks.tracking import TrackingError

    if args.workers is not None and args.workers < 1:
        print("schedlab experiment: error: --workers must be at least 1", file=sys.stderr)
        return 2
    try:
        report = run_experiment(args.path, dask_address=args.dask_address, workers=args.workers)
    except (ConfigError, TrackingError, DaskUnreachable) as err:
        print(f"schedlab experiment: error: {err}", file=sys.stderr)
        return 2
    print()
    print(f"experiment {report['experiment']}: {report['replays']} replays ({report['replays_run']} run now,"
          f" {report['replays_skipped']} logged before, {report['replays_failed']} failed)")
    print(report["table"])
    if report["failures"]:
        print(f"\n{len(report['failures'])} replay(s) FAILED (their MLflow runs hold error.txt):", file=sys.stderr)
        for label, msg in report["failures"].items():
            print(f"  {label}: {msg}", file=sys.stderr)
    print(f"\nMLflow: {report['ui_url']}")
    if not report["tracking_uri"].startswith(("http://", "https://")):
        print("open it with `schedlab ui` (MLflow UI on http://127.0.0.1:5000), then the link above")
    return 1 if report["failures"] else 0


def ui_command(host: str = UI_HOST, port: int = UI_PORT, home: Path | None = None) -> list[str]:
    """The ``mlflow server`` command line of ``schedlab ui``."""
    home = home or settings.schedlab_home()
    return [sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", settings.sqlite_uri(home),
            "--default-artifact-root", settings.artifact_root(home).as_uri(),
            "--host", host, "--port", str(port), "--workers", "1"]


def _ui(args: argparse.Namespace) -> int:
    home = settings.apply_env()
    uri = settings.tracking_uri(home)
    if uri.startswith(("http://", "https://")):
        print(f"MLFLOW_TRACKING_URI is a tracking server: its UI is at {uri}")
        return 0
    from schedlab.tasks.tracking import TrackingError, check_tracking

    try:
        check_tracking(uri)  # create the database first (the UI would, with a different layout)
    except TrackingError as err:
        print(f"schedlab ui: error: {err}", file=sys.stderr)
        return 2
    settings.artifact_root(home).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    print(f"MLflow UI on http://{args.host}:{args.port} over {uri} (Ctrl-C stops it)", flush=True)
    proc = subprocess.Popen(ui_command(args.host, args.port, home), env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        return 0


def _serve(args: argparse.Namespace) -> int:
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
