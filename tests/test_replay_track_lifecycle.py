"""``schedlab replay --track`` killed mid-way (issue #30): its runs exist from the start, a policy's run
is FINISHED exactly when its results are in ``--out``; SIGTERM ends the rest KILLED, SIGKILL leaves
them RUNNING with a dead owner; the next replay of the same configuration retires all of them."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import cli_env, run_cli

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

#: fifo is quick, tiresias takes seconds on 5000 jobs: a replay is caught between the two
REPLAY = ["replay", "--num-jobs", "5000", "--policy", "fifo", "tiresias", "--no-progress", "--track"]


def _statuses(db: Path) -> dict[str, str]:
    """schedlab.policy (or "parent") -> status of the runs not deleted, read with plain sqlite."""
    if not db.exists():
        return {}
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
        rows = con.execute(
            "SELECT COALESCE(t.value, 'parent'), r.status FROM runs r LEFT JOIN tags t"
            " ON t.run_uuid = r.run_uuid AND t.key = 'schedlab.policy' WHERE r.lifecycle_stage = 'active'").fetchall()
    return dict(rows)


def _stop_between_policies(args: list[str], env: dict[str, str], cwd: Path, sig: int, db: Path) -> dict[str, str]:
    """Run ``schedlab ARGS``; once fifo's run is FINISHED and tiresias' still RUNNING, send ``sig``."""
    proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", *args], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(sqlite3.Error):
                if _statuses(db) == {"parent": "RUNNING", "fifo": "FINISHED", "tiresias": "RUNNING"}:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, "the replay ended before it could be stopped between its policies"
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return _statuses(db)


def test_killed_tracked_replays_agree_with_out_and_a_rerun_retires_them(tmp_path, seed_home):
    import mlflow
    from mlflow.entities import ViewType

    home, out = seed_home(tmp_path / "home", prefect=False), tmp_path / "out"
    env, db = cli_env(home), home / "mlflow.db"
    args = [*REPLAY, "--out", str(out)]

    # SIGTERM: the policy not done is KILLED at once; fifo's results are on disk and FINISHED in MLflow
    assert _stop_between_policies(args, env, tmp_path, signal.SIGTERM, db) == {
        "parent": "KILLED", "fifo": "FINISHED", "tiresias": "KILLED"}
    assert (out / "fifo" / "summary.json").exists() and not (out / "tiresias" / "summary.json").exists()

    # SIGKILL: nothing can mark them; the replay of the same configuration retires them all
    assert _stop_between_policies([*args, "--overwrite"], env, tmp_path, signal.SIGKILL, db) == {
        "parent": "RUNNING", "fifo": "FINISHED", "tiresias": "RUNNING"}
    done = run_cli([*args, "--overwrite"], env, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _statuses(db) == {"parent": "FINISHED", "fifo": "FINISHED", "tiresias": "FINISHED"}

    c = mlflow.MlflowClient(tracking_uri=f"sqlite:///{db}")
    runs = c.search_runs([c.get_experiment_by_name("replay").experiment_id], run_view_type=ViewType.ALL)
    assert len(runs) == 9  # three attempts of three runs; the two earlier ones retired
    key = {r.info.run_id: r.data.tags["schedlab.key"] for r in runs}
    for run in runs:
        assert run.data.tags["schedlab.out"] == str(out)
        if run.info.lifecycle_stage == "deleted":  # replaced by a later run of the same configuration
            assert key[run.data.tags["schedlab.superseded_by"]] == key[run.info.run_id]
            assert run.info.status in ("FINISHED", "KILLED")  # those left RUNNING ended KILLED
    assert sum(r.info.lifecycle_stage == "active" for r in runs) == 3
