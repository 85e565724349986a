"""Configuration without environment mutation (issue #27 item 4): importing schedlab's flows and tasks
changes nothing; the entry point builds :class:`~schedlab.settings.Settings` and applies it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cli_env

from schedlab.settings import HomeError, Settings, environ

IMPORTS = ["schedlab.flows", "schedlab.tasks", "schedlab.tasks.replay", "schedlab.tasks.fit", "schedlab.tasks.tracking",
           "schedlab.flows.experiment", "schedlab.flows.nightly", "schedlab.flows.serve", "schedlab.cli"]

CHILD = """
import importlib, json, os, sys
before = dict(os.environ)
for name in sys.argv[1:]:
    importlib.import_module(name)
after = dict(os.environ)
print(json.dumps({k: [before.get(k), after.get(k)] for k in set(before) | set(after) if before.get(k) != after.get(k)}))
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_importing_flows_and_tasks_leaves_the_environment_unchanged(tmp_path):
    env = cli_env(tmp_path / "home")
    for key in ("PREFECT_HOME", "DASK_LOGGING__DISTRIBUTED", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"):
        env.pop(key, None)
    run = subprocess.run([sys.executable, "-c", CHILD, *IMPORTS], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    changed = json.loads(run.stdout.strip().splitlines()[-1])
    ours = {k: v for k, v in changed.items() if k.startswith(("SCHEDLAB", "PREFECT", "MLFLOW", "DASK", "DO_NOT"))}
    assert ours == {}, ours
    assert not (tmp_path / "home").exists()  # nor is a folder created


def test_settings_from_the_environment_and_applied_once(tmp_path, monkeypatch):
    env = {"SCHEDLAB_HOME": str(tmp_path / "h"), "MLFLOW_TRACKING_URI": "http://tracking:5000"}
    conf = Settings.from_env(env=env)
    assert conf.home == tmp_path / "h" and conf.prefect_home == tmp_path / "h" / "prefect"
    assert conf.tracking_uri == conf.registry_uri == "http://tracking:5000"
    assert conf.artifact_root == tmp_path / "h" / "mlartifacts"
    local = Settings.from_env(tmp_path / "other", env={"MLFLOW_REGISTRY_URI": "sqlite:///r.db"})
    assert local.tracking_uri == f"sqlite:///{tmp_path / 'other' / 'mlflow.db'}" and local.registry_uri == "sqlite:///r.db"
    monkeypatch.setenv("PREFECT_HOME", "/the/users/own")  # a variable the user set wins
    monkeypatch.delenv("DO_NOT_TRACK", raising=False)
    conf.apply()
    import os

    assert os.environ["PREFECT_HOME"] == "/the/users/own" and os.environ["DO_NOT_TRACK"] == "true"


def test_prefect_ready_names_the_folder(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(HomeError, match=r"file/h/prefect: cannot create the folder.*SCHEDLAB_HOME"):
        Settings.from_env(tmp_path / "file" / "h", env={}).prefect_ready()
    assert Settings.from_env(tmp_path / "h", env={}).prefect_ready().prefect_home.is_dir()


def test_environ_swaps_and_restores(monkeypatch):
    import os

    monkeypatch.setenv("SCHEDLAB_X", "before")
    monkeypatch.delenv("SCHEDLAB_Y", raising=False)
    with environ({"SCHEDLAB_X": "in", "SCHEDLAB_Y": "in"}):
        assert os.environ["SCHEDLAB_X"] == os.environ["SCHEDLAB_Y"] == "in"
    assert os.environ["SCHEDLAB_X"] == "before" and "SCHEDLAB_Y" not in os.environ


def test_one_place_swaps_the_prefect_api_url():
    """``PREFECT_API_URL`` is exported for Dask workers by one context manager (flows/api_server.py)."""
    root = Path(__file__).resolve().parents[1]
    hits = [p.relative_to(root).as_posix() for p in [*root.glob("flows/*.py"), *root.glob("tasks/*.py")]
            if 'os.environ["PREFECT_API_URL"]' in p.read_text() or "os.environ.pop(\"PREFECT_API_URL\"" in p.read_text()]
    assert hits == []
    uses = [p.name for p in root.glob("flows/*.py") if "exported_api_url(" in p.read_text()]
    assert sorted(uses) == ["api_server.py", "orchestration.py"]
