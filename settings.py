"""The project data directory and the environment every flow, task and Dask worker runs under.

:class:`Settings` says where schedlab keeps its data and which stores it talks to. An entry point
(the ``schedlab`` command, a test session, a benchmark's ``main``) builds it once
(:meth:`Settings.from_env`) and applies it (:meth:`Settings.apply`: telemetry off, ``PREFECT_HOME``,
exported so that Dask workers and sub-processes inherit them) *before* prefect or mlflow is imported,
because both read part of their configuration once, at import time; a command that runs Prefect
then calls :meth:`Settings.prefect_ready`. Importing any schedlab module changes nothing: nothing
here imports prefect or mlflow, and no module applies settings on import.

``$SCHEDLAB_HOME`` (default ``./.schedlab``) holds everything the embedded defaults write::

    $SCHEDLAB_HOME/mlflow.db        MLflow tracking store (sqlite)
    $SCHEDLAB_HOME/mlartifacts/     MLflow artifacts, one folder per experiment
    $SCHEDLAB_HOME/prefect/         PREFECT_HOME (the ephemeral API's database, logs, profiles)
    $SCHEDLAB_HOME/replays/         ``schedlab replay`` results without ``--out``, a folder per replay
    $SCHEDLAB_HOME/ui.json          where ``schedlab ui`` last served the MLflow UI (host, port): links use it

``MLFLOW_TRACKING_URI`` set by the user (a tracking server ``http(s)://…``) wins over the sqlite store;
the model registry is the tracking store unless ``MLFLOW_REGISTRY_URI`` says otherwise (MLflow's own
default would be ``./mlflow.db`` in the current directory).

Folders are created by what writes there, when it writes, never on import: a read-only
``$SCHEDLAB_HOME`` fails only the commands that need it, with :class:`HomeError` naming the path.
Names that become file or folder names (experiment names, trace and policy labels) go through
:func:`path_name`, so that no name can point outside the folder it is put in.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import ipaddress
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Telemetry off: none of these processes tries the network on its own.
TELEMETRY_ENV = {
    "DO_NOT_TRACK": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


class HomeError(ValueError):
    """A folder schedlab needs cannot be created or written; the message names it."""


def schedlab_home() -> Path:
    """``$SCHEDLAB_HOME`` as an absolute path (default ``./.schedlab``); created by what writes there."""
    return Path(os.environ.get("SCHEDLAB_HOME") or ".schedlab").expanduser().resolve()


def prefect_home(home: Path | None = None) -> Path:
    return (home or schedlab_home()) / "prefect"


def sqlite_uri(home: Path | None = None) -> str:
    return f"sqlite:///{(home or schedlab_home()) / 'mlflow.db'}"


def artifact_root(home: Path | None = None) -> Path:
    return (home or schedlab_home()) / "mlartifacts"


def replays_dir(home: Path | None = None) -> Path:
    return (home or schedlab_home()) / "replays"


#: the MLflow UI links point at when ``schedlab ui`` has never recorded one (its default address)
DEFAULT_UI = "http://127.0.0.1:5000"


def ui_file(home: Path | None = None) -> Path:
    return (home or schedlab_home()) / "ui.json"


def _unspecified(host: str) -> bool:
    """Whether ``host`` is a wildcard listening address (every interface), reached on 127.0.0.1."""
    try:
        return not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a host name
        return False


def record_ui(host: str, port: int, home: Path | None = None) -> Path:
    """Remember where ``schedlab ui`` serves (kept after it stops: the next ``schedlab ui`` is expected
    on the same address); a wildcard listening address is reached on 127.0.0.1."""
    import json

    path = ui_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    reach = "127.0.0.1" if _unspecified(host) else host
    path.write_text(json.dumps({"url": f"http://{f'[{reach}]' if ':' in reach else reach}:{port}",
                                "host": host, "port": port, "pid": os.getpid()}) + "\n")
    return path


def ui_base(home: Path | None = None) -> str:
    """The MLflow UI's base URL links point at: the one ``schedlab ui`` recorded (:func:`record_ui`),
    else :data:`DEFAULT_UI`. An unreadable record counts as none."""
    import json

    try:
        url = json.loads(ui_file(home).read_text())["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_UI
    return url if isinstance(url, str) and url.startswith("http") else DEFAULT_UI


def tracking_uri(home: Path | None = None) -> str:
    """The tracking store: ``$MLFLOW_TRACKING_URI`` when set, else the project's sqlite file."""
    return os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(home)


def registry_uri(tracking: str) -> str:
    """The model registry that goes with the tracking store ``tracking``: ``$MLFLOW_REGISTRY_URI`` when
    set, else the tracking store itself. Pass it to MLflow wherever a tracking URI is passed."""
    return os.environ.get("MLFLOW_REGISTRY_URI") or tracking


@contextlib.contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` while the ``with`` lasts, each variable restored (or removed)
    afterwards: for what reads the environment during a call (MLflow's registry for ``models:/…``)
    or inherits it (Dask worker processes started meanwhile). The one place a variable is swapped."""
    previous = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def mlflow_env(tracking: str, registry: str | None = None) -> contextlib.AbstractContextManager[None]:
    """``$MLFLOW_TRACKING_URI`` = ``tracking`` and ``$MLFLOW_REGISTRY_URI`` = ``registry`` (default: its
    registry) while the ``with`` lasts. MLflow resolves ``models:/…`` through the registry the
    environment names (else ``./mlflow.db``), whatever URIs the call is given: set both wherever a
    model is downloaded (:func:`schedlab.tasks.model_tracking.fetcher`)."""
    return environ({"MLFLOW_TRACKING_URI": tracking, "MLFLOW_REGISTRY_URI": registry or registry_uri(tracking)})


#: a name kept as it is in a path: letters, digits, ``_.@-``, not starting with a dot
_PLAIN_NAME = re.compile(r"[0-9A-Za-z_@-][0-9A-Za-z_.@-]{0,99}")


def path_name(name: str) -> str:
    """``name`` as one file or folder name that stays inside the folder it is put in: the name itself
    when it is plain (:data:`_PLAIN_NAME`), else its plain characters (the rest as ``_``) and a hash
    of the whole name, so that two such names do not share a file (``../x`` -> ``x-1a2b3c4d``)."""
    if _PLAIN_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    stem = re.sub(r"[^0-9A-Za-z_.@-]+", "_", name).strip("_.")[:60]
    return f"{stem}-{digest}" if stem else digest


def export(values: Mapping[str, str]) -> None:
    """Put ``values`` into this process's environment, a variable the user set winning (what
    :meth:`Settings.apply` does, and a Dask worker's plugin: ``schedlab.flows.workers``)."""
    for key, value in values.items():
        os.environ.setdefault(key, value)


_exit_collection_skipped = False


def skip_exit_collection() -> None:
    """Let this process end without a last collection over every object it allocated: registered when a
    command (``cli.main``) or a Dask worker (``tasks.replay.warm_up``) starts, :func:`gc.freeze` runs after
    the exit handlers the libraries register later (Prefect's log flush, Dask's and MLflow's clean-ups);
    finalization then leaves the frozen heap to the OS. Measured on a loaded 2-CPU machine: an
    experiment's process ended ~6 s after its last line (0.3 s frozen), and a LocalCluster's close
    waited ~4 s for a worker that had imported a replay's modules, then killed it (0.7 s frozen).
    Registered once per process."""
    global _exit_collection_skipped
    if not _exit_collection_skipped:
        atexit.register(gc.freeze)
        _exit_collection_skipped = True


@dataclass(frozen=True)
class Settings:
    """Where schedlab keeps its data and which stores it talks to (module docstring): built once by
    an entry point and passed down."""

    home: Path  # $SCHEDLAB_HOME
    tracking_uri: str  # MLflow tracking store: $MLFLOW_TRACKING_URI, else home/mlflow.db
    registry_uri: str  # MLflow model registry: $MLFLOW_REGISTRY_URI, else the tracking store
    artifact_root: Path  # a sqlite store's artifacts
    prefect_home: Path  # $PREFECT_HOME, else home/prefect

    @classmethod
    def from_env(cls, home: Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
        """From the environment ``env`` (default: this process's); ``home`` overrides ``$SCHEDLAB_HOME``."""
        env = os.environ if env is None else env
        home = home or Path(env.get("SCHEDLAB_HOME") or ".schedlab").expanduser().resolve()
        tracking = env.get("MLFLOW_TRACKING_URI") or sqlite_uri(home)
        return cls(home=home, tracking_uri=tracking, registry_uri=env.get("MLFLOW_REGISTRY_URI") or tracking,
                   artifact_root=artifact_root(home), prefect_home=Path(env.get("PREFECT_HOME") or prefect_home(home)))

    @property
    def ui(self) -> str:
        """The MLflow UI address links point at (:func:`ui_base`: read when asked, ``schedlab ui`` may move it)."""
        return ui_base(self.home)

    def environment(self) -> dict[str, str]:
        """What prefect, mlflow and Dask read from the environment: telemetry off, the homes."""
        return {**TELEMETRY_ENV, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
                "DASK_LOGGING__DISTRIBUTED": "warning",  # Dask's INFO chatter off (workers too)
                "SCHEDLAB_HOME": str(self.home), "PREFECT_HOME": str(self.prefect_home)}

    def apply(self) -> Settings:
        """Export :meth:`environment` (values the user set win), before prefect or mlflow is imported."""
        export(self.environment())
        return self

    def prefect_ready(self) -> Settings:
        """``PREFECT_HOME`` created: call it before importing prefect, which creates its home when imported
        and only warns if it cannot (a missing parent). An OS error (read-only, a file in the way, no
        permission) raises :class:`HomeError` naming the folder."""
        try:
            self.prefect_home.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise HomeError(f"Prefect home (PREFECT_HOME) {self.prefect_home}: cannot create the folder"
                            f" ({err.strerror or err}); set SCHEDLAB_HOME to a writable folder") from None
        return self
