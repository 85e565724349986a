"""Test session set-up: nothing writes to ~ or tries the network."""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

# schedlab.flows keeps its data ($SCHEDLAB_HOME: MLflow store, PREFECT_HOME) in a temporary folder
# during tests, never in the checkout or in ~ (set before anything imports schedlab.flows).
import tempfile  # noqa: E402

import pytest  # noqa: E402

os.environ.setdefault("SCHEDLAB_HOME", tempfile.mkdtemp(prefix="schedlab-test-home-"))

# A runner started in the background by a non-interactive shell ignores SIGINT; its children would
# inherit that and never see the Ctrl-C the process tests send them (tests/test_flows_ui.py,
# test_flows_serve.py). Take the default back, as a run from a terminal has.
import signal

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test harness (a temporary API server and database) for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def _home_template(tmp_path_factory):
    """An empty ``$SCHEDLAB_HOME`` built once: ``mlflow.db`` (MLflow's schema, created by
    ``tracking.check_tracking``) and ``prefect/prefect.db`` (Prefect's, by ``prefect server database
    upgrade``, in a process of its own so that this one's Prefect settings stay as they are). Each
    takes seconds of migrations, paid once here instead of once per test."""
    import subprocess
    import sys

    from schedlab.tasks import tracking

    root = tmp_path_factory.mktemp("home-template")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(root / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    prefect = subprocess.Popen([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tracking.check_tracking(f"sqlite:///{root / 'mlflow.db'}")  # meanwhile, in this process
    out = prefect.communicate(timeout=300)[0]
    assert prefect.returncode == 0 and (root / "prefect" / "prefect.db").is_file(), out[-3000:]
    return root


@pytest.fixture(scope="session")
def seed_home(_home_template):
    """``seed_home(home, prefect=True, mlflow=True)``: ``home`` holds the empty stores a first command
    would create (the MLflow store ``mlflow.db``; with ``prefect``, the Prefect API's database
    ``prefect/prefect.db``, where ``$SCHEDLAB_HOME`` or a ``PREFECT_HOME`` of ``home/prefect`` puts it).
    For tests whose subject is not the stores' creation (``test_footprint.py``,
    ``test_tracking_store_race.py`` and the first-start tests keep creating them); returns ``home``."""
    import shutil
    from pathlib import Path

    def seed(home: Path, prefect: bool = True, mlflow: bool = True) -> Path:
        home.mkdir(parents=True, exist_ok=True)
        if mlflow:
            shutil.copy2(_home_template / "mlflow.db", home / "mlflow.db")
        if prefect:
            (home / "prefect").mkdir(exist_ok=True)
            shutil.copy2(_home_template / "prefect" / "prefect.db", home / "prefect" / "prefect.db")
        return home

    return seed
