"""The comparison as it happens (issue #29) with real processes: ``schedlab experiment`` interrupted
with Ctrl-C (SIGINT to its process group, as a terminal sends it) leaves no MLflow run RUNNING and
prints no Dask warning; every link it prints uses the port ``schedlab ui`` serves; the parent run's
policy rows and ``comparison.md`` are there while replays are still running."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from helpers import policy_source

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]


def experiment(home: Path, config: Path, *options: str) -> subprocess.Popen:
    """``schedlab experiment CONFIG --workers 1 OPTIONS`` in a session of its own: its process group
    is what a terminal's Ctrl-C reaches."""
    import schedlab

    root = str(Path(schedlab.__file__).resolve().parent.parent)
    env = {**os.environ, "SCHEDLAB_HOME": str(home), "SCHEDLAB_CODE_VERSION": "test",
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    for name in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "PREFECT_HOME"):
        env.pop(name, None)
    return subprocess.Popen([sys.executable, "-m", "schedlab.cli", "experiment", str(config), "--workers", "1", *options],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


class Output:
    """A process's output, read in the background (lines as they come)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=lambda: self.lines.extend(proc.stdout), daemon=True)
        self.thread.start()

    def wait_for(self, proc: subprocess.Popen, pattern: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not any(re.search(pattern, line) for line in self.lines):
            assert proc.poll() is None and time.monotonic() < deadline, self.text()[-4000:]
            time.sleep(0.1)

    def text(self) -> str:
        return "".join(self.lines)


def query(db: Path, sql: str) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
        return con.execute(sql).fetchall()


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def test_ctrl_c_marks_the_unfinished_runs_killed_and_prints_no_dask_warning(tmp_path, seed_home):
    """A small trace finishes first (each on its own worker); Ctrl-C comes while the large one replays: the
    comparison run and that replay end KILLED, the finished replay stays FINISHED, and a re-run resumes
    from it. The policy (FIFO that sleeps 10 ms a decision) makes the large replay last minutes without
    using a core (on a loaded machine the second worker's start-up and the small replay took 50 s)."""
    home = seed_home(tmp_path / "home")
    (tmp_path / "slow.py").write_text(policy_source("Unhurried"))
    config = tmp_path / "exp.yaml"
    config.write_text(textwrap.dedent("""\
        name: interrupted
        traces:
          - {name: small, options: {num_jobs: 100}}
          - {name: large, options: {num_jobs: 20000}}
        clusters: [castor-sim]
        policies: ["slow.py:Unhurried"]
        figures: false
        """))
    # two workers: with one, which replay runs first is Dask's choice among equal-cost tasks (the large one
    # first left nothing to interrupt); with two, the replays wait for both workers' warm-up (else both
    # went to the first warm worker, and the small one waited for the large one)
    proc = experiment(home, config, "--workers", "2")
    out = Output(proc)
    try:
        out.wait_for(proc, r"\[1/2\] unhurried \| small")
        db = home / "mlflow.db"
        deadline = time.monotonic() + 60
        while not query(db, "SELECT run_uuid FROM runs WHERE status = 'RUNNING' AND name LIKE 'unhurried | large%'"):
            assert time.monotonic() < deadline, "the large replay never started"
            time.sleep(0.1)
        # while the large replay runs, the comparison is already in the store: the shared view, a
        # policy row with its metric, comparison.md on the parent run
        policy_rows = ("SELECT r.name FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid JOIN latest_metrics m"
                       " ON m.run_uuid = r.run_uuid WHERE t.key = 'schedlab.kind' AND t.value = 'policy'"
                       " AND m.key = 'avg_jct_s'")
        while not query(db, policy_rows):
            assert time.monotonic() < deadline, "no policy row while the experiment runs"
            time.sleep(0.1)
        assert query(db, policy_rows) == [("unhurried | small | castor-sim (mean of 1 seed)",)]
        assert query(db, "SELECT key FROM experiment_tags WHERE key = 'mlflow.sharedViewState.schedlab-comparison'")
        (parent,) = query(db, "SELECT artifact_uri FROM runs WHERE name = 'interrupted (comparison)'")[0]
        markdown = Path(parent.removeprefix("file://")) / "comparison.md"
        while "1 of 2 replays finished" not in markdown.read_text():  # written right after the policy rows
            assert time.monotonic() < deadline, markdown.read_text()
            time.sleep(0.1)
        assert "| small | castor-sim | 1 | unhurried | 1 | 1/0/0 |" in markdown.read_text()  # (trace, cluster, #, policy)
        assert re.search(r"\| large \| castor-sim \| 1 \| unhurried \| 0 \| 0/[01]/[01] \|", markdown.read_text())
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at the terminal
        assert proc.wait(timeout=120) == 130
        out.thread.join(timeout=30)
    finally:
        kill_group(proc)
    text = out.text()
    statuses = dict(query(db, "SELECT name, status FROM runs"))
    assert "RUNNING" not in statuses.values(), statuses
    assert statuses["interrupted (comparison)"] == "KILLED"
    assert statuses["unhurried | small | castor-sim | seed 0"] == "FINISHED"
    assert statuses["unhurried | large | castor-sim | seed 0"] == "KILLED"
    assert "1 replay run(s) in flight marked KILLED" in text and "schedlab experiment: interrupted" in text
    # (the local scheduler takes a free port: a test beside this one holding 8787 prints no warning either)
    for noise in ("distributed.", "leaked semaphore", "Traceback", "CancelledError", "Error logging to API"):
        assert noise not in text, text[-4000:]

    # running it again resumes (the small replay is not run again); interrupted again, it is as clean
    again = experiment(home, config)
    out = Output(again)
    try:
        out.wait_for(again, r"2 replays; 1 already logged, 1 to run")
        deadline = time.monotonic() + 60
        while not query(db, "SELECT run_uuid FROM runs WHERE status = 'RUNNING' AND name LIKE 'unhurried | large%'"):
            assert time.monotonic() < deadline, "the large replay never started again"
            time.sleep(0.1)
        os.killpg(again.pid, signal.SIGINT)
        assert again.wait(timeout=120) == 130
    finally:
        kill_group(again)
    assert "RUNNING" not in dict(query(db, "SELECT name, status FROM runs")).values()
    assert len(query(db, "SELECT run_uuid FROM runs WHERE name = 'unhurried | small | castor-sim | seed 0'")) == 1


def test_links_use_the_port_schedlab_ui_serves_and_the_view_exists_from_the_start(tmp_path, seed_home):
    """``schedlab ui --port P`` records P; an experiment then prints no link on any other port (nor one
    to its temporary Prefect server), and its shared view and policy rows exist while it runs."""
    from tests.test_flows_ui import free_port, ui_process, wait_healthy

    home = seed_home(tmp_path / "home")
    port = free_port()
    ui = ui_process(home, port)
    try:
        wait_healthy(ui, port)
        assert (home / "ui.json").exists()
        config = tmp_path / "exp.yaml"
        config.write_text(textwrap.dedent("""\
            name: links
            seeds: [0]
            traces: [{name: syn, options: {num_jobs: 200}}]
            clusters: [4x8]
            policies: [fifo, {name: tiresias, params: {promote_knob: 4}}]
            figures: false
            """))
        proc = experiment(home, config, "--table-every", "1", "--rank-by", "avg_jct_s")
        try:
            text = proc.communicate(timeout=400)[0]
        finally:
            kill_group(proc)
        assert proc.returncode == 0, text[-3000:]
        with urllib_open(f"http://127.0.0.1:{port}/health") as response:
            assert response.status == 200
    finally:
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=60)
    links = re.findall(r"https?://[^\s)`'\"]+", text)
    base = f"http://127.0.0.1:{port}"
    assert links and all(link == base or link.startswith(base + "/") for link in links), links
    assert "View at" not in text and "temporary server" not in text
    assert f"`schedlab ui --port {port}`" in text
    # the table while running: ranked, with progress, knobs
    assert "1 of 2 replays finished, best first by avg_jct_s" in text
    assert re.search(r"tiresias .*promote_knob=4\.0", text) and "done/running/queued" in text


def urllib_open(url: str):
    import urllib.request

    return urllib.request.urlopen(url, timeout=10)  # noqa: S310 - the test's own server
