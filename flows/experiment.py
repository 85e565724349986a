"""The ``experiment`` flow: a trace x cluster x policy x params x seed grid, one Prefect task per replay,
fanned out over Dask; one MLflow run per replay and a parent run holding the comparison.

>>> report = run_experiment("conf/experiments/quickstart.yaml")           # LocalCluster
>>> report = run_experiment("exp.yaml", dask_address="tcp://sched:8786")  # an existing Dask cluster

:func:`run_experiment` checks everything that can be checked (the config, the tracking store, the
Dask address) before any work starts, creates the MLflow database and experiment once, then runs
:func:`experiment_flow`. Re-running the same experiment resumes: replays whose idempotency key has a
``FINISHED`` run are not run again.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
import hashlib
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from schedlab import settings

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.futures import as_completed
from prefect.states import Failed

from schedlab.flows import lifecycle
from schedlab.flows.live import LiveComparison, group_suffix, heartbeat, replay_row
from schedlab.flows.api_server import (
    PrefectUnavailable,
    flush_worker_api_logs,
    prefect_api,
    wait_for_api,
)
from schedlab.tasks.config import LATEST, ConfigError, ExperimentConfig, ModelSources, ExperimentReplay, load_config
from schedlab.tasks.model_tracking import resolve_latest
from schedlab.tasks import compare, mlflow_view, plots, tracking
from schedlab.tasks.replay import ReplayFailed, replay_task, warm_up
from schedlab.tasks.tracking import (
    EXPERIMENT_KEY_TAG,
    KIND_TAG,
    TrackingError,
    client,
    retrying,
)

log = logging.getLogger("schedlab.experiment")

#: a replay whose worker died is resubmitted this many times (Dask itself retries a task whose
#: worker died up to ``distributed.scheduler.allowed-failures`` = 3 times first)
INFRA_RETRIES = 2
#: the ranked table is printed every this many finished replays (``--table-every``)
TABLE_EVERY = 5
#: the CDF plots draw the best this many policies and the baseline (small multiples draw all)
CDF_TOP = 6


class DaskUnreachable(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------
# set-up checks (before any work)


def check_dask(address: str, timeout: float = 3.0) -> int:
    """Connect to an existing Dask scheduler and have its workers apply the project's settings
    (:class:`~schedlab.flows.workers.ProjectSettings`); the number of its workers. Raises DaskUnreachable."""
    from distributed import Client

    from schedlab.flows.workers import ProjectSettings

    try:
        with Client(address, timeout=timeout, set_as_default=False) as dask_client:
            dask_client.register_plugin(ProjectSettings())
            return len(dask_client.scheduler_info(n_workers=-1).get("workers", {}))
    except (OSError, TimeoutError, ValueError) as err:
        raise DaskUnreachable(f"Dask scheduler {address} is unreachable ({err}); start one"
                              " (`dask scheduler` + `dask worker ADDR`) or leave out --dask-address"
                              " to use a LocalCluster") from None


@contextlib.contextmanager
def sigint_ignored_by_children() -> Iterator[None]:
    """Worker processes started in the ``with`` ignore SIGINT (an ignored signal stays ignored across
    exec): a Ctrl-C at the terminal reaches the whole process group, and it is the flow's to handle
    (workers stopped by the cluster's close, not killed mid-write by the signal)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class QuietLocalCluster(logging.Filter):
    """What our LocalCluster's close and prefect_dask say that is no news: a link to the dashboard the
    cluster does not run (``dashboard_address=None``), and the nanny's "Worker process still alive
    after 4.0 seconds, killing" for a worker busy in a replay when the flow ends or is interrupted
    (an abandoned replay's run is then marked KILLED: :func:`lifecycle.kill_orphaned_replays`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "dashboard is available" not in message and "still alive after" not in message


@contextlib.contextmanager
def dask_scheduler(dask_address: str | None, workers: int | None, uri: str) -> Iterator[str]:
    """The scheduler address: the given one, or a LocalCluster's (one single-threaded worker process
    per CPU, at most 8, unless ``workers`` says), closed on exit. Workers start importing what a
    replay needs right away (in the background)."""
    from distributed import Client

    with contextlib.ExitStack() as stack:
        if dask_address:
            address = dask_address
        else:
            from distributed import LocalCluster

            n = workers or min(os.cpu_count() or 1, 8)
            with sigint_ignored_by_children():
                cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                                       silence_logs=logging.WARNING)
            quiet = QuietLocalCluster()
            for name in ("prefect.task_runner.dask", "distributed.nanny"):
                logging.getLogger(name).addFilter(quiet)
                stack.callback(logging.getLogger(name).removeFilter, quiet)
            stack.callback(cluster.close, timeout=10)
            address = cluster.scheduler_address
        dask_client = stack.enter_context(Client(address, set_as_default=False))
        warming = []  # held until the flow ends: a released future is cancelled
        with contextlib.suppress(Exception):
            for worker in dask_client.scheduler_info(n_workers=-1).get("workers", {}):
                warming.append(dask_client.submit(warm_up, uri, workers=[worker], pure=False))
        yield address
        del warming
        with contextlib.suppress(Exception):  # the workers' last task logs reach the API before it stops
            dask_client.run(flush_worker_api_logs, 10.0)


# ---------------------------------------------------------------------------------------------
# the flow


def experiment_key(config: ExperimentConfig, specs: list[ExperimentReplay]) -> str:
    blob = config.name + "\n" + "\n".join(sorted(s.key for s in specs))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _parent_run(uri: str, experiment_id: str, config: ExperimentConfig, specs: list[ExperimentReplay],
                config_path: Path) -> str:
    """The experiment's parent run: the same one again when the same experiment is re-run."""
    c = client(uri)
    key = experiment_key(config, specs)
    existing = tracking.runs_with_tag(uri, experiment_id, EXPERIMENT_KEY_TAG, [key])
    if existing:
        run_id = min(existing, key=lambda r: r.info.start_time or 0).info.run_id
        retrying(lambda: c.update_run(run_id, status="RUNNING"))
    else:
        run = retrying(lambda: c.create_run(experiment_id, run_name=f"{config.name} (comparison)", tags={
            KIND_TAG: "experiment", EXPERIMENT_KEY_TAG: key, "schedlab.experiment": config.name,
            **mlflow_view.standard_tags(config.description)}))
        run_id = run.info.run_id
        from mlflow.entities import Param

        params = {"experiment": config.name, "baseline": config.baseline_label, "replays": len(specs),
                  "policies": ",".join(e.label or e.name for e in config.policy_entries()),
                  "traces": ",".join(t.name for t in config.traces), "clusters": ",".join(config.clusters),
                  "seeds": ",".join(map(str, config.seeds)), "placement": config.placement,
                  "code_version": specs[0].code_version if specs else tracking.code_version(),
                  **{f"model.{k}": v for k, v in config.models.model_dump().items()}}
        retrying(lambda: c.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()]))
        retrying(lambda: c.log_artifact(run_id, str(config_path)))
    retrying(lambda: c.set_tag(run_id, "schedlab.config_path", str(config_path)))
    return run_id


def _log_comparison(uri: str, experiment_id: str, parent_run_id: str, config: ExperimentConfig,
                    specs: list[ExperimentReplay], done: dict[str, Any], live: LiveComparison,
                    suffix: str = "") -> tuple[Any, str]:
    """The full comparison on the parent run: the figures that need every replay's jobs (per policy,
    JCT/wait/queueing CDFs: the top 6 by rank and the baseline, and small multiples of all; the
    SM-activity CDF when the replays computed it (``smact_profiles``); average JCT and wait vs load
    when load is swept), logged under ``plots/``, then :meth:`LiveComparison.publish` (table, policy
    runs, headline bars, ``comparison.html``, the note with the bars and CDFs inline). Returns
    (table, markdown)."""
    import pandas as pd

    c = client(uri)
    baseline = config.baseline_label
    rows, jobs, smact = [], {}, {}
    figures: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="schedlab-compare-") as tmp:
        out = Path(tmp)
        for spec in specs:
            run = done.get(spec.key)
            if run is None:
                continue
            rows.append(replay_row(spec, run.data.metrics))
            live.finished(spec, run.data.metrics)
            try:
                path = tracking.download(uri, run.info.run_id, "jobs.parquet", out / "dl" / run.info.run_id)
                jobs[spec.key] = pd.read_parquet(path, columns=["jct_s", "queue_s", "wait_s"])
            except Exception as err:  # noqa: BLE001 - a plot less, not a failed experiment
                log.warning("no jobs.parquet for run %s: %s", run.info.run_id, err)
            if "smact_mean" in run.data.metrics:
                try:
                    path = tracking.download(uri, run.info.run_id, "smact.parquet", out / "dl" / run.info.run_id)
                    smact[spec.key] = pd.read_parquet(path)
                except Exception as err:  # noqa: BLE001 - a plot less, not a failed experiment
                    log.warning("no smact.parquet for run %s: %s", run.info.run_id, err)
        ranked = live.table()
        plot_dir = out / "plots"
        plot_dir.mkdir()
        groups: dict[tuple[str, str], dict[str, list]] = {}
        for spec in specs:
            if spec.key in jobs:
                groups.setdefault((spec.trace_label, spec.cluster), {}).setdefault(spec.label, []).append(
                    jobs[spec.key])
        for (trace_label, cluster), by_policy in groups.items():
            suffix_ = group_suffix(trace_label, cluster)
            order = [p for p in ranked.loc[(ranked["trace"] == trace_label) & (ranked["cluster"] == cluster), "policy"]
                     if p in by_policy]
            for column, name, what in (("wait_s", "wait", "wait: all time without GPUs"), ("jct_s", "jct", "JCT"),
                                       ("queue_s", "queue", "queueing delay to first start")):
                series = {k: [f[column] for f in frames] for k, frames in by_policy.items()}
                top = plots.cdf_comparison(series, plot_dir / f"{name}_cdf__{suffix_}.png",
                                           f"{what}: {trace_label} on {cluster}, seeds pooled", f"{column} (s)",
                                           order=order, top=CDF_TOP, baseline=baseline, styles=live.styles)
                grid = plots.cdf_grid(series, plot_dir / f"{name}_cdf_all__{suffix_}.png",
                                      f"{what}: {trace_label} on {cluster}", f"{column} (s)", order=order,
                                      baseline=baseline, styles=live.styles)
                if column != "queue_s":
                    figures += [top, grid] if column == "wait_s" else [top]
        smact_groups: dict[tuple[str, str], dict[str, list]] = {}
        for spec in specs:
            if spec.key in smact:
                smact_groups.setdefault((spec.trace_label, spec.cluster), {}).setdefault(spec.label, []).append(
                    smact[spec.key])
        for (trace_label, cluster), by_policy in smact_groups.items():
            plots.smact_cdf(by_policy, plot_dir / f"smact_cdf__{group_suffix(trace_label, cluster)}.png",
                            f"SM activity over all GPUs, CDF per policy: {trace_label} on {cluster}")
        if config.sweeps_load and rows:
            frame = pd.DataFrame(rows)
            means = frame.groupby(["trace_name", "cluster", "policy", "load"], sort=False)[
                ["avg_jct_s", "avg_wait_s"]].mean().reset_index()
            for (trace, cluster), group in means.groupby(["trace_name", "cluster"], sort=False):
                if group["load"].nunique() > 1:
                    plots.load_sweep_plot(group, plot_dir / f"vs_load__{settings.path_name(f'{trace}__{cluster}')}.png",
                                          f"{trace} on {cluster}: average JCT and wait vs load")
        if any(plot_dir.iterdir()):
            retrying(lambda: c.log_artifacts(parent_run_id, str(plot_dir), "plots"))
        return live.publish(figures=figures, suffix=suffix, final=True)


@flow(name="experiment", log_prints=True, persist_result=False)
def experiment_flow(config_path: str, tracking_uri: str, artifact_root: str | None = None,
                    code_version: str | None = None, rank_by: str = "avg_jct_s",
                    table_every: int = TABLE_EVERY, seeds: list[int] | None = None) -> dict[str, Any]:
    """Run every replay of the experiment not yet logged (``seeds`` in place of the file's), then log
    and return the comparison; one run of an experiment at a time per tracking store
    (:mod:`schedlab.flows.lifecycle`)."""
    name = load_config(config_path, seeds).name
    lifecycle.claim_flow_run(tracking_uri, name)
    with lifecycle.experiment_lock(tracking_uri, name):
        for run_id in lifecycle.crash_stale_flow_runs(tracking_uri, name):
            print(f"flow run {run_id} of experiment {name!r} was left running by a killed process: marked CRASHED")
        return _experiment(config_path, tracking_uri, artifact_root, code_version, rank_by, table_every, seeds)


def _experiment(config_path: str, tracking_uri: str, artifact_root: str | None,
                code_version: str | None, rank_by: str, table_every: int,
                seeds: list[int] | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    config = load_config(config_path, seeds)
    config.models = ModelSources(**resolve_latest(config.models.model_dump(), tracking_uri))  # `latest` -> N
    version = code_version or tracking.code_version()
    specs = config.grid(version)
    uri = tracking_uri
    experiment_id = tracking.ensure_experiment(uri, config.name, Path(artifact_root) if artifact_root else None)
    # the classic view and the shared comparison view before any replay: links work from the first second
    mlflow_view.describe_experiment(uri, experiment_id, config.description)
    mlflow_view.comparison_view(uri, experiment_id, rank_by)
    with lifecycle.InterruptGate().installed() as gate:
        with gate.shielded():
            parent = _parent_run(uri, experiment_id, config, specs, Path(config_path).resolve())
        try:
            return _run_and_compare(uri, experiment_id, parent, config, specs, rank_by, table_every, started, gate)
        except KeyboardInterrupt:
            # the parent is this process's (it holds the experiment's lock); replays in flight are
            # marked once their workers are stopped (run_experiment)
            with gate.shielded():
                if retrying(lambda: client(uri).get_run(parent)).info.status == "RUNNING":  # not ended meanwhile
                    retrying(lambda: client(uri).set_terminated(parent, status="KILLED"))
                    print(f"interrupted: comparison run {parent} marked KILLED", flush=True)
            raise


def _submission_order(config: ExperimentConfig, specs: list[ExperimentReplay]) -> list[ExperimentReplay]:
    """The baseline's replays first (every speed-up of the live comparison needs them), then the
    costliest policies' (``Policy.relative_cost``), so that a long replay does not start last and hold
    the experiment up alone; otherwise the grid's order (a stable sort)."""
    from schedlab.sched.policies import load_policy_class

    cost = {name: load_policy_class(config.resolve_policy(name)).relative_cost for name in {s.policy for s in specs}}
    return sorted(specs, key=lambda s: (s.label != config.baseline_label, -cost[s.policy]))


def _run_and_compare(uri: str, experiment_id: str, parent: str, config: ExperimentConfig, specs: list[ExperimentReplay],
                     rank_by: str, table_every: int, started: float, gate: lifecycle.InterruptGate) -> dict[str, Any]:
    """The fan-out and the comparison; a Ctrl-C lands only while waiting for replays (``gate``)."""
    done = tracking.finished_by_key(uri, experiment_id, [s.key for s in specs])
    todo = _submission_order(config, [s for s in specs if s.key not in done])
    print(f"experiment {config.name!r}: {len(specs)} replays; {len(specs) - len(todo)} already logged,"
          f" {len(todo)} to run")
    live = LiveComparison(uri, experiment_id, parent, config, specs, rank_by)
    for key, run in done.items():
        live.finished(next(s for s in specs if s.key == key), run.data.metrics)
    with gate.shielded():
        live.publish()
    print(f"MLflow, updated as replays finish: {mlflow_view.runs_url(uri, experiment_id)}", flush=True)

    failures: dict[str, str] = {}
    pending = {replay_task.submit(s, uri, experiment_id, parent): (s, 0) for s in todo}
    finished = 0
    with heartbeat(live):
        while pending:
            resubmit = {}
            for future in as_completed(list(pending)):
                spec, attempt = pending[future]
                try:
                    result = future.result()
                except ReplayFailed as error:
                    finished += 1
                    failures[spec.key] = str(error)
                    live.failed.add(spec.key)
                    print(f"[{finished}/{len(todo)}] {spec.run_name}: FAILED: {error.message} (run {error.run_id})")
                    continue
                except Exception as error:  # noqa: BLE001 - the worker died, the task crashed
                    if attempt < INFRA_RETRIES:
                        print(f"{spec.run_name}: lost ({error!r}); submitting it again")
                        resubmit[replay_task.submit(spec, uri, experiment_id, parent)] = (spec, attempt + 1)
                    else:
                        finished += 1
                        failures[spec.key] = repr(error)
                        live.failed.add(spec.key)
                        print(f"[{finished}/{len(todo)}] {spec.run_name}: gave up after {attempt + 1} attempts:"
                              f" {error!r}")
                    continue
                finished += 1
                m = result["metrics"]
                print(f"[{finished}/{len(todo)}] {spec.run_name}: avg JCT {m.get('avg_jct_s', float('nan')):,.0f} s,"
                      f" avg wait {m.get('avg_wait_s', float('nan')):,.0f} s, avg queue {m.get('avg_queue_s', float('nan')):,.0f} s"
                      f" (run {result['run_id']}"
                      f"{'' if result['logged'] else ', logged before'})")
                live.finished(spec, m)
                with gate.shielded():
                    _update(live, show=finished % table_every == 0 and finished < len(todo))
            pending = resubmit

    with gate.shielded():
        return _finish(uri, experiment_id, parent, config, specs, live, failures, todo, started)


def _finish(uri: str, experiment_id: str, parent: str, config: ExperimentConfig, specs: list[ExperimentReplay],
            live: LiveComparison, failures: dict[str, str], todo: list[ExperimentReplay], started: float) -> dict[str, Any]:
    """The full comparison (table, plots, policy runs), the counts and the parent run's end; the report."""
    done = tracking.finished_by_key(uri, experiment_id, [s.key for s in specs])
    labels = {s.key: s.run_name for s in specs}
    failed = ("\n**Failed replays** (their MLflow runs are FAILED, with `error.txt`):\n\n" + "\n".join(
        f"- {labels[k]}: {msg}" for k, msg in failures.items()) + "\n") if failures else ""
    table, markdown = _log_comparison(uri, experiment_id, parent, config, specs, done, live, failed)
    create_markdown_artifact(markdown, key=_artifact_key(config.name),
                             description=f"experiment {config.name}: comparison against {config.baseline_label}")
    c = client(uri)
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    counts = {"replays": len(specs), "replays_finished": len(done), "replays_failed": len(failures),
              "replays_run": len(todo), "replays_skipped": len(specs) - len(todo),
              "experiment_wall_s": time.perf_counter() - started}
    retrying(lambda: c.log_batch(parent, metrics=[Metric(k, float(v), now, 0) for k, v in counts.items()]))
    retrying(lambda: c.set_terminated(parent, status="FAILED" if failures else "FINISHED"))
    report = {
        "experiment": config.name, "experiment_id": experiment_id, "parent_run_id": parent,
        "tracking_uri": uri, "baseline": config.baseline_label, **counts,
        "failures": {labels[k]: msg for k, msg in failures.items()},
        "table": compare.to_text(table), "legend": compare.legend(config.baseline_label),
        "markdown": markdown, "ui_url": mlflow_view.runs_url(uri, experiment_id),
        "parent_url": mlflow_view.run_url(uri, experiment_id, parent),
    }
    if failures:
        return Failed(message=f"{len(failures)} of {len(specs)} replays failed", data=report)
    return report


def _update(live: LiveComparison, show: bool) -> None:
    """The parent run brought up to date after a finished replay; with ``show``, the ranked table
    and the replays in flight printed too. A failed update is a warning: the next one catches up."""
    try:
        running = live.running()
        table, _ = live.publish(running)
    except Exception as err:  # noqa: BLE001 - the comparison is redone in full at the end
        log.warning("the live comparison could not be updated: %s", err)
        return
    if show:
        in_flight = live.in_flight(running)
        print(f"{len(live.rows)} of {len(live.specs)} replays finished, best first by {live.rank_by}:\n"
              + compare.to_text(table) + (f"\n{in_flight}" if in_flight else ""), flush=True)


def _artifact_key(name: str) -> str:
    return ("experiment-" + re.sub(r"[^a-z0-9-]+", "-", name.lower())).strip("-")[:100]


# ---------------------------------------------------------------------------------------------
# entry point


@dataclass(frozen=True)
class Orchestration:
    uri: str  # MLflow tracking URI
    artifact_root: str | None  # local artifact root for a sqlite store, None for a tracking server
    address: str  # the Dask scheduler the flow's tasks run on


@contextlib.contextmanager
def orchestration(home: Path, tracking_uri: str | None, dask_address: str | None,
                  workers: int | None) -> Iterator[Orchestration]:
    """Check the tracking store (creating the sqlite schema once, before any fan-out) and the Dask
    address before any work, then start the Prefect API (an ephemeral server unless PREFECT_API_URL
    is set) and the Dask cluster side by side: each takes seconds; workers inherit PREFECT_API_URL."""
    uri = tracking_uri or settings.tracking_uri(home)
    tracking.check_tracking(uri)
    if dask_address:
        check_dask(dask_address)
    root = settings.artifact_root(home) if not uri.startswith(("http://", "https://")) else None
    with contextlib.ExitStack() as stack:
        api = stack.enter_context(prefect_api())
        address = stack.enter_context(dask_scheduler(dask_address, workers, uri))
        wait_for_api(api)
        yield Orchestration(uri, str(root) if root else None, address)


def run_experiment(config_path: str | Path, *, dask_address: str | None = None, workers: int | None = None,
                   tracking_uri: str | None = None, home: Path | None = None,
                   code_version: str | None = None, rank_by: str = "avg_jct_s",
                   table_every: int = TABLE_EVERY) -> dict[str, Any]:
    """Validate, check the tracking store and the Dask address, then run the flow.

    Returns the flow's report (``failures`` non-empty when a replay failed). Raises ConfigError,
    TrackingError or DaskUnreachable before any work when something is wrong (ValueError for a
    ``rank_by`` not in :data:`compare.RANKABLE` or a ``table_every`` below 1). Interrupted (Ctrl-C),
    it marks KILLED the comparison run and the replays in flight once its workers are stopped, then
    raises KeyboardInterrupt: finished replays are kept, and running it again resumes."""
    if rank_by not in compare.RANKABLE:
        raise ValueError(f"cannot rank by {rank_by!r}: one of {', '.join(compare.RANKABLE)}")
    if table_every < 1:
        raise ValueError(f"the table is printed every N finished replays: N must be at least 1, got {table_every}")
    home = settings.Settings.from_env(home).apply().home
    logging.getLogger("distributed").setLevel(logging.WARNING)  # the in-process scheduler's chatter
    config = load_config(config_path)  # ConfigError names the file and field
    path = str(config._path or Path(config_path).resolve())
    if LATEST in config.models.model_dump().values():  # a registered version must exist: check before any work
        uri = tracking_uri or settings.tracking_uri(home)
        tracking.check_tracking(uri)
        try:
            resolve_latest(config.models.model_dump(), uri)
        except ValueError as err:
            raise ConfigError(f"{path}: models: {err}") from None
    from prefect_dask import DaskTaskRunner

    uri = tracking_uri or settings.tracking_uri(home)
    try:
        with orchestration(home, tracking_uri, dask_address, workers) as run:
            tracking.ensure_experiment(run.uri, config.name, Path(run.artifact_root) if run.artifact_root else None)
            state = experiment_flow.with_options(task_runner=DaskTaskRunner(address=run.address))(
                path, run.uri, run.artifact_root, code_version or tracking.code_version(), rank_by, table_every,
                return_state=True)
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):  # the store may not exist yet: nothing ran
            killed = lifecycle.kill_orphaned_replays(uri, config.name)
            print(f"interrupted: {len(killed)} replay run(s) in flight marked KILLED; finished replays are kept,"
                  " and running the same command again resumes", file=sys.stderr, flush=True)
        raise
    report = state.result(raise_on_failure=False)
    if isinstance(report, BaseException):
        raise report
    return report


__all__ = ["DaskUnreachable", "PrefectUnavailable", "TrackingError", "check_dask", "experiment_flow", "run_experiment"]
