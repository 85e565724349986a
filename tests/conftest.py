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

# the test session is an entry point: it applies the project's settings once, before any test imports
# prefect or mlflow (importing schedlab.flows / schedlab.tasks changes nothing: tests/test_settings_env.py)
from schedlab.settings import Settings  # noqa: E402

Settings.from_env().apply().prefect_ready()

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
