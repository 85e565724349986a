"""Experiments as real ``schedlab experiment`` processes sharing one ``$SCHEDLAB_HOME`` (issue 13):
two at once log every replay exactly once and retire nothing the other owns; a SIGKILLed one
leaves no Prefect flow run RUNNING once the experiment is run again; on an existing Dask cluster
every log reaches the flow's Prefect API before it stops."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from schedlab.tasks import tracking
from schedlab.tasks.tracking import KEY_TAG

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

CONFIG = """\
    name: {name}
    seeds: [0]
    traces: [{{name: syn, options: {{num_jobs: {jobs}, load: 4.0}}}}]
    clusters: [castor-sim]
    policies: [fifo, tiresias]
    figures: false
    """


def experiment(home: Path, config: Path, *options: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``schedlab experiment CONFIG OPTIONS`` (default ``--workers 1``) in a session of its own (so that all it started
    can be cleaned up)."""
    import schedlab

    root = str(Path(schedlab.__file__).resolve().parent.parent)
    env = {**os.environ, **(env or {}), "SCHEDLAB_HOME": str(home), "SCHEDLAB_CODE_VERSION": "test",
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    for name in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "PREFECT_HOME"):
        env.pop(name, None)
    return subprocess.Popen([sys.executable, "-m", "schedlab.cli", "experiment", str(config),
                             *(options or ("--workers", "1"))],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def replay_runs(home: Path, name: str) -> list:
    from mlflow.entities import ViewType

    c = tracking.client(f"sqlite:///{home / 'mlflow.db'}")
    exp = c.get_experiment_by_name(name)
    runs = c.search_runs([exp.experiment_id], run_view_type=ViewType.ALL, max_results=1000)
    return [r for r in runs if r.data.tags.get("schedlab.kind") == "replay"]


def query(db: Path, sql: str) -> list[tuple]:
    """Read a sqlite database another process is writing (plain sqlite, read-only)."""
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)) as con:
            return con.execute(sql).fetchall()
    except sqlite3.Error:
        return []


def lock_holder(home: Path) -> int | None:
    """The pid an experiment lock under ``home`` names (``tasks.locks.file_lock`` writes it once it holds
    the flock and empties the file before letting go); read, never locked here, so that no experiment
    ever finds the lock taken by this test."""
    for path in (home / "locks").glob("experiment-*.lock"):
        with contextlib.suppress(OSError, ValueError):  # empty, or being written
            return int(json.loads(path.read_text())["pid"])
    return None


def test_two_runs_of_one_experiment_at_once_log_each_replay_exactly_once(tmp_path, seed_home):
    """Both runs start at once (their start-ups overlap); the one that takes the experiment's lock
    first is paused with SIGSTOP while it holds it, until the other says it waits for it, so the overlap
    does not depend on the machine's speed (a small trace will do)."""
    home = seed_home(tmp_path / "home")
    config = tmp_path / "exp.yaml"
    config.write_text(textwrap.dedent(CONFIG.format(name="twice", jobs=300)))
    procs = [experiment(home, config), experiment(home, config)]
    output: dict[int, list[str]] = {p.pid: [] for p in procs}
    readers = [threading.Thread(target=lambda p=p: output[p.pid].extend(p.stdout), daemon=True) for p in procs]
    for reader in readers:
        reader.start()
    try:
        deadline = time.monotonic() + 300
        while (holder := lock_holder(home)) is None:
            assert all(p.poll() is None for p in procs) and time.monotonic() < deadline, "no run held the lock"
            time.sleep(0.02)
        [first] = [p for p in procs if p.pid == holder]
        [second] = [p for p in procs if p.pid != holder]
        os.killpg(first.pid, signal.SIGSTOP)
        lines = output[second.pid]
        while not any("is being run by pid" in line for line in lines):
            assert second.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGCONT)
        for p in procs:
            p.wait(timeout=540)
        for reader in readers:
            reader.join(timeout=60)
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGCONT)
            kill_group(p)
    out_first = "".join(output[first.pid])
    out_second = "".join(lines)
    assert first.returncode == 0, out_first[-3000:]
    assert second.returncode == 0, out_second[-3000:]
    # the second waited for the first, then found every replay logged
    assert "is being run by pid" not in out_first
    assert "(0 run now, 2 logged before, 0 failed)" in out_second, out_second[-3000:]

    runs = replay_runs(home, "twice")
    keys = [r.data.tags[KEY_TAG] for r in runs]
    assert len(runs) == 2 and len(set(keys)) == 2  # one run per key, none retired or deleted
    assert all(r.info.status == "FINISHED" and r.info.lifecycle_stage == "active" for r in runs)


def test_a_killed_experiment_leaves_no_flow_run_running(tmp_path, seed_home):
    home = seed_home(tmp_path / "home")
    config = tmp_path / "exp.yaml"
    config.write_text(textwrap.dedent(CONFIG.format(name="killed", jobs=6000)))
    prefect_db, mlflow_db = home / "prefect" / "prefect.db", home / "mlflow.db"
    first = experiment(home, config)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:
            running = query(mlflow_db, "SELECT run_uuid FROM runs WHERE status = 'RUNNING' AND name LIKE '%seed%'")
            if running:
                break
            time.sleep(0.2)
        assert first.poll() is None and running, "no replay started"
        os.kill(first.pid, signal.SIGKILL)  # the experiment process, mid-replay
        first.wait(timeout=30)
    finally:
        kill_group(first)  # what it started (its Dask worker, its Prefect server)
    flow_runs = "SELECT id, state_type, tags FROM flow_run"
    left = [row for row in query(prefect_db, flow_runs) if row[1] == "RUNNING"]
    assert len(left) == 1  # the killed experiment's flow run, RUNNING for ever until the next run

    again = experiment(home, config)
    try:
        out = again.communicate(timeout=400)[0]
    finally:
        kill_group(again)
    assert again.returncode == 0, out[-3000:]
    assert "was left running by a killed process: marked CRASHED" in out
    states = {row[0]: row[1] for row in query(prefect_db, flow_runs)}
    assert states[left[0][0]] == "CRASHED" and list(states.values()).count("COMPLETED") == 1
    assert "RUNNING" not in states.values()
    tasks = query(prefect_db, f"SELECT state_type FROM task_run WHERE flow_run_id = '{left[0][0]}'")
    assert all(state != "RUNNING" for (state,) in tasks)
    tags = json.loads(next(row[2] for row in query(prefect_db, flow_runs) if row[0] == left[0][0]))
    assert any(t.startswith("schedlab.owner:") for t in tags)

    runs = replay_runs(home, "killed")
    finished = [r for r in runs if r.info.status == "FINISHED" and r.info.lifecycle_stage == "active"]
    assert len(finished) == 2 and len({r.data.tags[KEY_TAG] for r in finished}) == 2
    assert all(r.info.status != "RUNNING" for r in runs)


def test_experiment_on_an_existing_dask_cluster_sends_every_log_before_its_api_stops(tmp_path, seed_home):
    """``--dask-address`` (a `dask scheduler` and a `dask worker` of their own): the workers' task
    logs and the flow's last logs reach the flow's Prefect API before it stops; before, the
    driver retried them against the stopped server at exit ("Error logging to API", ~80 s)."""
    import schedlab

    root = str(Path(schedlab.__file__).resolve().parent.parent)
    # logs go to the API in batches: one per minute here, so that none is sent on its own before the
    # flow's API stops (deterministically what a 2 s batch meets when the flow ends right after a log)
    batch = {"PREFECT_LOGGING_TO_API_BATCH_INTERVAL": "60"}
    env = {**os.environ, **batch, "SCHEDLAB_HOME": str(tmp_path / "worker-home"),
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    bin_dir = Path(sys.executable).parent
    cluster = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                 "--no-dashboard"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)]
    try:
        cluster.append(subprocess.Popen([str(bin_dir / "dask"), "worker", address, "--nthreads", "1", "--no-dashboard"],
                                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True))
        home = seed_home(tmp_path / "home")
        config = tmp_path / "exp.yaml"
        config.write_text(textwrap.dedent("""\
            name: remote
            traces: [{name: syn, options: {num_jobs: 300}}]
            clusters: [4x8]
            policies: [fifo, sjf]
            figures: false
            """))
        proc = experiment(home, config, "--dask-address", address, env=batch)
        try:
            out = proc.communicate(timeout=400)[0]
        finally:
            kill_group(proc)
        assert proc.returncode == 0, out[-3000:]
        assert "Error logging to API" not in out
        logs = [m for (m,) in query(home / "prefect" / "prefect.db", "SELECT message FROM log")]
        assert sum("Finished in state Completed()" in m for m in logs) == 3  # two task runs (workers) + the flow
    finally:
        for p in cluster:
            kill_group(p)
