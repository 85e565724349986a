"""MLflow helpers shared by the experiment flow (driver side) and the replay task (worker side).

Only :class:`mlflow.MlflowClient` is used (no fluent ``mlflow.start_run``): it is explicit about the
tracking URI and safe in Dask worker threads. Runs are tagged with their idempotency key
(``schedlab.key``); "logged" means a ``FINISHED`` run with that key.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from schedlab.sched.reporting.mlflow_view import KIND_TAG
from schedlab.settings import path_name, registry_uri
from schedlab.tasks.locks import LockTimeout, file_lock, owner_alive

KEY_TAG = "schedlab.key"
EXPERIMENT_KEY_TAG = "schedlab.experiment_key"
PARENT_TAG = "mlflow.parentRunId"
SUPERSEDED_TAG = "schedlab.superseded_by"
UNUSED_TAG = "schedlab.unused"  # what given to a replay changed nothing, and why (sched/results/applied.py)
ERROR_TAG = "schedlab.error"
OWNER_TAG = "schedlab.worker"  # host:pid of the process logging the run
LEASE_TAG = "schedlab.lease_until"  # epoch seconds; renewed while the owner works on the run
PROGRESS_TAG = "schedlab.progress"  # a replay's jobs done of all, updated with its lease
#: a RUNNING run whose lease has not been renewed for this long is a leftover (owner hung or gone)
LEASE_S = 120.0

T = TypeVar("T")


class TrackingError(RuntimeError):
    """The tracking store cannot be used (unreachable server, unwritable folder)."""


#: how long a process waits for another one creating or migrating the same sqlite store
STORE_LOCK_TIMEOUT_S = 300.0


@functools.lru_cache(maxsize=8)
def client(uri: str):
    """One client per tracking URI and process (the sqlite engine is created once). A sqlite store
    is opened (created, migrated) under a file lock beside it: MLflow's alembic migrations fail when
    two processes create the same database at once."""
    from mlflow import MlflowClient

    if not uri.startswith("sqlite:///"):
        return MlflowClient(tracking_uri=uri, registry_uri=registry_uri(uri))
    db = Path(uri.removeprefix("sqlite:///"))
    try:
        with file_lock(db.with_name(db.name + ".lock"), what=f"tracking store {db}", timeout=STORE_LOCK_TIMEOUT_S):
            c = MlflowClient(tracking_uri=uri, registry_uri=registry_uri(uri))
            c.search_experiments(max_results=1)  # the schema is created and migrated by now
    except LockTimeout as err:
        raise TrackingError(f"{err}: another process is creating or migrating it") from None
    except OSError as err:
        raise TrackingError(f"tracking store {uri}: cannot lock {db.parent} ({err})") from None
    except Exception as err:  # noqa: BLE001 - alembic / sqlalchemy errors, shown in one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TrackingError(f"tracking store {uri}: its database {db} cannot be created or migrated"
                            f" ({type(err).__name__}: {first}); is it an MLflow database of this"
                            " or an older MLflow version?") from None
    return c


def retrying(call: Callable[[], T], attempts: int = 8) -> T:
    """Retry a tracking call on sqlite's 'database is locked' (several workers write one file)."""
    for i in range(attempts):
        try:
            return call()
        except Exception as err:  # noqa: BLE001
            if "locked" not in str(err) or i == attempts - 1:
                raise
            time.sleep(0.05 * 2**i)
    raise AssertionError("unreachable")


def check_tracking(uri: str, timeout: float = 5.0) -> None:
    """Fail fast, before any work, when the store cannot be used; create a sqlite store's schema
    here, before the fan-out (:func:`client` holds a file lock while it does)."""
    if uri.startswith(("http://", "https://")):
        url = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - user's server
                if response.status != 200:
                    raise TrackingError(f"MLflow tracking server {uri} answered {response.status} on /health")
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise TrackingError(f"MLflow tracking server {uri} is unreachable ({reason}); start it or"
                                " unset MLFLOW_TRACKING_URI to use the local sqlite store") from None
        return
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
            probe = db.parent / f".probe-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as err:
            raise TrackingError(f"tracking store {uri}: cannot write {db.parent} ({err})") from None
    try:
        client(uri).search_experiments(max_results=1)  # a sqlite schema is created here, under a lock
    except TrackingError:
        raise
    except Exception as err:  # noqa: BLE001
        raise TrackingError(f"tracking store {uri} cannot be opened: {err}") from None


def worker_reach(uri: str, marker: str | None, token: str, api_url: str | None) -> list[str]:
    """Run on each Dask worker before any replay: what of the flow's services this worker cannot use.
    ``marker``: a file the client wrote beside a sqlite store with ``token`` in it (a worker that cannot
    read it does not share the client's disk, and would open an empty store of its own); an http(s)
    store and the Prefect API (``api_url``) are asked for their health. Opens and creates nothing."""
    problems = []
    if marker is not None:
        try:
            seen = Path(marker).read_text() == token
        except OSError:
            seen = False
        if not seen:
            problems.append("store")
    for name, url in (("store", uri.rstrip("/") + "/health" if uri.startswith(("http://", "https://")) else None),
                      ("api", api_url.rstrip("/") + "/health" if api_url else None)):
        if url is None or name in problems:
            continue
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - the user's own server
                if response.status != 200:
                    problems.append(name)
        except (urllib.error.URLError, OSError, ValueError):
            problems.append(name)
    return problems


def ensure_experiment(uri: str, name: str, artifact_root: Path | None) -> str:
    """The MLflow experiment's id, created with its artifacts in ``artifact_root``'s folder for ``name``
    (:func:`schedlab.settings.path_name`: a name such as ``../x`` cannot put them elsewhere)."""
    c = client(uri)
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            c.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    location = (artifact_root / path_name(name)).resolve().as_uri() if artifact_root is not None else None
    try:
        return c.create_experiment(name, artifact_location=location)
    except Exception:  # created by someone else meanwhile
        exp = c.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def download(uri: str, run_id: str, artifact_path: str, dst: Path) -> Path:
    """A run's artifact downloaded into ``dst``, through the tracking store ``uri`` and its registry."""
    from mlflow.artifacts import download_artifacts

    return Path(download_artifacts(run_id=run_id, artifact_path=artifact_path, dst_path=str(dst), tracking_uri=uri,
                                   registry_uri=registry_uri(uri)))


def runs_with_tag(uri: str, experiment_id: str, tag: str, values: Iterable[str] | None = None,
                  *, include_deleted: bool = False) -> list:
    """Every run of the experiment carrying ``tag`` (optionally one of ``values``)."""
    from mlflow.entities import ViewType

    wanted = set(values) if values is not None else None
    if wanted is not None and len(wanted) == 1:
        filt = f"tags.`{tag}` = '{next(iter(wanted))}'"
    else:
        filt = f"tags.`{tag}` != ''"
    view = ViewType.ALL if include_deleted else ViewType.ACTIVE_ONLY
    c, out, token = client(uri), [], None
    while True:
        page = retrying(lambda: c.search_runs([experiment_id], filter_string=filt, run_view_type=view,
                                              max_results=1000, page_token=token))
        out += [r for r in page if wanted is None or r.data.tags.get(tag) in wanted]
        token = page.token
        if not token:
            return out


def finished_by_key(uri: str, experiment_id: str, keys: Iterable[str] | None = None) -> dict[str, Any]:
    """key -> its FINISHED run (the oldest, should there ever be two)."""
    done: dict[str, Any] = {}
    for run in sorted(runs_with_tag(uri, experiment_id, KEY_TAG, keys), key=lambda r: r.info.start_time or 0):
        if run.info.status == "FINISHED":
            done.setdefault(run.data.tags[KEY_TAG], run)
    return done


def owner_tags() -> dict[str, str]:
    """Tags naming the process that owns a run being logged (``host:pid``) and its lease."""
    return {OWNER_TAG: f"{socket.gethostname()}:{os.getpid()}", LEASE_TAG: f"{time.time() + LEASE_S:.0f}"}


def is_live(run: Any, now: float | None = None) -> bool:
    """A RUNNING run whose owner still works on it: not dead on this host, and its lease (renewed
    by :func:`start_lease`) not expired. Any other run is a leftover that may be retired."""
    if run.info.status != "RUNNING" or owner_alive(run.data.tags.get(OWNER_TAG)) is False:
        return False
    try:
        until = float(run.data.tags.get(LEASE_TAG, "nan"))
    except ValueError:
        return False
    return until > (now if now is not None else time.time())


def start_lease(uri: str, run_id: str, progress: Callable[[], str | None] | None = None,
                every: float = LEASE_S / 4) -> Callable[[], None]:
    """Renew the run's lease every ``every`` s in a thread, until the returned call stops it; with
    ``progress``, its text (e.g. ``"12,000/60,000 jobs"``) goes with each renewal as tag ``schedlab.progress``."""
    from mlflow.entities import RunTag

    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(every):
            tags = [RunTag(LEASE_TAG, f"{time.time() + LEASE_S:.0f}")]
            if progress is not None and (text := progress()):
                tags.append(RunTag(PROGRESS_TAG, text))
            with contextlib.suppress(Exception):  # a missed renewal: the next one comes in time
                retrying(lambda: client(uri).log_batch(run_id, tags=tags))

    thread = threading.Thread(target=renew, name=f"schedlab-lease-{run_id}", daemon=True)
    thread.start()

    def end() -> None:
        stop.set()
        thread.join()

    return end


def supersede(uri: str, runs: Iterable[Any], by: str) -> list[str]:
    """Retire earlier attempts of a replay being redone: a run left RUNNING by a killed worker ends
    ``KILLED``; each is tagged with the run that replaces it and soft-deleted (the UI can restore it).
    A run another live process owns (:func:`is_live`) is never retired."""
    c, retired = client(uri), []
    for run in runs:
        rid = run.info.run_id
        if is_live(run) or rid == by:
            continue
        if run.info.status == "RUNNING":
            retrying(lambda: c.set_terminated(rid, status="KILLED"))
        retrying(lambda: c.set_tag(rid, SUPERSEDED_TAG, by))
        retrying(lambda: c.delete_run(rid))
        retired.append(rid)
    return retired


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``$SCHEDLAB_CODE_VERSION``, else the git commit of the package (``+dirty`` when tracked files
    differ from it), else the package version."""
    if os.environ.get("SCHEDLAB_CODE_VERSION"):
        return os.environ["SCHEDLAB_CODE_VERSION"]
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return f"{sha}+dirty" if dirty else sha
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"schedlab-{version('schedlab')}"
        except PackageNotFoundError:
            return "unknown"
