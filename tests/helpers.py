"""Helpers the tests import (``from helpers import …``; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

#: the development data: ``$SCHEDLAB_DATA``, else ``shared/data`` beside the checkout (as CI lays it out)
SHARED_DATA = Path(os.environ.get("SCHEDLAB_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPRODUCE_TINY = FIXTURES / "flows" / "reproduce-tiny.yaml"  # the reproduce flow's tiny config


def set_reproduce_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reproduce tests' environment: the project's own MLflow store, a fixed code version."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("SCHEDLAB_CODE_VERSION", "test-version")


@pytest.fixture
def reproduce_env(monkeypatch):
    """:func:`set_reproduce_env` for a test. A test module takes it for every test with
    ``pytestmark = pytest.mark.usefixtures("reproduce_env")``."""
    set_reproduce_env(monkeypatch)


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


# ---- recorded result digests (tests/test_digests_*.py, tests/test_replay_digests.py) --------------------
#: set to 1 to write what the digest tests find as the new recorded digests (each such test then skips)
RECORD_DIGESTS = "SCHEDLAB_RECORD_DIGESTS"


def table_digest(frame: pd.DataFrame) -> str:
    """SHA-256 of a table as CSV, floats written with ``repr`` so that the last bit counts."""
    import hashlib

    text = frame.to_csv(index=False, float_format=lambda x: repr(float(x)))
    return hashlib.sha256(text.encode()).hexdigest()


def summary_digest(summary: dict, is_timing) -> str:
    """SHA-256 of a replay summary's result fields; ``is_timing(key)`` names those that measure the run
    (wall-clock solve times), left out; the load report's trace path is reduced to the file's name."""
    import hashlib
    import json

    kept = {k: v for k, v in summary.items() if not is_timing(k)}
    if isinstance(kept.get("load_report"), dict) and "source" in kept["load_report"]:
        # the trace's path depends on the checkout's place (CI, a laptop): its name is what identifies it
        kept["load_report"] = {**kept["load_report"], "source": Path(kept["load_report"]["source"]).name}
    text = json.dumps(kept, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def check_digests(recorded: Path, case: str, found: dict) -> None:
    """Assert that ``found`` (a case's digests) equals what ``recorded`` (a JSON file of case -> digests)
    holds for ``case``; with ``$SCHEDLAB_RECORD_DIGESTS=1``, write ``found`` there instead and skip (for a
    change meant to alter results: say so in its commit). Writers lock the file, so parallel workers
    may record at once."""
    import fcntl
    import json
    import os
    import tempfile

    if os.environ.get(RECORD_DIGESTS) != "1":
        digests = json.loads(recorded.read_text())
        assert case in digests, f"{case}: nothing recorded in {recorded.name} (record it: {RECORD_DIGESTS}=1)"
        assert found == digests[case], f"{case}: the result differs from the recorded one in {recorded.name}"
        return
    recorded.parent.mkdir(parents=True, exist_ok=True)
    with open(Path(tempfile.gettempdir()) / f"schedlab-digests-{recorded.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digests = json.loads(recorded.read_text()) if recorded.exists() else {}
        digests[case] = found
        recorded.write_text(json.dumps(dict(sorted(digests.items())), indent=1) + "\n")
    pytest.skip(f"recorded {case} in {recorded}")


#: a FIFO policy as the text of a policy file (``path.py:Class``): tests append the subclasses they plant,
#: a policy that loops, exits or raises (``self.calls`` counts its ``schedule`` calls)
FIFO_SOURCE = '''
import os
import sys

from pydantic import BaseModel

from schedlab.sched.api import Policy


class Fifo(Policy):
    def __init__(self, params=None):
        super().__init__(params)
        self.queue, self.calls = [], 0

    def on_arrival(self, engine, job):
        self.queue.append(job)

    def schedule(self, engine):
        self.calls += 1
        while self.queue and engine.start(self.queue[0]):
            self.queue.pop(0)
'''

#: policies planted after :data:`FIFO_SOURCE` in a policy file: one whose ``schedule`` never returns from
#: its fourth call on, one that ``sys.exit``\ s, one that sleeps 10 ms a decision (slow, using no core)
PLANTED = {
    "Loops": '''
class Loops(Fifo):
    name = "loops"

    def schedule(self, engine):
        super().schedule(engine)
        while self.calls > 3:
            pass
''',
    "SysExit": '''
class SysExit(Fifo):
    name = "sysexit"

    def schedule(self, engine):
        sys.exit(0)
''',
    "Unhurried": '''
import time


class Unhurried(Fifo):
    name = "unhurried"

    def schedule(self, engine):
        time.sleep(0.01)
        super().schedule(engine)
''',
}


def policy_source(*planted: str, extra: str = "") -> str:
    """The text of a policy file: :data:`FIFO_SOURCE`, the :data:`PLANTED` policies named, then ``extra``."""
    return FIFO_SOURCE + "".join("\n" + PLANTED[name] for name in planted) + extra
