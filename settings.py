"""The project data directory and the environment every flow, task and Dask worker runs under.

Nothing here imports prefect or mlflow: :func:`apply_env` must run *before* they are imported
(``schedlab.flows`` and ``schedlab.tasks`` call it on import), because both read part of their
configuration once, at import time.

``$SCHEDLAB_HOME`` (default ``./.schedlab``) holds everything the embedded defaults write::

    $SCHEDLAB_HOME/mlflow.db        MLflow tracking store (sqlite)
    $SCHEDLAB_HOME/mlartifacts/     MLflow artifacts, one folder per experiment
    $SCHEDLAB_HOME/prefect/         PREFECT_HOME (the ephemeral API's database, logs, profiles)
    $SCHEDLAB_HOME/replays/         ``schedlab replay`` results without ``--out``, a folder per replay

``MLFLOW_TRACKING_URI`` set by the user (a tracking server ``http(s)://…``) wins over the sqlite store.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Telemetry off: none of these processes tries the network on its own.
TELEMETRY_ENV = {
    "DO_NOT_TRACK": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


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


def tracking_uri(home: Path | None = None) -> str:
    """The tracking store: ``$MLFLOW_TRACKING_URI`` when set, else the project's sqlite file."""
    return os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(home)


def apply_env(home: Path | None = None) -> Path:
    """Set telemetry off and ``PREFECT_HOME`` inside ``$SCHEDLAB_HOME`` (values the user set win).

    Exported to the environment so that Dask workers and ``prefect``/``mlflow`` sub-processes
    started from here inherit them. Returns the data directory."""
    home = home or schedlab_home()
    for key, value in TELEMETRY_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")  # Dask's INFO chatter off (workers too)
    os.environ.setdefault("SCHEDLAB_HOME", str(home))
    os.environ.setdefault("PREFECT_HOME", str(prefect_home(home)))
    # Prefect creates its home when imported and only warns if it cannot (a missing parent):
    # make sure the folder exists so nothing ends up elsewhere
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
    return home
