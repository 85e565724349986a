"""An experiment's inputs sent to its Dask workers, so that no worker reads a path of the client's.

The client reads each distinct input once (:func:`shipped`, in the flow), checks it is the content the
replays' keys name and hands it to Dask as a published dataset named by its content
(``schedlab-input-<sha256>``), held until the flow ends. (A worker's own Dask client cannot wait on a
key another client scattered; it can fetch a published dataset.) Two experiments on one scheduler
reading the same content share it: the first to end withdraws it, and a worker of the other that had
not fetched it yet fails its replay saying so. A replay on a worker (:func:`localised`) fetches each
input it needs the first time that worker needs it, writes it under the worker's own folder
(``<worker local dir>/schedlab-inputs/<sha>``, removed with the worker) and reads that copy. Outside a
Dask worker (a replay run in the client's process) local paths are read where they are and a URL is
read into ``$SCHEDLAB_HOME/inputs``, once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from schedlab.sched.spec import ExperimentReplay
from schedlab.sched.spec import inputs

KEY_PREFIX = "schedlab-input-"
_writing = threading.Lock()  # one copy written at a time per worker process


def dask_key(sha: str) -> str:
    return KEY_PREFIX + sha


@contextlib.contextmanager
def shipped(replays: list[ExperimentReplay]) -> Iterator[dict[str, int]]:
    """In a flow run on a ``DaskTaskRunner``: every distinct input of ``replays`` read, checked against the
    digest its replays carry and scattered to the cluster (one worker holds it; the others fetch it when
    a replay there needs it), held until exit. Yields ``{path: bytes}`` of what was shipped (empty off
    Dask or without inputs). Raises InputError when an input changed since the replays were made."""
    from prefect.context import FlowRunContext

    wanted = {path: sha for r in replays for path, sha in r.inputs.items()}
    runner = getattr(FlowRunContext.get(), "task_runner", None)
    if not wanted or type(runner).__name__ != "DaskTaskRunner":
        yield {}
        return
    contents = {}
    for path, sha in wanted.items():
        found = inputs.read(path)
        if found.sha != sha:
            raise inputs.InputError(f"{path}: changed while the experiment was starting (its digest is no longer"
                                    f" {sha[:12]}…): run the experiment again")
        contents[dask_key(sha)] = found
    dask_client = runner.client  # the runner's own (started on first use), closed by the runner
    futures = dask_client.scatter(contents, hash=False)
    dask_client.publish_dataset(**futures, override=True)  # how another client (a worker's) finds data by name
    try:
        yield {f.where: f.size for f in contents.values()}
    finally:
        with contextlib.suppress(Exception):
            for key in futures:
                dask_client.unpublish_dataset(key)
            dask_client.cancel(list(futures.values()))


def localised(replay: ExperimentReplay) -> tuple[ExperimentReplay, dict[str, str]]:
    """``replay`` reading this process's copies of its inputs (see the module's docstring), and each copy's
    path -> the client's path or URL (to say the client's in what the replay reports)."""
    if not replay.inputs:
        return replay, {}
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # not on a Dask worker: the client's own process
        copies = {path: _client_copy(path, sha) for path, sha in replay.inputs.items()}
    else:
        folder = Path(worker.local_directory) / "schedlab-inputs"
        copies = {path: str(_worker_copy(folder, path, sha)) for path, sha in replay.inputs.items()}
    return inputs.map_paths(replay, lambda path: copies.get(path, path)), {v: k for k, v in copies.items() if v != k}


def _worker_copy(folder: Path, path: str, sha: str) -> Path:
    """The worker's copy of input ``sha`` (``path`` on the client), fetched from the cluster once."""
    from distributed import get_client

    with _writing:
        if (done := inputs.written(folder, sha)) is not None:
            return done
        folder.mkdir(parents=True, exist_ok=True)
        try:
            found = get_client().get_dataset(dask_key(sha)).result(timeout=600)
        except Exception as err:  # noqa: BLE001 - the key is gone: its client ended or the data was lost
            raise inputs.InputError(f"{path}: its content ({sha[:12]}…) could not be fetched from the experiment's"
                                    f" client through Dask ({type(err).__name__}: {err})") from None
        return inputs.write(found, folder)


def _client_copy(path: str, sha: str) -> str:
    """A local path as it is; a URL read into ``$SCHEDLAB_HOME/inputs`` (once per content)."""
    if not inputs.is_url(path):
        return path
    from schedlab import settings

    folder = settings.Settings.from_env().home / "inputs"
    return str(inputs.written(folder, sha) or inputs.write(inputs.read(path), folder))


def client_names(text: str, names: dict[str, str]) -> str:
    """``text`` with each copy's path (``names``: copy -> the client's) written as the client's."""
    for copy, path in names.items():
        text = text.replace(copy, path)
    return text
