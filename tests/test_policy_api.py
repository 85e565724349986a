"""Bring your own scheduler: the tutorial's example policy (docs/tutorials/write-a-policy.md), copied out of the
repository, runs through ``replay`` (in process and as a subprocess) and ``experiment`` (a local Dask
cluster) with its lineage in MLflow; policy specs' errors; the ``schedlab.policies`` entry points."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from schedlab import sched
from schedlab.cli import main
from schedlab.sched import policies as registry
from schedlab.sched.policies import load_policy_class, make_policy, policy_origin
from schedlab.sched.replay import run
from schedlab.sched.spec import ReplaySpec
from schedlab.sched.spec import ConfigError, load_config

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorials" / "write-a-policy.md"
CODE = "test-version"


def readme_example(name: str) -> str:
    """The code block between ``<!-- example: NAME -->`` and ``<!-- /example -->`` in the tutorial."""
    match = re.search(rf"<!-- example: {re.escape(name)} -->\n```\w*\n(.*?)```\n<!-- /example -->", TUTORIAL.read_text(),
                      re.S)
    assert match, f"{TUTORIAL.name} has no example {name}"
    return match.group(1)


def readme_command(start: str) -> list[str]:
    """The tutorial's shell command line that begins with ``start`` (continuation lines joined)."""
    text = TUTORIAL.read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith(start))
    return shlex.split(line.partition("#")[0])


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """A folder outside the repository holding the tutorial's policy and experiment; the cwd."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "my_policy.py").write_text(readme_example("my_policy.py"))
    (folder / "my_experiment.yaml").write_text(readme_example("my_experiment.yaml"))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("SCHEDLAB_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert not folder.resolve().is_relative_to(TUTORIAL.parents[2])
    return folder


def test_readme_example_is_30_to_40_lines():
    assert 30 <= len(readme_example("my_policy.py").splitlines()) <= 40


def test_readme_replay_command_runs_as_shown(outside, capsys):
    argv = readme_command("schedlab replay --policy my_policy.py:SmallestFirst fifo --set")
    assert argv[:2] == ["schedlab", "replay"]
    out = outside / "out"
    assert main([*argv[1:], "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^smallest-first +200 ", printed, re.M) and re.search(r"^fifo +200 ", printed, re.M)
    summary = json.loads((out / "smallest-first" / "summary.json").read_text())
    assert summary["policy"] == "smallest-first" and summary["jobs"] == 200
    fifo = json.loads((out / "fifo" / "summary.json").read_text())
    assert summary["avg_wait_s"] < fifo["avg_wait_s"]  # at load 20 small jobs overtake FIFO's blocked head


def test_parameters_reach_the_policy_and_are_validated(outside, capsys):
    spec = f"{outside / 'my_policy.py'}:SmallestFirst"
    assert make_policy(spec, {"shortest_first": True}).params.shortest_first is True
    base = ["replay", "--policy", "my_policy.py:SmallestFirst", "--num-jobs", "80", "--load", "50", "--cluster", "2x8",
            "--no-progress"]
    # by the spec as given, too (its own dots do not confuse --set)
    assert main([*base, "--set", "my_policy.py:SmallestFirst.shortest_first=true", "--out", "a"]) == 0
    assert main([*base, "--out", "b"]) == 0
    a, b = (json.loads(Path(d, "summary.json").read_text()) for d in "ab")
    assert a["avg_jct_s"] < b["avg_jct_s"]  # among equal demands, shortest first shortens the average JCT
    capsys.readouterr()
    assert main([*base, "--set", "smallest-first.shortest=true", "--out", "c"]) == 2
    err = capsys.readouterr().err
    assert "has no parameter 'shortest'" in err and "did you mean 'shortest_first'" in err and "(False)" in err
    assert main([*base, "--set", "smallest-first.shortest_first=7", "--out", "c"]) == 2
    assert "shortest_first" in capsys.readouterr().err


def test_readme_replay_as_a_subprocess(outside):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(sched.__file__).parents[2]), *sys.path])}
    done = subprocess.run([sys.executable, "-m", "schedlab.cli", "replay", "--policy", "my_policy.py:SmallestFirst",
                           "--num-jobs", "40", "--out", "sub", "--no-progress"], cwd=outside, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((outside / "sub" / "summary.json").read_text())["policy"] == "smallest-first"


def test_readme_check_policy_command_runs_as_shown(outside, capsys):
    """The tutorial's ``check-policy`` line on the example: every rule holds (exit 0), each rule reported."""
    argv = readme_command("schedlab check-policy my_policy.py:SmallestFirst")
    assert main([*argv[1:], "--examples", "10"]) == 0
    printed = capsys.readouterr().out
    for rule in ("capacity", "submit", "finishes", "progress", "determinism", "api", "time", "crash"):
        assert re.search(rf"^  ok +{rule} ", printed, re.M), rule


@pytest.mark.slow
def test_replay_track_records_the_file_hash(outside):
    assert main(["replay", "--policy", "my_policy.py:SmallestFirst", "fifo", "--num-jobs", "30", "--out", "t",
                 "--no-progress", "--track"]) == 0
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{outside.parent / 'home' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("replay").experiment_id])
    mine = next(r for r in runs if r.data.tags.get("schedlab.policy") == "smallest-first")
    digest = hashlib.sha256((outside / "my_policy.py").read_bytes()).hexdigest()
    assert mine.data.params["policy.source.sha256"] == digest
    assert mine.data.params["policy.source.path"] == str((outside / "my_policy.py").resolve())
    fifo = next(r for r in runs if r.data.tags.get("schedlab.policy") == "fifo")
    assert not any(k.startswith("policy.source") for k in fifo.data.params)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_readme_experiment_on_a_local_dask_cluster(outside, prefect_harness, monkeypatch):
    from schedlab.flows.experiment import run_experiment
    from schedlab.tasks import tracking

    monkeypatch.setenv("SCHEDLAB_CODE_VERSION", CODE)
    home = outside.parent / "home"
    report = run_experiment("my_experiment.yaml", workers=1, home=home, code_version=CODE)
    assert report["failures"] == {} and report["replays"] == 2 and report["replays_finished"] == 2
    c = tracking.client(f"sqlite:///{home / 'mlflow.db'}")
    runs = c.search_runs([c.get_experiment_by_name("my-policy").experiment_id])
    mine = next(r for r in runs if r.data.tags.get("schedlab.label") == "smallest-first"
                and r.data.tags.get("schedlab.kind") == "replay")
    path = outside / "my_policy.py"
    p = mine.data.params
    assert p["policy"] == f"{path.resolve()}:SmallestFirst" and p["params.shortest_first"] == "true"
    assert p["policy.source.kind"] == "file" and p["policy.source.path"] == str(path.resolve())
    assert p["policy.source.sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert mine.info.status == "FINISHED" and mine.data.metrics["jobs"] == 200
    assert "smallest-first" in report["table"]


def test_experiment_key_follows_the_file_and_workers_run_the_carried_code(outside, tmp_path):
    from schedlab.tasks.replay import execute

    config = load_config(outside / "my_experiment.yaml")
    [fifo, mine] = config.grid(CODE)
    assert fifo.policy_origin is None and fifo.policy_source is None  # shipped: keys as before
    assert mine.label == "smallest-first" and mine.policy_source == readme_example("my_policy.py")
    path = outside / "my_policy.py"
    path.write_text(path.read_text() + "\n# edited\n")
    assert load_config(outside / "my_experiment.yaml").grid(CODE)[1].key != mine.key
    # a worker without the file (--dask-address on another machine), or whose file changed: the carried text
    path.write_text("raise RuntimeError('not this version')\n")
    result, _ = execute(mine.model_copy(update={"options": {**mine.options, "num_jobs": 30}}))
    assert result.summary["policy"] == "smallest-first" and result.summary["jobs"] == 30
    path.unlink()
    assert load_policy_class(mine.policy, source=mine.policy_source).name == "smallest-first"
    with pytest.raises(ValueError, match="no such file"):
        load_policy_class(mine.policy)


def test_experiment_entry_errors_name_the_field(outside):
    exp = outside / "bad.yaml"
    exp.write_text("name: bad\ntraces: [{name: s}]\nclusters: [4x8]\npolicies: [fifo, nothere.py:SmallestFirst]\n")
    with pytest.raises(ConfigError, match=r"policies\[1\]\.name: policy '.*/nothere.py:SmallestFirst': .*no such file \(looked in "):
        load_config(exp)
    exp.write_text("name: bad\ntraces: [{name: s}]\nclusters: [4x8]\n"
                   "policies: [{name: my_policy.py:SmallestFirst, params: {shortest: 1}}]\n")
    with pytest.raises(ConfigError, match=r"policies\[0\]\.params: .*has no parameter 'shortest'"):
        load_config(exp)
    exp.write_text("name: ok\ntraces: [{name: s}]\nclusters: [4x8]\n"
                   "policies: [{name: my_policy.py:SmallestFirst, label: mine}]\n")
    assert [e.label for e in load_config(exp).policy_entries()] == ["mine"]


POLICY_HEAD = "from schedlab.sched.api import NoParams, Policy\n"


@pytest.mark.parametrize(("body", "spec", "message"), [
    (None, "missing.py:X", "missing.py: no such file"),
    ("class Other(Policy):\n    name = 'o'\n", "p.py:Mine", "has no 'Mine'; its Policy classes: Other"),
    ("class Mine:\n    name = 'm'\n", "p.py:Mine", "class Mine is not a Policy subclass"),
    ("class Mine(Policy):\n    name = 'fifo'\n", "p.py:Mine", "its name 'fifo' is a registered policy's"),
    ("class Mine(Policy):\n    pass\n", "p.py:Mine", "has no `name` of its own"),
    ("class Mine(Policy):\n    name = 'a b'\n", "p.py:Mine", "must match"),
    ("from pydantic import BaseModel\nclass P(BaseModel):\n    x: int\n"
     "class Mine(Policy):\n    name = 'm'\n    Params = P\n", "p.py:Mine", "needs a default for every field"),
    ("def broken(:\n", "p.py:Mine", "importing .*p.py failed: SyntaxError"),
    ("import not_a_module_anywhere\n", "p.py:Mine", "No module named 'not_a_module_anywhere'"),
    (None, "no_such_package.mod:X", "no module 'no_such_package'"),
    (None, "p.py:1x", "ClassName a Python identifier"),
    (None, "fiffo", "unknown policy 'fiffo' .*did you mean 'fifo'"),
])
def test_loader_errors(tmp_path, monkeypatch, capsys, body, spec, message):
    monkeypatch.chdir(tmp_path)
    if body is not None:
        (tmp_path / "p.py").write_text(POLICY_HEAD + body)
    with pytest.raises(ValueError, match=message):
        load_policy_class(registry.resolve_spec(spec))
    assert main(["replay", "--policy", spec, "--num-jobs", "5", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedlab replay: error: --policy: ") and re.search(message, err)


def test_module_spec_and_its_lineage(tmp_path, monkeypatch):
    (tmp_path / "byo_policies_mod.py").write_text(readme_example("my_policy.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = "byo_policies_mod:SmallestFirst"
    [result] = run(ReplaySpec(policies=[{"name": spec, "params": {"shortest_first": True}}],
                              options={"num_jobs": 20}, cluster="4x8"))
    assert result.policy == "smallest-first" and result.summary["jobs"] == 20
    origin = policy_origin(spec)
    assert origin.kind == "module" and origin.path == str(tmp_path / "byo_policies_mod.py")
    assert origin.sha256 == hashlib.sha256((tmp_path / "byo_policies_mod.py").read_bytes()).hexdigest()
    assert origin.version is None  # not an installed distribution
    assert policy_origin("fifo") is None
    with pytest.raises(ValueError, match=r"label\(s\) \['smallest-first'\] more than once"):
        ReplaySpec(policies=[spec, f"{tmp_path / 'byo_policies_mod.py'}:SmallestFirst"])


PLUGIN = textwrap.dedent("""\
    from schedlab.sched.api import Policy

    class PlugFirst(Policy):
        name = "plug-first-class-name"  # the entry point's name is the registry's
        summary = "a plugin"
        paper = "none"

        def __init__(self, params=None):
            super().__init__(params)
            self.queue = []

        def on_arrival(self, engine, job):
            self.queue.append(job)

        def schedule(self, engine):
            while self.queue and self.queue[0].num_gpus <= engine.cluster.free_gpus and engine.start(self.queue[0]):
                self.queue.pop(0)
""")


@pytest.mark.slow
def test_installed_entry_point_joins_the_registry(tmp_path):
    """A distribution on sys.path (a dist-info folder, as pip leaves) declaring ``schedlab.policies``."""
    (tmp_path / "byo_plugin").mkdir()
    (tmp_path / "byo_plugin" / "__init__.py").write_text(PLUGIN)
    info = tmp_path / "byo_plugin-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: byo-plugin\nVersion: 1.2.3\n")
    (info / "top_level.txt").write_text("byo_plugin\n")
    (info / "entry_points.txt").write_text("[schedlab.policies]\nplug-first = byo_plugin:PlugFirst\n"
                                           "fifo = byo_plugin:PlugFirst\nbroken = byo_plugin:Missing\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(sched.__file__).parents[2]),
                                                        *sys.path])}

    def schedlab(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "schedlab.cli", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    listing = schedlab("policies")
    assert listing.returncode == 0, listing.stderr
    assert re.search(r"^plug-first +a plugin", listing.stdout, re.M) and "installed from byo-plugin==1.2.3" in listing.stdout
    assert "'fifo' is a shipped policy; rename the entry point" in listing.stderr
    assert "entry point 'broken'" in listing.stderr and "cannot import" in listing.stderr
    replay = schedlab("replay", "--policy", "plug-first", "--num-jobs", "20", "--out", "o", "--no-progress")
    assert replay.returncode == 0, replay.stderr
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["policy"] == "plug-first"
    broken = schedlab("replay", "--policy", "broken", "--num-jobs", "20", "--no-progress")
    assert broken.returncode == 2 and "policy 'broken' is not available: entry point 'broken'" in broken.stderr
    lineage = schedlab("replay", "--policy", "plug-first", "--num-jobs", "5", "--out", "t", "--no-progress", "--track")
    assert lineage.returncode == 0, lineage.stderr


def test_entry_point_checks_in_process(monkeypatch):
    eps = [importlib.metadata.EntryPoint("fifo", "schedlab.sched.policies.ordered:SJF", registry.ENTRY_POINT_GROUP),
           importlib.metadata.EntryPoint("gone", "no_such_module_x:Y", registry.ENTRY_POINT_GROUP),
           importlib.metadata.EntryPoint("notpolicy", "pathlib:Path", registry.ENTRY_POINT_GROUP),
           importlib.metadata.EntryPoint("extra-sjf", "schedlab.sched.policies.ordered:SJF", registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [e for e in eps if e.group == group])
    monkeypatch.setattr(registry, "PLUGIN_ERRORS", {})
    monkeypatch.setattr(registry, "PLUGIN_DISTS", {})
    with pytest.warns(UserWarning, match="policy left out"):
        found = registry._entry_point_policies(registry.SHIPPED)
    assert list(found) == ["extra-sjf"]
    assert set(registry.PLUGIN_ERRORS) == {"fifo", "gone", "notpolicy"}
    assert "not a Policy subclass" in registry.PLUGIN_ERRORS["notpolicy"]
    assert "cannot import: ModuleNotFoundError" in registry.PLUGIN_ERRORS["gone"]
