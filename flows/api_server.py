"""The Prefect API a flow and its Dask workers talk to: ``$PREFECT_API_URL``, else an ephemeral server
started here for the flow's duration.

* **Slow start-up is waited for, not fatal.** On a busy machine the server can take minutes to start:
  :func:`wait_for_api` prints progress while it waits, up to ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``
  when that is set, else :data:`STARTUP_TIMEOUT_S`; past the limit it raises :class:`PrefectUnavailable`,
  whose message says how to raise the limit.
* **The server never outlives its process.** It starts with ``PR_SET_PDEATHSIG`` (Linux): when the
  process that started it dies, SIGKILL included, the kernel sends the server SIGTERM.
* **A Ctrl-C does not reach it**: it runs in a session of its own, so an interrupted flow can still
  report its state; links to it are not printed (:class:`HideLinksTo`): it is gone once the flow ends.
* **Logs reach the API before it stops**: :func:`flush_api_logs` here, :func:`flush_worker_api_logs`
  on each Dask worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from schedlab import settings

from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

from schedlab.tasks.locks import LockTimeout, file_lock

#: how long an ephemeral server may take to start unless PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS says
STARTUP_TIMEOUT_S = 600
#: a progress line every this many seconds while the server starts
PROGRESS_S = 30.0
TIMEOUT_SETTING = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"

class HideLinksTo(logging.Filter):
    """Drops log records that mention ``address``: the ephemeral server's "Starting temporary server
    on …" and the flow run's "View at …" lines link to a server gone once the flow ends."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def filter(self, record: logging.LogRecord) -> bool:
        return self.address not in record.getMessage()


class PrefectUnavailable(RuntimeError):
    """The Prefect API server could not be started (a set-up error: nothing ran)."""


def startup_timeout() -> int:
    """Seconds an ephemeral server may take to start: Prefect's setting when it was changed from
    Prefect's default, else :data:`STARTUP_TIMEOUT_S`."""
    from prefect.settings.models.server.ephemeral import ServerEphemeralSettings

    value = PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()
    default = ServerEphemeralSettings.model_fields["startup_timeout_seconds"].default
    return int(value) if value != default else STARTUP_TIMEOUT_S


class EphemeralServer:
    """Prefect's API server (uvicorn on ``prefect.server.api.server:create_app``, the command Prefect
    3.8.8's own ``SubprocessASGIServer`` runs) as a subprocess, behind ``profiling/guard.py``, which
    sends it SIGTERM when the thread that started it ends (its process killed, however).
    ``prefect.server`` is never imported here: that import alone cost the flow's process 3.6 s of CPU,
    and Dask workers import this module with the flows.

    Its port is bound here, when the URL is made, and the bound socket is handed to the server (uvicorn
    ``--fd``): a port only found free and released was taken, now and then, by the Dask cluster starting
    meanwhile before the server (seconds of imports later) bound it; the server then exited with status 3
    and its health checks reached a Dask port."""

    def __init__(self) -> None:
        self._socket: socket.socket | None = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.process: subprocess.Popen | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def start(self, timeout: float) -> None:
        """Start it and wait until ``/health`` answers 200; RuntimeError when it exits or ``timeout``
        seconds pass first."""
        import atexit

        import httpx
        import prefect
        from prefect.settings import get_current_settings

        if self._socket is None:
            raise RuntimeError("the ephemeral Prefect API server was stopped; make a new one")
        server_env = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
        fd = self._socket.fileno()
        os.set_inheritable(fd, True)
        try:
            self.process = subprocess.Popen(
                args=[sys.executable, "-m", "schedlab.profiling.guard", "--signal", "TERM", "--parent", str(os.getpid()),
                      sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent), "--factory",
                      "prefect.server.api.server:create_app", "--fd", str(fd), "--log-level", "error",
                      "--lifespan", "on"],
                env={**os.environ, **server_env, **get_current_settings().to_environment_variables(exclude_unset=True)},
                pass_fds=(fd,),
                start_new_session=True,  # a Ctrl-C at the terminal is the flow's to handle: the API stays up
            )
        finally:  # the server holds the port now (or nothing does: it did not start)
            self._close_socket()
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=5) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise RuntimeError(f"the ephemeral Prefect API server exited with status {code} before it answered")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.api_url}/health").status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise RuntimeError("Timed out while attempting to connect to ephemeral Prefect API server.")
                time.sleep(0.1)

    def _close_socket(self) -> None:
        sock, self._socket = self._socket, None
        if sock is not None:
            sock.close()

    def stop(self) -> None:
        self._close_socket()
        if self.process is None:
            return
        process, self.process = self.process, None
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def exported_api_url(url: str | None = None) -> contextlib.AbstractContextManager[None]:
    """``$PREFECT_API_URL`` = ``url`` (default: the API this process uses, if any) while the ``with``
    lasts: Dask worker processes started meanwhile report their task runs to the flow's API, not to
    an ephemeral one of their own. The one place the variable is swapped (:func:`settings.environ`)."""
    from prefect.settings import PREFECT_API_URL

    url = url or PREFECT_API_URL.value()
    return settings.environ({"PREFECT_API_URL": url} if url else {})


@contextlib.contextmanager
def prefect_api() -> Iterator[Future]:
    """Make Dask workers talk to the flow's Prefect API. With no ``PREFECT_API_URL`` Prefect runs an
    ephemeral server per *process* (each worker would start its own): one is started here and its
    URL exported, so that workers spawned later inherit it. The server starts in the background;
    :func:`wait_for_api` on the returned future before running the flow."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    url = PREFECT_API_URL.value()
    server = starter = None
    if url:
        started: Future = Future()
        started.set_result(url)
    else:
        server = EphemeralServer()
        url = server.api_url
        limit = startup_timeout()

        def start() -> str:
            # one server at a time creates/migrates the database of a PREFECT_HOME shared by
            # several experiments (at once, all but one fail in the migration)
            home = Path(os.environ.get("PREFECT_HOME") or settings.prefect_home())
            try:
                with file_lock(home / "server-start.lock", what=f"Prefect database in {home}", timeout=limit):
                    server.start(timeout=limit)
            except (LockTimeout, RuntimeError) as err:
                raise PrefectUnavailable(_timeout_message(limit, err)) from None
            return url

    hidden = HideLinksTo(url.removesuffix("/api")) if server is not None else None
    if hidden is not None:  # before the server starts: its "Starting temporary server on …" comes at once
        for name in ("prefect", "prefect.flow_runs"):
            logging.getLogger(name).addFilter(hidden)
    if server is not None:
        # the thread that starts the server lives until the server is stopped: the server's
        # PR_SET_PDEATHSIG follows that thread, not the process
        starter = ThreadPoolExecutor(1, thread_name_prefix="prefect-api")
        started = starter.submit(start)
    try:
        with exported_api_url(url), temporary_settings({PREFECT_API_URL: url}):
            yield started
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                started.result()
                flush_api_logs()  # else sent at exit to a stopped server: ~80 s of retries
            server.stop()
            starter.shutdown()
        if hidden is not None:  # after the server's "Stopping temporary server on …"
            for name in ("prefect", "prefect.flow_runs"):
                logging.getLogger(name).removeFilter(hidden)


def _timeout_message(limit: int, err: BaseException) -> str:
    first = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
    load = f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs" if hasattr(os, "getloadavg") else ""
    return (f"the ephemeral Prefect API server did not start within {limit} s ({first}{load}); on a busy machine"
            f" raise the limit, e.g. {TIMEOUT_SETTING}=1800, or run a Prefect server (`prefect server start`)"
            " and set PREFECT_API_URL")


def wait_for_api(started: Future, progress_s: float = PROGRESS_S) -> str:
    """The API's URL once the server answers, with a progress line every ``progress_s`` seconds
    meanwhile; :class:`PrefectUnavailable` when it cannot be started."""
    began = time.monotonic()
    while True:
        try:
            return started.result(timeout=progress_s)
        except FutureTimeout:
            print(f"waiting for the Prefect API server to start ({time.monotonic() - began:.0f} s so far,"
                  f" limit {startup_timeout()} s: {TIMEOUT_SETTING})", file=sys.stderr, flush=True)


def flush_api_logs(timeout: float = 10.0) -> None:
    """Send the logs this process has queued for the Prefect API now (they go in batches, every
    ``PREFECT_LOGGING_TO_API_BATCH_INTERVAL`` s), while the flow's API still runs. Blocks. Prefect's
    drain returns a coroutine where the calling thread runs an event loop (an experiment started from
    a notebook or any async caller): dropped, it printed ``RuntimeWarning: coroutine 'wait' was never
    awaited`` and sent nothing; so it runs in a thread of its own, where no loop runs (on a Dask
    worker's loop: :func:`flush_worker_api_logs`)."""
    from prefect.logging.handlers import APILogWorker

    with ThreadPoolExecutor(1, thread_name_prefix="prefect-log-drain") as pool:
        pool.submit(APILogWorker.drain_all, timeout=timeout).result()


async def flush_worker_api_logs(timeout: float = 10.0) -> None:
    """:func:`flush_api_logs` on a Dask worker: ``Client.run`` calls functions on the worker's event
    loop, where Prefect's drain is a coroutine; it is awaited here (called plainly, it was dropped
    unawaited and the logs were lost)."""
    from prefect.logging.handlers import APILogWorker

    await APILogWorker.drain_all(timeout=timeout)
