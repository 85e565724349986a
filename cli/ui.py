"""``schedlab ui``: MLflow's UI over the project's tracking store (one worker, no job execution), in a
session of its own that Ctrl-C, SIGTERM and SIGHUP stop whole; the address it serves on is recorded so
that the links other commands print reach it."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from pathlib import Path

from schedlab import checks, settings
from schedlab.cli.common import interrupted_by

UI_HOST, UI_PORT = "127.0.0.1", 5000


def register(subparsers: argparse._SubParsersAction) -> None:
    u = subparsers.add_parser("ui", help="the MLflow UI over the project's tracking store",
                              description="Start MLflow's UI (one worker, no job execution) over"
                              " $SCHEDLAB_HOME/mlflow.db; Ctrl-C stops it.")
    u.add_argument("--host", default=UI_HOST, help=f"address the UI listens on (default {UI_HOST})")
    u.add_argument("--port", type=checks.number(int, ge=1, le=65535), default=UI_PORT,
                   help=f"port the UI listens on (default {UI_PORT}); recorded in $SCHEDLAB_HOME/ui.json, and the"
                   " links experiments print use it")
    u.add_argument("--open", action="store_true", help="open the newest comparison in a web browser once the UI answers")
    u.set_defaults(func=run)


def ui_command(host: str = UI_HOST, port: int = UI_PORT, home: Path | None = None) -> list[str]:
    """The ``mlflow server`` command line of ``schedlab ui``."""
    home = home or settings.schedlab_home()
    return [sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", settings.sqlite_uri(home),
            "--default-artifact-root", settings.artifact_root(home).as_uri(),
            "--host", host, "--port", str(port), "--workers", "1"]


def port_free(host: str, port: int) -> OSError | None:
    """None when a server can listen on (host, port), else the bind error."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        return err
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
        try:
            sock.bind(address)
        except OSError as err:
            return err
    return None


def stop_group(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Stop a child started in a session of its own and all it started: SIGTERM to the group, then
    SIGKILL to whatever is left of it after ``timeout`` s."""
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run(args: argparse.Namespace) -> int:
    import signal

    busy = port_free(args.host, args.port)
    if busy is not None:
        print(f"schedlab ui: error: cannot listen on {args.host}:{args.port} ({busy.strerror or busy});"
              " is another `schedlab ui` or MLflow server running? Choose another --port", file=sys.stderr)
        return 2
    home, uri = args.settings.home, args.settings.tracking_uri
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
    settings.record_ui(args.host, args.port, home)
    base = settings.ui_base(home)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    print(f"MLflow UI on {base} over {uri} (Ctrl-C stops it); the classic runs view:"
          f" {base}/#/experiments?workflowType=machine_learning (MLflow opens on its"
          " GenAI view otherwise: pick 'Model training' top left)", flush=True)
    newest = newest_comparison(uri)
    if newest is not None:
        print(f"newest comparison: {newest['name']} (started {newest['started']}, {newest['status']})\n"
              f"  {newest['url']}", flush=True)
    elif args.open:
        print("no comparison in the store yet (run `schedlab experiment`): opening the experiments list", flush=True)

    # the server runs in a session of its own (its workers with it): SIGTERM, SIGHUP and Ctrl-C here
    # stop the whole group, and nothing is left behind listening on the port
    proc = None
    try:
        with interrupted_by(signal.SIGTERM, signal.SIGHUP):
            proc = subprocess.Popen(ui_command(args.host, args.port, home), env=env, start_new_session=True)
            if args.open:
                open_when_up(proc, base, newest["url"] if newest else f"{base}/#/experiments?workflowType=machine_learning")
            return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if proc is not None:
            stop_group(proc)


def ui_hint(home: Path | None = None) -> str:
    """The ``schedlab ui`` command that serves the links printed (the address it last served on)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(settings.ui_base(home))
    return "schedlab ui" + (f" --host {parts.hostname}" if parts.hostname != UI_HOST else "") + (
        f" --port {parts.port}" if parts.port != UI_PORT else "")


def newest_comparison(uri: str) -> dict[str, str] | None:
    """The most recently started experiment comparison in the store: its name, start, status and link
    (the experiment's comparison view); None when there is none."""
    import datetime

    from schedlab.sched.reporting import mlflow_view
    from schedlab.tasks.tracking import KIND_TAG, client, retrying

    c = client(uri)
    experiments = [e.experiment_id for e in retrying(lambda: c.search_experiments(max_results=1000))]
    if not experiments:
        return None
    runs = retrying(lambda: c.search_runs(experiments, filter_string=f"tags.`{KIND_TAG}` = 'experiment'",
                                          order_by=["attributes.start_time DESC"], max_results=1))
    if not runs:
        return None
    run = runs[0]
    started = datetime.datetime.fromtimestamp((run.info.start_time or 0) / 1000).strftime("%Y-%m-%d %H:%M")
    return {"name": run.info.run_name, "started": started, "status": run.info.status,
            "url": mlflow_view.runs_url(uri, run.info.experiment_id)}


def open_when_up(proc: subprocess.Popen, base: str, url: str, timeout: float = 120.0) -> None:
    """Open ``url`` in a web browser once the UI at ``base`` answers /health (gives up quietly when the
    server exits first or does not answer within ``timeout`` s)."""
    import time
    import urllib.request
    import webbrowser

    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as response:  # noqa: S310 - our server
                if response.status == 200:
                    if not webbrowser.open(url):
                        print(f"no web browser found: open {url}", flush=True)
                    return
        except OSError:
            time.sleep(0.5)
