"""Experiments as real ``schedlab experiment`` processes sharing one ``$SCHEDLAB_HOME`` (issue 13):
two at once log every replay exactly once and retire nothing the other owns."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from schedlab.tasks import tracking
from schedlab.tasks.tracking import KEY_TAG

pytestmark = pytest.mark.timeout(600)

CONFIG = """\
    name: {name}
    seeds: [0, 1]
    traces: [{{name: syn, options: {{num_jobs: {jobs}, load: 4.0}}}}]
    clusters: [castor-sim]
    policies: [fifo, tiresias]
    """


def experiment(home: Path, config: Path) -> subprocess.Popen:
    """``schedlab experiment CONFIG --workers 1`` in a session of its own (so that all it started
    can be cleaned up)."""
    import schedlab

    root = str(Path(schedlab.__file__).resolve().parent.parent)
    env = {**os.environ, "SCHEDLAB_HOME": str(home), "SCHEDLAB_CODE_VERSION": "test",
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    for name in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "PREFECT_HOME"):
        env.pop(name, None)
    return subprocess.Popen([sys.executable, "-m", "schedlab.cli", "experiment", str(config), "--workers", "1"],
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


def test_two_runs_of_one_experiment_at_once_log_each_replay_exactly_once(tmp_path):
    home = tmp_path / "home"
    config = tmp_path / "exp.yaml"
    config.write_text(textwrap.dedent(CONFIG.format(name="twice", jobs=6000)))
    procs = [experiment(home, config) for _ in range(2)]
    try:
        outputs = [p.communicate(timeout=540)[0] for p in procs]
    finally:
        for p in procs:
            kill_group(p)
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    # they did overlap: one waited for the other, then found every replay logged
    waited = [out for out in outputs if "is being run by pid" in out]
    assert len(waited) == 1, outputs
    assert "(0 run now, 4 logged before, 0 failed)" in waited[0]

    runs = replay_runs(home, "twice")
    keys = [r.data.tags[KEY_TAG] for r in runs]
    assert len(runs) == 4 and len(set(keys)) == 4  # one run per key, none retired or deleted
    assert all(r.info.status == "FINISHED" and r.info.lifecycle_stage == "active" for r in runs)
