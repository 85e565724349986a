"""Helpers the tests import (``from helpers import …``; pytest puts tests/ on sys.path)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPRODUCE_TINY = FIXTURES / "flows" / "reproduce-tiny.yaml"  # the reproduce flow's tiny config


@pytest.fixture
def reproduce_env(monkeypatch):
    """The reproduce tests' environment: the project's own MLflow store, a fixed code version.
    A test module takes it for every test with ``pytestmark = pytest.mark.usefixtures("reproduce_env")``."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("SCHEDLAB_CODE_VERSION", "test-version")


def shared_data(*parts: str) -> Path:
    """A path in ../shared/data, or skip the test when that data is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not present: {path}")
    return path


def make_table(rows: list[tuple[str, float, int, float]]) -> pd.DataFrame:
    """A canonical job table from (job_id, submit_time, num_gpus, duration) rows."""
    return pd.DataFrame(rows, columns=["job_id", "submit_time", "num_gpus", "duration"])


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``schedlab`` subprocess: this schedlab importable, ``$SCHEDLAB_HOME`` =
    ``home`` and nothing else naming where data goes (no tracking URI, Prefect API or home)."""
    import os

    import schedlab

    root = str(Path(schedlab.__file__).absolute().parent.parent)  # not resolved: the package may be a link
    env = {k: v for k, v in os.environ.items() if k not in (
        "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "PREFECT_API_URL", "PREFECT_HOME")}
    env.update(SCHEDLAB_HOME=str(home), PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
               DO_NOT_TRACK="true", MLFLOW_DISABLE_TELEMETRY="true", PREFECT_SERVER_ANALYTICS_ENABLED="false",
               **extra)
    return env


def run_cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300, **popen):
    """``schedlab ARGS`` run as a process in ``cwd``: the CompletedProcess (text output captured)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "schedlab.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, **popen)


def replay_table(table: pd.DataFrame, cluster, policy: str, params: dict | None = None, **fields):
    """``policy`` on the in-memory job ``table`` through the one entry point, :func:`schedlab.sched.replay.run`:
    ``fields`` are :class:`~schedlab.sched.replay.ReplaySpec`'s (seed, placement, interference, …)."""
    from schedlab.profiling.smact import profile_for
    from schedlab.sched.replay import ReplaySpec, prepare, run

    spec = ReplaySpec(cluster=cluster, policies=[{"name": policy, "params": params or {}}], **fields)
    [result] = run(spec, prepare(spec, table, smact=profile_for(spec)))
    return result


def prepared_table(table: pd.DataFrame, cluster, report=None, **fields) -> tuple[pd.DataFrame, dict]:
    """``table`` as :func:`schedlab.sched.replay.prepare` leaves it, and its notes (``fields`` as in
    :func:`replay_table`; ``report``: the table's load report, for errors naming the file)."""
    from schedlab.sched.replay import ReplaySpec, prepare

    prepared = prepare(ReplaySpec(cluster=cluster, policies=["fifo"], **fields), table, report=report)
    return prepared.table, prepared.notes
