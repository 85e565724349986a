"""The replay task: one (trace, cluster, policy, params, seed) -> one MLflow run, logged from the worker.

Exactly once: the task looks up its idempotency key first. A ``FINISHED`` run with the key means the
work is done (a worker killed after logging but before returning): it returns that run. A run of
the key that another live process owns (its ``host:pid`` alive, its lease renewed) is waited for.
Earlier attempts that did not finish (``RUNNING`` left by a dead worker, ``FAILED``) are retired
(:func:`schedlab.tasks.tracking.supersede`) and the replay is logged anew; the run is marked
``FINISHED`` only after every metric and artifact is in. A replay that raises ends its run ``FAILED``
with ``error.txt`` (the traceback) as an artifact and raises :class:`ReplayFailed`.

The result is small: run id, status, key and the summary's numbers (never tables).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from schedlab import settings
from schedlab.sched.contained import Contained, PolicyFailed
from schedlab.sched.watchdog import thread_lock_for_progress_bars
from schedlab.sched.reporting.markdown import text as md
from schedlab.sched.reporting.mlflow_view import applied_metrics, run_metrics, run_params, standard_tags
from schedlab.sched.spec import ExperimentReplay
from schedlab.tasks import inputs, tracking
from schedlab.tasks.model_tracking import fetcher, lineage
from schedlab.tasks.tracking import ERROR_TAG, KEY_TAG, KIND_TAG, PARENT_TAG, UNUSED_TAG, client, retrying

if TYPE_CHECKING:
    from schedlab.sched.core.cluster import ClusterSpec
    from schedlab.sched.models.fitted import Fetch
    from schedlab.sched.replay import ReplayResult

#: how often a replay whose key another live process is logging looks again
OWNER_POLL_S = 1.0


class ReplayFailed(RuntimeError):
    """The replay itself raised (bad trace, policy error): its run is FAILED; retrying will not help."""

    def __init__(self, label: str, run_id: str, message: str) -> None:
        super().__init__(f"replay {label} failed (MLflow run {run_id}): {message}")
        self.label, self.run_id, self.message = label, run_id, message

    def __reduce__(self):  # picklable across Dask processes
        return (ReplayFailed, (self.label, self.run_id, self.message))


def execute(spec: ExperimentReplay, progress: Callable[[int, int], None] | None = None,
            fetch: Fetch | None = None, contained: Contained | None = None) -> tuple[ReplayResult, ClusterSpec]:
    """Run ``spec``'s replay (no tracking) through :func:`schedlab.sched.replay.run`: ``(ReplayResult,
    cluster spec)``, the summary with ``load_wall_s`` (loading and preparing the trace); ``fetch``
    downloads the models named by MLflow URI; ``progress(jobs done, jobs)`` is called as the replay
    advances (every 1,000 jobs); ``contained``: the policy's replay in a child process, stopped at its
    time limit (a :class:`~schedlab.sched.contained.PolicyFailed` when the policy fails it)."""
    from schedlab.profiling.smact import profile_for
    from schedlab.sched.replay import prepare, run

    thread_lock_for_progress_bars()
    replay = spec.spec()
    started = time.perf_counter()
    prepared = prepare(replay, fetch=fetch, warn=False,  # the experiment's validation warned once per policy
                       smact=profile_for(replay))
    load_s = time.perf_counter() - started
    [result] = run(replay, prepared, progress=progress or False, contained=contained)
    result.summary["load_wall_s"] = load_s
    return result, prepared.cluster


@dataclass
class JobsDone:
    """A replay's progress as its engine reports it (every 1,000 jobs), read by the lease thread."""

    done: int = 0
    total: int = 0

    def update(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def text(self) -> str | None:
        return f"{self.done:,}/{self.total:,} jobs" if self.total else None


def log_replay(spec: ExperimentReplay, uri: str, experiment_id: str, parent_run_id: str | None) -> dict[str, Any]:
    """Run one replay and log it as one MLflow run (exactly once per key). Plain function: the
    Prefect task below wraps it; tests and serial benchmarks call it directly."""
    from schedlab.sched.reporting.drilldown import fairness
    from schedlab.sched.reporting.experiment import replay_figures

    c = client(uri)
    key = spec.key
    while True:  # a run of this key another live process is logging: wait for its outcome
        earlier = tracking.runs_with_tag(uri, experiment_id, KEY_TAG, [key])
        finished = [r for r in earlier if r.info.status == "FINISHED"]
        if finished:
            run = min(finished, key=lambda r: r.info.start_time or 0)
            return {"key": key, "label": spec.label, "run_id": run.info.run_id, "status": "FINISHED",
                    "logged": False, "metrics": dict(run.data.metrics)}
        if not any(tracking.is_live(r) for r in earlier):
            break
        time.sleep(OWNER_POLL_S)

    tags = {KEY_TAG: key, KIND_TAG: "replay", "schedlab.experiment": spec.experiment,
            "schedlab.policy": spec.policy, "schedlab.label": spec.label, "schedlab.trace": spec.trace_label,
            "schedlab.cluster": spec.cluster, "schedlab.seed": str(spec.seed),
            **tracking.owner_tags(),
            **standard_tags(f"Replay of **{md(spec.label)}** (policy {md(spec.policy)}) on trace {md(spec.trace_label)},"
                            f" cluster {md(spec.cluster)}, seed {spec.seed}; experiment {md(spec.experiment)}.")}
    if parent_run_id:
        tags[PARENT_TAG] = parent_run_id
    run = retrying(lambda: c.create_run(experiment_id, run_name=spec.run_name, tags=tags))
    run_id = run.info.run_id
    progress = JobsDone()
    end_lease = tracking.start_lease(uri, run_id, progress.text)
    tracking.supersede(uri, earlier, by=run_id)
    try:
        from mlflow.entities import Metric, Param, RunTag

        model_params, model_tags = lineage(spec.models, uri)  # the registered versions used
        retrying(lambda: c.log_batch(run_id, params=[Param(k, v) for k, v in {**run_params(spec), **model_params}.items()],
                                     tags=[RunTag(k, v) for k, v in model_tags.items()]))
        started = time.perf_counter()
        contained = Contained(spec.time_limit_s, "--time-limit, or time_limit_s: in the experiment file")
        # models:/… from the experiment's store; files from the client's copies (tasks/inputs.py)
        local, names = inputs.localised(spec)
        result, cluster = execute(local, progress.update, fetcher(uri), contained)
        replay_s = time.perf_counter() - started
        summary = {**result.summary, "replay_wall_s": replay_s}
        now = int(time.time() * 1000)
        gpus = cluster.training_pool.servers * cluster.training_pool.gpus_per_server
        metrics = {**run_metrics(summary), **applied_metrics(result),
                   **{k: v for k, v in fairness(result.jobs_with_groups(), gpus).items() if math.isfinite(v)}}
        unused = [inputs.client_names(m, names) for m in result.unused]  # what changed nothing (sched/results/applied.py)
        retrying(lambda: c.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
                                     tags=[RunTag(UNUSED_TAG, "; ".join(unused)[:4000])] if unused else []))
        with tempfile.TemporaryDirectory(prefix="schedlab-replay-") as tmp:
            out = Path(tmp)
            result.summary = summary
            result.write(out)
            if spec.figures:
                replay_figures(result, out, spec.run_name, gpus, label=spec.label)
            retrying(lambda: c.log_artifacts(run_id, str(out)))
        retrying(lambda: c.set_terminated(run_id, status="FINISHED"))
        return {"key": key, "label": spec.label, "run_id": run_id, "status": "FINISHED", "logged": True,
                "metrics": metrics, "unused": unused}
    except BaseException as err:
        # a policy's failure says what and where itself (its traceback is of the waiting side)
        message = err.message if isinstance(err, PolicyFailed) else f"{type(err).__name__}: {err}"
        try:
            error_text = message if isinstance(err, PolicyFailed) else traceback.format_exc()
            retrying(lambda: c.log_text(run_id, error_text, "error.txt"))
            retrying(lambda: c.set_tag(run_id, ERROR_TAG, message[:4000]))
            retrying(lambda: c.set_terminated(run_id, status="FAILED"))
        except Exception:  # noqa: BLE001 - the original error matters more
            pass
        if isinstance(err, Exception):
            raise ReplayFailed(spec.label, run_id, message) from None
        raise
    finally:
        end_lease()


def warm_up(uri: str | None) -> int:
    """Import what a replay needs, start the fork server its process comes from and open the tracking
    store, so that a fresh worker's first replay does not pay for it (run on every worker while the
    Prefect API starts); quiet the
    warning Dask logs for a cancelled replay; let the worker end quickly when its cluster closes
    (:func:`settings.skip_exit_collection`)."""
    settings.skip_exit_collection()
    import prefect.task_engine  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from schedlab.sched import replay  # noqa: F401
    from schedlab.sched.contained import PRELOAD
    from schedlab.sched.reporting import experiment  # noqa: F401 - the replay's figures
    from schedlab.sched.watchdog import warm_up as start_fork_server

    start_fork_server(PRELOAD)  # each replay's process is forked from it (sched/contained.py)

    if uri is not None:  # None: a cluster by address, not yet known to see the store (opening creates it)
        client(uri)
    import logging

    logging.getLogger("distributed.worker.state_machine").addFilter(_QuietCancel())
    return os.getpid()


class _QuietCancel:
    """Drops Dask's warning that a replay was cancelled (an interrupted experiment releases its futures:
    expected, and the flow reports it)."""

    def filter(self, record) -> bool:
        return "ended with CancelledError" not in record.getMessage()


@task(name="replay", cache_policy=NO_CACHE, retries=0, task_run_name="{spec.run_name}")
def replay_task(spec: ExperimentReplay, uri: str, experiment_id: str, parent_run_id: str | None) -> dict[str, Any]:
    return log_replay(spec, uri, experiment_id, parent_run_id)
