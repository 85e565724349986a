"""Sub-commands ``experiment``, ``ui``, ``status``, ``serve``, ``nightly``, ``reproduce`` and ``end-to-end`` of the
``schedlab`` command line.

``register(subparsers)`` adds them to the main parser (``schedlab.cli``); each handler returns its
exit code: 0 done, 1 some replays / profiling tasks / fits failed, 2 nothing ran (bad config or
sweep, unreachable tracking store / Dask scheduler / Prefect server), 3 (``nightly``) no GPU worker
in the Dask cluster and no ``--cpu-smoke``: nothing was profiled.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from schedlab import checks, settings
from schedlab.flows import REPRODUCE_CONFIGS

UI_HOST, UI_PORT = "127.0.0.1", 5000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("experiment", help="run an experiment (YAML) over Dask, tracked in MLflow",
                              description="Replay every (trace, cluster, policy, params, seed) of an experiment"
                              " file, one MLflow run each, and print the comparison against its baseline."
                              " Re-running resumes: replays already logged are not run again.")
    p.add_argument("path", help="experiment YAML (a bare name looks in conf/experiments/)")
    p.add_argument("--dask-address", metavar="ADDR", help="an existing Dask scheduler, tcp://host:8786"
                   " (default: a LocalCluster)")
    p.add_argument("--workers", type=checks.workers, metavar="N",
                   help=f"LocalCluster worker processes, 1-{checks.MAX_WORKERS} (default: CPUs, at most 8)")
    from schedlab.sched.reporting.compare import RANKABLE

    p.add_argument("--rank-by", default="avg_jct_s", choices=list(RANKABLE), metavar="METRIC",
                   help=f"the metric policies are ranked by, best first: {', '.join(RANKABLE)} (default avg_jct_s)")
    p.add_argument("--table-every", type=checks.number(int, ge=1), default=5, metavar="N",
                   help="print the ranked table and the replays in flight every N finished replays (default 5;"
                   " the table is always printed at the end)")
    p.set_defaults(func=_experiment)

    u = subparsers.add_parser("ui", help="the MLflow UI over the project's tracking store",
                              description="Start MLflow's UI (one worker, no job execution) over"
                              " $SCHEDLAB_HOME/mlflow.db; Ctrl-C stops it.")
    u.add_argument("--host", default=UI_HOST, help=f"address the UI listens on (default {UI_HOST})")
    u.add_argument("--port", type=checks.number(int, ge=1, le=65535), default=UI_PORT,
                   help=f"port the UI listens on (default {UI_PORT}); recorded in $SCHEDLAB_HOME/ui.json, and the"
                   " links experiments print use it")
    u.add_argument("--open", action="store_true", help="open the newest comparison in a web browser once the UI answers")
    u.set_defaults(func=_ui)

    st = subparsers.add_parser("status", help="experiments, runs left RUNNING by a crash, schedules, stores in use",
                               description="Each experiment's replays done / running / failed / queued, the runs a"
                               " crashed or killed process left RUNNING, the Prefect deployments' cron and next run"
                               " (with PREFECT_API_URL set), and the tracking store and artifact root in use.")
    st.add_argument("--mark-killed", action="store_true",
                    help="end the runs left RUNNING by a process that is gone: status KILLED")
    st.set_defaults(func=_status)

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
    n.set_defaults(func=_nightly)

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
                   " mean +/- std over seeds, within +/-30 %%, calibrations, causes of misses, the load-sweep and"
                   " ablation plots) and log it to the reproduce run under report/")
    r.set_defaults(func=_reproduce)

    e = subparsers.add_parser("end-to-end", help="profile -> fit -> an experiment using the fitted models",
                              description="Profile a sweep on this machine (default: the CPU smoke sweep), fit both"
                              " models, then run an experiment whose replays use the fitted interference model.")
    e.add_argument("--sweep", default="smoke", help="sweep name or YAML path (default smoke)")
    e.add_argument("--experiment", default="quickstart", help="experiment YAML or name (default quickstart)")
    e.add_argument("--dask-address", metavar="ADDR", help="an existing Dask scheduler (default: a LocalCluster)")
    e.add_argument("--workers", type=checks.workers, metavar="N",
                   help=f"LocalCluster worker processes, 1-{checks.MAX_WORKERS} (default: CPUs, at most 8)")
    e.add_argument("--no-track", action="store_true", help="do not log/register the fits (the experiment is logged)")
    e.set_defaults(func=_end_to_end)


def _experiment(args: argparse.Namespace) -> int:
    args.settings.prefect_ready()
    from schedlab.flows.experiment import run_experiment

    if args.workers is not None and args.workers < 1:
        print("schedlab experiment: error: --workers must be at least 1", file=sys.stderr)
        return 2
    import signal

    try:
        with interrupted_by(signal.SIGTERM, signal.SIGHUP):
            report = run_experiment(args.path, dask_address=args.dask_address, workers=args.workers,
                                    rank_by=args.rank_by, table_every=args.table_every)
    except _setup_errors() as err:
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
    print(f"\nMLflow: {report['ui_url']}\n  (the runs table: one row per policy, mean and _std over seeds; chart view: policies side by side)")
    print(f"comparison run (table, plots): {report['parent_url']}")
    if not report["tracking_uri"].startswith(("http://", "https://")):
        print(f"open them with `{ui_hint()}` (MLflow UI on {settings.ui_base()}), then the links above")
    return 1 if report["failures"] else 0


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


def _ui(args: argparse.Namespace) -> int:
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


def _status(args: argparse.Namespace) -> int:
    from schedlab.flows.status import collect, render
    from schedlab.tasks.tracking import TrackingError

    try:
        status = collect(mark_killed=args.mark_killed)
    except TrackingError as err:
        print(f"schedlab status: error: {err}", file=sys.stderr)
        return 2
    print(render(status))
    return 0


def _serve(args: argparse.Namespace) -> int:
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


def _setup_errors() -> tuple[type[BaseException], ...]:
    """What a flow command raises before any work: its message is the whole story (exit 2)."""
    from schedlab.tasks.config import ConfigError
    from schedlab.flows.experiment import DaskUnreachable, PrefectUnavailable
    from schedlab.tasks.tracking import TrackingError

    return (ConfigError, TrackingError, DaskUnreachable, PrefectUnavailable, FileNotFoundError, ValueError)


def _run(command: str, args: argparse.Namespace, run, render) -> int:
    """Shared by the flow commands: run the flow (set-up errors: exit 2 before any work), print its
    report with ``render`` (which may return an exit code of its own), the failures and the MLflow link."""
    if getattr(args, "workers", None) is not None and args.workers < 1:
        print(f"schedlab {command}: error: --workers must be at least 1", file=sys.stderr)
        return 2
    try:
        report = run()
    except _setup_errors() as err:
        print(f"schedlab {command}: error: {err}", file=sys.stderr)
        return 2
    code = render(report)
    if code is not None:
        return code
    for what, msg in report["failures"].items():
        print(f"FAILED {what}: {msg}", file=sys.stderr)
    print(f"MLflow: {report['ui_url']}")
    return 1 if report["failures"] else 0


def _nightly(args: argparse.Namespace) -> int:
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

    return _run("nightly", args, lambda: run_nightly(
        args.sweep, cpu_fallback=args.cpu_smoke, dask_address=args.dask_address,
        store=str(args.store) if args.store else None, dcgm_url=args.dcgm_url, force=args.force), render)


def _reproduce(args: argparse.Namespace) -> int:
    args.settings.prefect_ready()
    from schedlab.flows.reproduce import run_reproduce

    def render(report: dict) -> None:
        print()
        print(report["markdown"])
        if report.get("report"):
            print(f"HTML report: {report['report']}")

    return _run("reproduce", args, lambda: run_reproduce(
        args.configs or None, dask_address=args.dask_address, workers=args.workers, seeds=args.seeds,
        report_dir=args.report), render)


def _end_to_end(args: argparse.Namespace) -> int:
    args.settings.prefect_ready()
    from schedlab.flows.end_to_end import run_end_to_end

    def render(report: dict) -> None:
        print()
        for name, fit in report["fits"].items():
            print(f"{name}: {fit['path']}" + (f" ({fit['model_uri']})" if fit.get("model_uri") else ""))
        print(f"experiment {report['experiment']} with the fitted interference model ({report['config_path']}):")
        print(report["table"])

    return _run("end-to-end", args, lambda: run_end_to_end(
        args.sweep, args.experiment, dask_address=args.dask_address, workers=args.workers,
        track=not args.no_track), render)
