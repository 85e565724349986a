"""One run of an experiment at a time per tracking store, and no flow run left RUNNING by a killed one.

* :func:`experiment_lock`: the experiment flow holds a file lock per (tracking store, experiment)
  while it runs. A second ``schedlab experiment`` of the same experiment on the same
  ``$SCHEDLAB_HOME`` waits for the first, then resumes (finding its replays logged), instead of
  taking the first one's live runs for crashed leftovers. The lock is an ``flock``: the kernel
  releases it when its holder dies, SIGKILL included, so a crashed holder never blocks the next run.
* :func:`crash_stale_flow_runs`: each experiment flow run is tagged with its experiment and its
  process (``host:pid``); the next run of the experiment marks ``CRASHED`` (Prefect's client API)
  those still RUNNING/PENDING whose process is dead on this host, with their unfinished task runs.
* after an interrupted experiment has stopped its workers, the MLflow replay runs they had in flight
  are marked ``KILLED`` (:func:`schedlab.tasks.experiment.kill_orphaned_replays`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

from schedlab import settings
from schedlab.tasks.locks import describe, file_lock, owner_alive

EXPERIMENT_TAG = "schedlab.experiment:"  # + lock id (tracking store + experiment name)
OWNER_TAG = "schedlab.owner:"  # + host:pid of the process running the flow


def lock_id(uri: str, name: str) -> str:
    """Readable and unique per (tracking store, experiment name)."""
    digest = hashlib.sha256(f"{uri}\n{name}".encode()).hexdigest()[:12]
    return f"{re.sub(r'[^0-9A-Za-z_.-]+', '_', name)[:60]}-{digest}"


def lock_path(uri: str, name: str) -> Path:
    """Beside a sqlite store (its ``locks/`` folder), else in ``$SCHEDLAB_HOME/locks/``."""
    folder = (Path(uri.removeprefix("sqlite:///")).parent if uri.startswith("sqlite:///")
              else settings.schedlab_home())
    return folder / "locks" / f"experiment-{lock_id(uri, name)}.lock"


@contextlib.contextmanager
def experiment_lock(uri: str, name: str) -> Iterator[None]:
    """Hold the experiment's lock (waiting, with a message, while another live process holds it)."""
    def waiting(holder: dict) -> None:
        print(f"experiment {name!r} is being run by {describe(holder)} on the same tracking store;"
              " waiting for it to end, then resuming", flush=True)

    with file_lock(lock_path(uri, name), what=f"experiment {name!r}", on_wait=waiting):
        yield


def flow_run_tags(uri: str, name: str) -> list[str]:
    return [EXPERIMENT_TAG + lock_id(uri, name), f"{OWNER_TAG}{socket.gethostname()}:{os.getpid()}"]


def claim_flow_run(uri: str, name: str) -> None:
    """Tag the current flow run with its experiment and process (see :func:`crash_stale_flow_runs`)."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    run = ctx.flow_run
    with get_client(sync_client=True) as prefect:
        prefect.update_flow_run(run.id, tags=sorted({*run.tags, *flow_run_tags(uri, name)}))


def crash_stale_flow_runs(uri: str, name: str) -> list[str]:
    """Mark CRASHED the flow runs of this experiment left RUNNING/PENDING by a process now dead on
    this host (and their unfinished task runs). Returns their ids."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
        TaskRunFilter,
        TaskRunFilterState,
        TaskRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.context import FlowRunContext
    from prefect.states import Crashed

    unfinished = [StateType.RUNNING, StateType.PENDING, StateType.CANCELLING]
    ctx = FlowRunContext.get()
    current = ctx.flow_run.id if ctx is not None and ctx.flow_run is not None else None
    crashed = []
    with get_client(sync_client=True) as prefect:
        runs = prefect.read_flow_runs(flow_run_filter=FlowRunFilter(
            tags=FlowRunFilterTags(all_=[EXPERIMENT_TAG + lock_id(uri, name)]),
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=unfinished))))
        for run in runs:
            owner = next((t.removeprefix(OWNER_TAG) for t in run.tags if t.startswith(OWNER_TAG)), None)
            if run.id == current or owner_alive(owner) is not False:
                continue  # this run, or one whose process lives (or lives on another host)
            message = f"its process {owner} ended without reporting (killed); found by a later run"
            prefect.set_flow_run_state(run.id, Crashed(message=message), force=True)
            tasks = prefect.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])),
                task_run_filter=TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=unfinished))))
            for task_run in tasks:
                prefect.set_task_run_state(task_run.id, Crashed(message=message), force=True)
            crashed.append(str(run.id))
    return crashed


class InterruptGate:
    """Ctrl-C (SIGINT, and SIGTERM/SIGHUP alike) raises KeyboardInterrupt in the flow's thread only
    outside :meth:`shielded` sections: one arriving while a section writes to the tracking store is
    held until the section ends. Raised mid-write, it left the sqlite store's write lock held by this
    process's own connection, and the next write (the KILLED marking) waited on it for ever."""

    SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        self.depth = 0
        self.pending = False

    def _handler(self, signum: int, frame: object) -> None:
        if self.depth:
            self.pending = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator["InterruptGate"]:
        """The gate's handler while the ``with`` lasts (a no-op outside the main thread, where no
        signal handler can be set)."""
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {}
        for name in self.SIGNALS:
            signum = getattr(signal, name)
            previous[signum] = signal.signal(signum, self._handler)
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if not self.depth and self.pending:
                self.pending = False
                raise KeyboardInterrupt
