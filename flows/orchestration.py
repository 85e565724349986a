"""What the flows run on: a Dask scheduler (an existing one by address, checked before any work, or a
``LocalCluster`` whose workers warm up at once) and the Prefect API beside it (:func:`orchestration`)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedlab import settings
from schedlab.flows.api_server import exported_api_url, flush_worker_api_logs, prefect_api, wait_for_api
from schedlab.tasks import tracking
from schedlab.tasks.profile import GPU_RESOURCE, gpu_workers, local_gpu_count
from schedlab.tasks.replay import warm_up


class DaskUnreachable(RuntimeError):
    pass


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


class WorkersCannotReach(DaskUnreachable):
    """Workers of a Dask cluster given by address cannot use the tracking store or the Prefect API."""


def check_workers(address: str, uri: str, api_url: str | None) -> None:
    """Before any replay, each worker of the cluster at ``address`` can read and write the flow's tracking
    store and reach its Prefect API (:func:`schedlab.tasks.tracking.worker_reach`); WorkersCannotReach,
    in one line saying what to set, otherwise. A sqlite store on workers that share no disk with this
    machine is refused rather than relayed through the client (measured in docs/how-to/dask-cluster.md:
    the logging a relay would put on the client exceeds what one client can do for many workers)."""
    import secrets

    from distributed import Client

    marker, token = None, secrets.token_hex(16)
    if uri.startswith("sqlite:///"):
        marker = str(Path(uri.removeprefix("sqlite:///")).with_name(f".schedlab-reach-{token[:12]}"))
        Path(marker).write_text(token)
    try:
        with Client(address, timeout=10, set_as_default=False) as dask_client:
            found = dask_client.run(tracking.worker_reach, uri, marker, token, api_url)
    finally:
        if marker is not None:
            Path(marker).unlink(missing_ok=True)
    store = sorted(w for w, problems in found.items() if "store" in problems)
    api = sorted(w for w, problems in found.items() if "api" in problems)
    if store:
        what = (f"the tracking store {uri} (a file on this machine that they do not see)" if marker else
                f"the MLflow server {uri}")
        raise WorkersCannotReach(
            f"{len(store)} of {len(found)} Dask workers at {address} cannot use {what}: start an MLflow server they"
            " can reach (`mlflow server --host 0.0.0.0 --backend-store-uri sqlite:///PATH/mlflow.db`) and set"
            " MLFLOW_TRACKING_URI=http://HOST:5000 here; nothing was run")
    if api:
        raise WorkersCannotReach(
            f"{len(api)} of {len(found)} Dask workers at {address} cannot reach the Prefect API at {api_url}: start"
            " a Prefect server they can reach (`prefect server start --host 0.0.0.0`) and set"
            " PREFECT_API_URL=http://HOST:4200/api here; nothing was run")


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


#: a local scheduler's HTTP routes (health, metrics) on a free loopback port: without it the scheduler takes
#: 8787 even with no dashboard, and warns "Port 8787 is already in use" when another cluster holds it
NO_DASHBOARD = {"dashboard": False, "dashboard_address": "127.0.0.1:0"}
#: Dask's samplers that feed only a dashboard, off in the LocalClusters started here (none has one): the
#: worker's profiler (every 10 ms) and GIL monitor, the system monitor every 5 s instead of 0.5 s, the event
#: loop's blocked-loop check every 1 s instead of 20 ms (its warning still comes, past 3 s). The memory
#: monitor stays. Measured: an idle worker used 1.05 CPU-s a 30 s with Dask's defaults, 0.22 with these; a
#: busy one did the same work.
QUIET_SAMPLERS = {"distributed.worker.profile.enabled": False, "distributed.admin.system-monitor.gil.enabled": False,
                  "distributed.admin.system-monitor.interval": "5s", "distributed.admin.tick.interval": "1s"}


def quiet_samplers_environ() -> dict[str, str]:
    """:data:`QUIET_SAMPLERS` as the environment variables a ``dask scheduler`` or ``dask worker`` reads."""
    return {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value)
            for key, value in QUIET_SAMPLERS.items()}


@contextlib.contextmanager
def local_cluster(n_workers: int, **options: Any) -> Iterator[Any]:
    """A ``LocalCluster`` of ``n_workers`` single-threaded worker processes, no dashboard, Dask's samplers
    quiet (:data:`QUIET_SAMPLERS`: its workers and restarted ones take the settings from their nanny),
    closed on exit."""
    import dask
    from distributed import LocalCluster

    with dask.config.set(QUIET_SAMPLERS):
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                               scheduler_kwargs=NO_DASHBOARD, silence_logs=logging.WARNING, **options)
    try:
        yield cluster
    finally:
        cluster.close(timeout=10)


class QuietLocalCluster(logging.Filter):
    """What our LocalCluster's close and prefect_dask say that is no news: a link to the dashboard the
    cluster does not run (``dashboard_address=None``), and the nanny's "Worker process still alive
    after 4.0 seconds, killing" for a worker busy in a replay when the flow ends or is interrupted
    (an abandoned replay's run is then marked KILLED: :func:`schedlab.tasks.experiment.kill_orphaned_replays`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "dashboard is available" not in message and "still alive after" not in message


#: how long replays wait for the workers' warm-up (seconds; past it they are sent anyway)
WARM_UP_WAIT_S = 120.0


@dataclass(frozen=True)
class Scheduler:
    """A Dask scheduler the flow's tasks go to, and ``warmed()``, which waits (at most
    :data:`WARM_UP_WAIT_S`) until every worker that was idle has imported what a replay needs (a shared
    cluster's worker busy with other work is not waited for). Replays are sent once
    it returns: Dask gives a task to the worker expected to be free first, and a worker still warming up
    looks busy for as long as the first warm-up took, so every replay went to the first warm worker
    while another stood idle (Dask does not move a task whose duration it has not yet measured)."""

    address: str
    warmed: Callable[[], None]


@contextlib.contextmanager
def dask_scheduler(dask_address: str | None, workers: int | None, uri: str) -> Iterator[Scheduler]:
    """The scheduler: the given one, or a LocalCluster's (one single-threaded worker process per CPU, at
    most 8, unless ``workers`` says), closed on exit. Workers start importing what a replay needs right
    away, in the background."""
    from distributed import Client

    with contextlib.ExitStack() as stack:
        if dask_address:
            address = dask_address
        else:
            n = workers or min(os.cpu_count() or 1, 8)
            quiet = QuietLocalCluster()
            for name in ("prefect.task_runner.dask", "distributed.nanny"):  # until the cluster has closed
                logging.getLogger(name).addFilter(quiet)
                stack.callback(logging.getLogger(name).removeFilter, quiet)
            with sigint_ignored_by_children():
                cluster = stack.enter_context(local_cluster(n))
            address = cluster.scheduler_address
        dask_client = stack.enter_context(Client(address, set_as_default=False))
        if not dask_address:  # a restarted worker too: no KeyboardInterrupt traceback at a Ctrl-C
            from schedlab.flows.workers import SigintIgnored

            dask_client.register_plugin(SigintIgnored())
            with contextlib.suppress(Exception):  # each warms up below: on a busy machine one may not be registered yet
                dask_client.wait_for_workers(n, timeout=WARM_UP_WAIT_S)
        warming, awaited = [], []  # held until the flow ends: a released future is cancelled
        with contextlib.suppress(Exception):
            busy = {w for w, keys in dask_client.processing().items() if keys}  # a shared cluster's, in other work
            for worker in dask_client.scheduler_info(n_workers=-1).get("workers", {}):
                warming.append(dask_client.submit(warm_up, None if dask_address else uri, workers=[worker], pure=False))
                if worker not in busy:  # a busy worker's warm-up waits for its task: not worth holding replays for
                    awaited.append(warming[-1])

        def warmed() -> None:
            # each future's own result: ``distributed.wait`` uses the default client, which ours is not (it
            # raised, and the replays went out while the workers still warmed up)
            deadline = time.monotonic() + WARM_UP_WAIT_S
            for future in awaited:
                with contextlib.suppress(Exception):  # a failed warm-up: that replay pays for its imports
                    future.result(timeout=max(0.1, deadline - time.monotonic()))

        yield Scheduler(address, warmed)
        del warming, awaited
        with contextlib.suppress(Exception):  # the workers' last task logs reach the API before it stops
            dask_client.run(flush_worker_api_logs, 10.0)


@contextlib.contextmanager
def dask_cluster(address: str | None) -> Iterator[str]:
    """The nightly profile's scheduler: the given one, or a one-worker ``LocalCluster`` (closed on
    exit) whose worker advertises ``GPU=<n>`` when NVML sees n GPUs on this machine."""
    if address:
        yield address
        return
    gpus = local_gpu_count()
    with contextlib.ExitStack() as stack:
        with exported_api_url():
            cluster = stack.enter_context(local_cluster(1, resources={GPU_RESOURCE: gpus} if gpus else None))
        yield cluster.scheduler_address


def cluster_gpu_workers(address: str, sweep: str | None = None) -> dict[str, dict[str, Any]]:
    """The GPU workers (one per host) of the Dask cluster at ``address`` (with ``sweep``, said)."""
    from distributed import Client

    with Client(address, timeout=10, set_as_default=False) as dask_client:
        found = gpu_workers(dask_client.scheduler_info(n_workers=-1))
    if sweep is not None and found:
        print(f"profiling {sweep!r} on {len(found)} GPU host(s): "
              + ", ".join(f"{found[w].get('host', w)} ({w})" for w in sorted(found)))
    return found


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
        scheduler = stack.enter_context(dask_scheduler(dask_address, workers, uri))
        api_url = wait_for_api(api)
        if dask_address:
            check_workers(dask_address, uri, api_url)
        scheduler.warmed()
        yield Orchestration(uri, str(root) if root else None, scheduler.address)
