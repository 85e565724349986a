"""``schedlab status`` (issue #29 §3) on a real sqlite MLflow store and a real Prefect test API: counts
per experiment, runs left RUNNING by a dead process (and ``--mark-killed``), a running experiment's
runs left alone, the deployments' cron and next run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from schedlab.flows import lifecycle
from schedlab.tasks import tracking
from schedlab.tasks.locks import file_lock
from schedlab.tasks.tracking import KIND_TAG, OWNER_TAG, PARENT_TAG

pytestmark = pytest.mark.timeout(240)


@pytest.fixture()
def home(tmp_path, monkeypatch, seed_home):
    monkeypatch.setenv("SCHEDLAB_HOME", str(seed_home(tmp_path / "home", prefect=False)))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path / "home"


def dead_owner() -> str:
    import socket

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return f"{socket.gethostname()}:{proc.pid}"


def experiment_with_runs(uri: str, name: str, replays: int, statuses: list[str]) -> tuple[str, list[str]]:
    """A comparison run (RUNNING, ``replays`` in its grid) and replay runs of the given statuses, the
    RUNNING ones owned by a process that has exited."""
    from mlflow.entities import Param

    tracking.check_tracking(uri)
    c = tracking.client(uri)
    exp = tracking.ensure_experiment(uri, name, None)
    parent = c.create_run(exp, run_name=f"{name} (comparison)", tags={KIND_TAG: "experiment"}).info.run_id
    c.log_batch(parent, params=[Param("replays", str(replays))])
    ids = []
    for i, status in enumerate(statuses):
        run = c.create_run(exp, run_name=f"r{i}", tags={KIND_TAG: "replay", PARENT_TAG: parent, OWNER_TAG: dead_owner()})
        if status != "RUNNING":
            c.set_terminated(run.info.run_id, status=status)
        ids.append(run.info.run_id)
    return parent, ids


def test_status_counts_stale_runs_and_marks_them_killed(home, capsys, monkeypatch):
    from schedlab import settings
    from schedlab.cli import main

    from prefect.settings import PREFECT_API_URL, temporary_settings

    uri = settings.tracking_uri()
    parent, ids = experiment_with_runs(uri, "crashed", 4, ["FINISHED", "RUNNING", "FAILED"])
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):  # whatever API another test set up
        assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert f"tracking store: {uri}" in out and f"artifact root:  {home / 'mlartifacts'}" in out
    row = next(line for line in out.splitlines() if line.startswith("crashed "))
    assert row.split()[3:] == ["RUNNING", "1", "0", "1", "0"]  # done, running (none alive), failed, queued
    assert "2 run(s) left RUNNING by a process that is gone (--mark-killed ends them)" in out
    assert parent in out and ids[1] in out
    assert "schedules: none (no Prefect server configured" in out

    assert main(["status", "--mark-killed"]) == 0
    assert "2 run(s) marked KILLED" in capsys.readouterr().out
    c = tracking.client(uri)
    assert c.get_run(parent).info.status == "KILLED" and c.get_run(ids[1]).info.status == "KILLED"
    assert c.get_run(ids[0]).info.status == "FINISHED"
    main(["status"])
    assert "left RUNNING" not in capsys.readouterr().out


def test_status_leaves_a_running_experiment_alone(home, capsys):
    from schedlab import settings
    from schedlab.cli import main

    uri = settings.tracking_uri()
    parent, _ = experiment_with_runs(uri, "busy", 3, ["FINISHED"])
    with file_lock(lifecycle.lock_path(uri, "busy"), what="test"):  # as the experiment flow holds it
        assert main(["status", "--mark-killed"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("busy "))
    assert row.split()[3:] == ["RUNNING", "1", "0", "0", "2", "(running", "now)"]
    assert "KILLED" not in out and tracking.client(uri).get_run(parent).info.status == "RUNNING"


@pytest.mark.slow
def test_status_shows_each_deployment_cron_and_next_run(home, prefect_harness):
    from prefect import flow

    from schedlab.flows.status import schedules

    @flow(name="status-probe")
    def probe() -> None:
        return None

    probe.to_deployment(name="nightly-probe", cron="0 2 * * *").apply()
    lines = schedules()
    line = next(line for line in lines if line.startswith("nightly-probe: "))
    assert "cron '0 2 * * *' (UTC), next run " in line and " 02:00 " in line


def test_ui_names_the_newest_comparison(home):
    """``schedlab ui`` prints (``--open`` opens) the comparison view of the experiment whose comparison
    run started last, on the address the UI serves."""
    import time

    from schedlab import settings
    from schedlab.cli.ui import newest_comparison

    uri = settings.tracking_uri()
    tracking.check_tracking(uri)
    assert newest_comparison(uri) is None
    experiment_with_runs(uri, "older", 1, [])
    time.sleep(0.01)
    experiment_with_runs(uri, "newer", 1, [])
    settings.record_ui("127.0.0.1", 5077)
    newest = newest_comparison(uri)
    exp = tracking.client(uri).get_experiment_by_name("newer")
    assert newest["name"] == "newer (comparison)" and newest["status"] == "RUNNING"
    assert newest["url"].startswith(f"http://127.0.0.1:5077/#/experiments/{exp.experiment_id}/runs?")


@pytest.mark.slow
def test_ui_open_opens_the_newest_comparison_once_it_answers(home, tmp_path):
    """``schedlab ui --open``: the browser ($BROWSER, here a command writing the URL to a file) gets the
    newest comparison's link once the UI answers."""
    import os
    import signal
    import time

    from schedlab import settings
    from tests.test_flows_ui import free_port

    uri = settings.tracking_uri()
    experiment_with_runs(uri, "opened", 1, [])
    port = free_port()
    opened = tmp_path / "opened.txt"
    root = str(__import__("pathlib").Path(__file__).resolve().parents[1].parent)
    env = {**os.environ, "SCHEDLAB_HOME": str(home), "BROWSER": f"sh -c 'echo \"$0\" > {opened}' %s",
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "ui", "--port", str(port), "--open"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 180
        while not (opened.exists() and opened.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, "nothing was opened"
            time.sleep(0.2)
        exp = tracking.client(uri).get_experiment_by_name("opened")
        assert opened.read_text().strip().startswith(f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs?")
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    assert "newest comparison: opened (comparison)" in out


def test_a_replay_reports_its_jobs_done_with_its_lease(tmp_path, seed_home):
    """The worker side of "replays in flight": the engine's progress reaches the run's tags."""
    import time

    from schedlab.tasks.replay import JobsDone, execute
    from schedlab.sched.spec import load_config

    path = tmp_path / "exp.yaml"
    path.write_text("name: p\ntraces: [{name: syn, options: {num_jobs: 3500}}]\nclusters: [4x8]\npolicies: [fifo]\n")
    (spec,) = load_config(path).grid("test")
    progress = JobsDone()
    calls = []
    execute(spec, lambda done, total: (calls.append(done), progress.update(done, total)))
    assert calls == [1000, 2000, 3000] and progress.text() == "3,000/3,500 jobs"

    uri = f"sqlite:///{seed_home(tmp_path, prefect=False) / 'mlflow.db'}"
    tracking.check_tracking(uri)
    run = tracking.client(uri).create_run(tracking.ensure_experiment(uri, "p", tmp_path / "art"))
    end = tracking.start_lease(uri, run.info.run_id, progress.text, every=0.05)
    try:
        deadline = time.monotonic() + 30
        while tracking.client(uri).get_run(run.info.run_id).data.tags.get(tracking.PROGRESS_TAG) != "3,000/3,500 jobs":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        end()
