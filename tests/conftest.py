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


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test harness (a temporary API server and database) for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
