"""Where the commands write (issue #30): every sub-command, run for real from an empty folder with only
``$SCHEDLAB_HOME`` set, writes nothing but into ``$SCHEDLAB_HOME`` and ``--out``, whatever names the
experiment, its traces and policies carry; the README's loop (profile -> fit -> replay with
``models:/…``) works there; an experiment's workers' last logs reach Prefect, and nothing is left unawaited.

One sandbox serves the module: ``box/home`` ($SCHEDLAB_HOME), ``box/cwd`` (the empty current folder),
``box/out`` (every ``--out``); names such as ``../../../escaped-exp`` would land in ``tmp_path`` itself.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest
from helpers import FIXTURES, cli_env, run_cli

pytestmark = pytest.mark.timeout(900)

TINY_SWEEP = FIXTURES / "flows" / "tiny-sweep.yaml"  # ncf at 2 batch sizes, solo and as pairs
#: names that would point outside $SCHEDLAB_HOME if they became paths as they are
EXPERIMENT = "../../../escaped-exp"
REPLAY_EXPERIMENT = "../../../escaped-replay"
TRACE, LABEL = "../../escaped-trace", "../../escaped-label"
EXPERIMENT_YAML = f"""\
name: {EXPERIMENT}
seeds: [0]
traces:
  - {{name: "{TRACE}", format: synthetic, options: {{num_jobs: 30}}, annotate: true}}
clusters: ["2x4:cpu"]
policies: [fifo, {{name: sjf, label: "{LABEL}"}}]
models: {{iteration_time: "models:/iteration-time/1"}}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ui(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """``schedlab ui`` until it answers, then Ctrl-C."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "ui", "--port", str(port)], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> dict:
    """Every sub-command once, in order, from ``box/cwd``; name -> CompletedProcess, plus the paths."""
    root = tmp_path_factory.mktemp("footprint")
    box = root / "box"
    home, cwd, out, inputs = box / "home", box / "cwd", box / "out", root / "inputs"
    for folder in (cwd, inputs):
        folder.mkdir(parents=True)
    (inputs / "exp.yaml").write_text(EXPERIMENT_YAML)
    env = cli_env(home, SCHEDLAB_CODE_VERSION="footprint-test")
    runs: dict[str, subprocess.CompletedProcess] = {}

    def cli(name: str, *args: str, timeout: float = 300) -> None:
        runs[name] = run_cli(list(args), env, cwd, timeout=timeout)

    cli("policies", "policies")
    cli("replay-track", "replay", "--num-jobs", "20", "--policy", "fifo", "sjf", "--no-progress", "--out",
        str(out / "replay"), "--track", "--experiment", REPLAY_EXPERIMENT)
    cli("profile", "profile", "--sweep", str(TINY_SWEEP), "--no-progress")
    cli("fit-iteration-time", "fit", "iteration-time")
    cli("fit-interference", "fit", "interference")
    cli("replay-models", "replay", "--iteration-time", "models:/iteration-time/1",
        "--interference", "model:models:/interference-ratio/1", "--cluster", "2x4:cpu", "--annotate",
        "--num-jobs", "20", "--policy", "fifo", "sjf-ffs", "--no-progress", "--out", str(out / "fitted"))
    cli("experiment", "experiment", str(inputs / "exp.yaml"), "--workers", "1")
    cli("reproduce", "reproduce", str(inputs / "exp.yaml"), "--workers", "1")
    cli("end-to-end", "end-to-end", "--sweep", str(TINY_SWEEP), "--experiment", str(inputs / "exp.yaml"),
        "--workers", "1")
    cli("nightly", "nightly")  # no GPU worker here: exit 3, nothing profiled
    runs["serve"] = run_cli(["serve"], {**env, "PREFECT_API_URL": "http://127.0.0.1:9/api"}, cwd)
    runs["ui"] = _ui(env, cwd)
    return {"runs": runs, "root": root, "box": box, "home": home, "cwd": cwd, "out": out, "inputs": inputs}


EXPECTED_EXIT = {"nightly": 3, "serve": 2}  # every other command succeeds


def _check_exits(runs: dict[str, subprocess.CompletedProcess]) -> None:
    for name, run in runs.items():
        assert run.returncode == EXPECTED_EXIT.get(name, 0), f"{name}: {run.args}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"


@pytest.mark.slow
def test_every_command_runs(sandbox):
    _check_exits(sandbox["runs"])
    assert "no GPU worker" in sandbox["runs"]["nightly"].stderr
    assert "unreachable" in sandbox["runs"]["serve"].stderr


@pytest.mark.slow
def test_no_command_creates_files_in_the_current_folder(sandbox):
    assert sorted(p.name for p in sandbox["cwd"].iterdir()) == []


@pytest.mark.slow
def test_names_that_look_like_paths_stay_inside_home_and_out(sandbox):
    """Nothing beside box/ and the inputs, nothing in box/ but home/, cwd/, out/: the experiment
    name, trace name and policy label ``../…`` became contained folder and file names."""
    root, box, home = sandbox["root"], sandbox["box"], sandbox["home"]
    _check_exits(sandbox["runs"])
    assert sorted(p.name for p in root.iterdir()) == ["box", "inputs"]
    assert sorted(p.name for p in box.iterdir()) == ["cwd", "home", "out"]
    assert sorted(p.name for p in (root / "inputs").iterdir()) == ["exp.yaml"]
    escaped = [p for p in root.rglob("*escaped*") if home not in p.parents]
    assert escaped == []
    import mlflow

    c = mlflow.MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    for name in (EXPERIMENT, REPLAY_EXPERIMENT):
        location = Path(c.get_experiment_by_name(name).artifact_location.removeprefix("file://"))
        assert location.parent == home / "mlartifacts" and location.is_dir(), location
    plots = {p.name for p in (home / "mlartifacts").rglob("*.png")}
    assert any(n.startswith("jct_cdf__escaped-trace") for n in plots), sorted(plots)


@pytest.mark.slow
def test_the_readme_loop_works_with_schedlab_home_alone(sandbox):
    """profile -> fit -> replay ``--iteration-time models:/iteration-time/1`` with no MLFLOW_* set,
    from a folder that is not the project's: the registered model is found (in $SCHEDLAB_HOME's
    store, not a new ./mlflow.db), and used; Dask workers find it too (the experiment's replays)."""
    runs = sandbox["runs"]
    assert "registered models:/iteration-time/1" in runs["fit-iteration-time"].stdout
    replay = runs["replay-models"]
    assert replay.returncode == 0, replay.stderr[-3000:]
    summary = json.loads((sandbox["out"] / "fitted" / "fifo" / "summary.json").read_text())
    assert summary["load_report"]["iteration_time_fitted"] == ["ncf"]
    assert runs["experiment"].returncode == 0 and "0 failed" in runs["experiment"].stdout, runs["experiment"].stderr[-3000:]
    assert not (sandbox["cwd"] / "mlflow.db").exists()


@pytest.mark.slow
def test_an_experiment_drains_its_workers_logs(sandbox):
    """No ``coroutine … was never awaited`` from the log drain; the replay task's own log lines (sent
    from the Dask worker) are in Prefect's database."""
    for name in ("experiment", "reproduce", "end-to-end"):
        assert "never awaited" not in sandbox["runs"][name].stderr, sandbox["runs"][name].stderr[-3000:]
    with closing(sqlite3.connect(f"file:{sandbox['home'] / 'prefect' / 'prefect.db'}?mode=ro", uri=True)) as db:
        task_logs = db.execute("SELECT count(*) FROM log WHERE task_run_id IS NOT NULL").fetchone()[0]
    assert task_logs > 0


@pytest.mark.parametrize("name", ["../x", "..", ".", "", "/etc/passwd", "a/../../b", "x" * 300, "a\x00b", ".hidden",
                                  "~", "C:\\x", "tiresias[promote_knob=4]"])
def test_a_path_name_stays_in_its_folder(name):
    from schedlab.settings import path_name

    encoded = path_name(name)
    assert encoded and not encoded.startswith(".") and len(encoded) <= 100
    assert os.path.dirname(os.path.normpath(os.path.join("/base", encoded))) == "/base"
    assert path_name("castor-philly") == "castor-philly" and path_name("../x") != path_name("../../x")
