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
import logging
import time
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.futures import as_completed
from prefect.states import Failed

from schedlab import settings
from schedlab.flows import lifecycle
from schedlab.flows.orchestration import orchestration
from schedlab.sched.reporting import compare, mlflow_view
from schedlab.sched.spec import load_config
from schedlab.tasks import experiment as tracked, inputs, tracking
from schedlab.tasks.live import LiveComparison, heartbeat
from schedlab.tasks.replay import ReplayFailed, replay_task

#: a replay whose worker died is resubmitted this many times (Dask itself retries a task whose
#: worker died up to ``distributed.scheduler.allowed-failures`` = 3 times first)
INFRA_RETRIES = 2
#: the ranked table is printed every this many finished replays (``--table-every``)
TABLE_EVERY = 5


@flow(name="experiment", log_prints=True, persist_result=False)
def experiment_flow(config_path: str, tracking_uri: str, artifact_root: str | None = None,
                    code_version: str | None = None, rank_by: str = "avg_jct_s",
                    table_every: int = TABLE_EVERY, seeds: list[int] | None = None,
                    time_limit_s: float | None = None) -> dict[str, Any]:
    """Run every replay of the experiment not yet logged (``seeds`` in place of the file's, ``time_limit_s``
    in place of its ``time_limit_s``), then log and return the comparison; one run of an experiment at a
    time per tracking store (:mod:`schedlab.flows.lifecycle`)."""
    config = load_config(config_path, seeds)
    if time_limit_s is not None:
        config.time_limit_s = time_limit_s
    lifecycle.claim_flow_run(tracking_uri, config.name)
    with lifecycle.experiment_lock(tracking_uri, config.name):
        for run_id in lifecycle.crash_stale_flow_runs(tracking_uri, config.name):
            print(f"flow run {run_id} of experiment {config.name!r} was left running by a killed process: marked CRASHED")
        started = time.perf_counter()
        specs = tracked.grid(config, tracking_uri, code_version)
        uri = tracking_uri
        experiment_id = tracked.open_experiment(uri, config, artifact_root, rank_by)
        with lifecycle.InterruptGate().installed() as gate:
            with gate.shielded():
                parent = tracked.parent_run(uri, experiment_id, config, specs, Path(config_path).resolve())
            try:
                live = LiveComparison(uri, experiment_id, parent, config, specs, rank_by)
                return _run_and_compare(live, table_every, started, gate)
            except KeyboardInterrupt:  # replays in flight are marked once their workers are stopped (run_experiment)
                with gate.shielded():
                    tracked.end_interrupted(uri, parent)
                raise


def _run_and_compare(live: LiveComparison, table_every: int, started: float,
                     gate: lifecycle.InterruptGate) -> dict[str, Any]:
    """The fan-out and the comparison; a Ctrl-C lands only while waiting for replays (``gate``)."""
    uri, experiment_id, parent, specs = live.uri, live.experiment_id, live.parent_run_id, live.specs
    done = tracking.finished_by_key(uri, experiment_id, [s.key for s in specs])
    todo = live.config.submission_order([s for s in specs if s.key not in done])
    print(f"experiment {live.config.name!r}: {len(specs)} replays; {len(specs) - len(todo)} already logged,"
          f" {len(todo)} to run")
    for key, run in done.items():
        live.finished(next(s for s in specs if s.key == key), run.data.metrics)
    with gate.shielded():
        live.publish()
    print(f"MLflow, updated as replays finish: {mlflow_view.runs_url(uri, experiment_id)}", flush=True)
    failures: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        sent = stack.enter_context(inputs.shipped(todo))
        if sent:
            print(f"inputs sent to the workers through Dask: {len(sent)} ({sum(sent.values()) / 1e6:.1f} MB)")
        pending = {replay_task.submit(s, uri, experiment_id, parent): (s, 0) for s in todo}
        stack.enter_context(heartbeat(live, lambda: tracked.update(live, show=False)))
        finished = 0
        while pending:
            resubmit = {}
            for future in as_completed(list(pending)):
                spec, attempt = pending[future]
                try:
                    result = future.result()
                except ReplayFailed as error:
                    finished, failures[spec.key] = finished + 1, str(error)
                    live.failed.add(spec.key)
                    print(f"[{finished}/{len(todo)}] {spec.run_name}: FAILED: {error.message} (run {error.run_id})")
                    continue
                except Exception as error:  # noqa: BLE001 - the worker died, the task crashed
                    if attempt < INFRA_RETRIES:
                        print(f"{spec.run_name}: lost ({error!r}); submitting it again")
                        resubmit[replay_task.submit(spec, uri, experiment_id, parent)] = (spec, attempt + 1)
                    else:
                        finished, failures[spec.key] = finished + 1, repr(error)
                        live.failed.add(spec.key)
                        print(f"[{finished}/{len(todo)}] {spec.run_name}: gave up after {attempt + 1} attempts: {error!r}")
                    continue
                finished += 1
                print(f"[{finished}/{len(todo)}] {spec.run_name}: {compare.replay_line(result['metrics'])} (run"
                      f" {result['run_id']}{'' if result['logged'] else ', logged before'})")
                for message in result.get("unused", []):
                    print(f"  {spec.run_name}: {message}")
                live.finished(spec, result["metrics"])
                with gate.shielded():
                    tracked.update(live, show=finished % table_every == 0 and finished < len(todo))
            pending = resubmit
    with gate.shielded():
        report = tracked.finish(live, failures, todo, started)
    return Failed(message=f"{len(failures)} of {len(specs)} replays failed", data=report) if failures else report


def run_experiment(config_path: str | Path, *, dask_address: str | None = None, workers: int | None = None,
                   tracking_uri: str | None = None, home: Path | None = None,
                   code_version: str | None = None, rank_by: str = "avg_jct_s",
                   table_every: int = TABLE_EVERY, time_limit_s: float | None = None) -> dict[str, Any]:
    """Validate, check the tracking store and the Dask address, then run the flow (``time_limit_s``: each
    replay's, in place of the file's ``time_limit_s``).

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
    uri = tracking_uri or settings.tracking_uri(home)
    tracked.check_latest(config, uri)  # a registered version must exist: checked before any work
    from prefect_dask import DaskTaskRunner

    try:
        with orchestration(home, tracking_uri, dask_address, workers) as run:
            tracking.ensure_experiment(run.uri, config.name, Path(run.artifact_root) if run.artifact_root else None)
            state = experiment_flow.with_options(task_runner=DaskTaskRunner(address=run.address))(
                path, run.uri, run.artifact_root, code_version or tracking.code_version(), rank_by, table_every,
                time_limit_s=time_limit_s, return_state=True)
    except KeyboardInterrupt:
        tracked.kill_orphaned_replays(uri, config.name, report=True)
        raise
    report = state.result(raise_on_failure=False)
    if isinstance(report, BaseException):
        raise report
    return report


__all__ = ["experiment_flow", "run_experiment"]
