"""One run of an experiment at a time per tracking store.

* :func:`experiment_lock`: the experiment flow holds a file lock per (tracking store, experiment)
  while it runs. A second ``schedlab experiment`` of the same experiment on the same
  ``$SCHEDLAB_HOME`` waits for the first, then resumes (finding its replays logged), instead of
  taking the first one's live runs for crashed leftovers. The lock is an ``flock``: the kernel
  releases it when its holder dies, SIGKILL included, so a crashed holder never blocks the next run.
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
from schedlab.tasks.locks import describe, file_lock

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
    """Tag the current flow run with its experiment and process."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    run = ctx.flow_run
    with get_client(sync_client=True) as prefect:
        prefect.update_flow_run(run.id, tags=sorted({*run.tags, *flow_run_tags(uri, name)}))
