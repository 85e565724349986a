"""A policy that fails its replay, ends its process or never returns: ``replay`` says which policy, how and
where, finishes the other policies (their results and ``comparison.csv`` written, their MLflow runs
FINISHED), marks the failed one's run FAILED and exits 1; a ``--time-limit`` stops a replay that runs
past it; a ``KeyboardInterrupt`` the policy raises is its failure, a Ctrl-C the user's (exit 130)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from helpers import FIFO_SOURCE, cli_env, policy_source, run_cli

POLICIES = {
    "sysexit": policy_source("SysExit"),
    "raises": FIFO_SOURCE + '''

class Raises(Fifo):
    name = "raises"

    def schedule(self, engine):
        super().schedule(engine)
        if self.calls == 3:
            {}["no such key"]
''',
    "interrupts": FIFO_SOURCE + '''

class Interrupts(Fifo):
    name = "interrupts"

    def schedule(self, engine):
        raise KeyboardInterrupt
''',
    "loops": policy_source("Loops"),
    "ends": FIFO_SOURCE + '''

class Ends(Fifo):
    name = "ends"

    def schedule(self, engine):
        os._exit(0)
''',
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name, text in POLICIES.items():
        (tmp_path / f"{name}.py").write_text(text)
    return tmp_path


def replay(folder: Path, policy: str, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess:
    args = ["replay", "--policy", "fifo", policy, "sjf", "--num-jobs", "40", "--load", "4", "--cluster", "2x4",
            "--no-progress", "--out", str(folder / "out"), *extra]
    return run_cli(args, cli_env(folder / "home"), folder, timeout=timeout)


def assert_others_finished(folder: Path, failed: str) -> None:
    out = folder / "out"
    comparison = pd.read_csv(out / "comparison.csv")
    assert sorted(comparison["policy"]) == ["fifo", "sjf"]
    for label in ("fifo", "sjf"):
        assert json.loads((out / label / "summary.json").read_text())["jobs"] == 40
    assert not (out / failed / "summary.json").exists()


@pytest.mark.parametrize("policy, label, how", [
    ("sysexit.py:SysExit", "sysexit", r"SystemExit\(0\) \(raised at .*sysexit.py:\d+, in schedule\)"),
    ("raises.py:Raises", "raises", r"KeyError: 'no such key' \(raised at .*raises.py:\d+, in schedule\)"),
    ("interrupts.py:Interrupts", "interrupts", r"KeyboardInterrupt\(\) \(raised at .*interrupts.py:\d+, in schedule\)"),
    ("ends.py:Ends", "ends", r"the process running the replay exited with status 0 in schedule \(t=0\)"),
])
def test_a_failing_policy_is_named_and_the_others_finish(folder: Path, policy: str, label: str, how: str) -> None:
    import re

    done = replay(folder, policy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert re.search(rf"policy {label} failed: {how}", done.stderr), done.stderr
    assert "fifo" in done.stdout and "sjf" in done.stdout and f"{label}: FAILED" in done.stdout
    assert_others_finished(folder, label)


@pytest.mark.slow
def test_with_track_the_failed_run_is_failed_and_the_others_finished(folder: Path) -> None:
    done = replay(folder, "sysexit.py:SysExit", "--track")
    assert done.returncode == 1, done.stdout + done.stderr
    assert_others_finished(folder, "sysexit")
    from schedlab.tasks import tracking

    client = tracking.client(f"sqlite:///{folder / 'home' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("replay")
    runs = {r.data.params.get("policy"): r for r in client.search_runs([experiment.experiment_id])}
    statuses = {name: run.info.status for name, run in runs.items()}
    assert statuses.pop(None) == "FAILED"  # the parent: one of its policies failed
    assert statuses.pop("fifo") == "FINISHED" and statuses.pop("sjf") == "FINISHED"
    [(name, status)] = statuses.items()
    assert name == "sysexit" and status == "FAILED"
    assert runs[name].data.tags["schedlab.error"].startswith("SystemExit(0) (raised at")


@pytest.mark.slow
def test_time_limit_stops_a_replay_that_never_returns(folder: Path) -> None:
    done = replay(folder, "loops.py:Loops", "--time-limit", "5")
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("policy loops failed: stopped at the time limit of 5 s (--time-limit):"
            " schedule had been running for") in done.stderr
    assert_others_finished(folder, "loops")


@pytest.mark.parametrize("value, message", [("0", "must be > 0"), ("inf", "must be a finite number"),
                                            ("x", "expected a number")])
def test_time_limit_is_checked(folder: Path, value: str, message: str) -> None:
    done = replay(folder, "loops.py:Loops", "--time-limit", value)
    assert done.returncode == 2 and f"argument --time-limit: {message}" in done.stderr


@pytest.mark.slow
def test_ctrl_c_during_a_looping_replay_is_the_users_interrupt(folder: Path) -> None:
    args = [sys.executable, "-m", "schedlab.cli", "replay", "--policy", "loops.py:Loops", "--num-jobs", "40",
            "--no-progress", "--out", str(folder / "out")]
    process = subprocess.Popen(args, env=cli_env(folder / "home"), cwd=folder, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(8)  # past loading the trace: the replay's child is in its loop
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, out + err
    assert "failed" not in err and "Traceback" not in err
