"""An experiment's inputs as content (sched/spec/inputs.py, tasks/inputs.py): the digests join the replay's
key, the paths a replay reads are found and rewritten in one traversal, URLs are read by the client, and
a bad URL is refused when the experiment file is read."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from schedlab.sched.spec import ConfigError, load_config
from schedlab.sched.spec import inputs
from schedlab.tasks.inputs import client_names, localised


def write_experiment(folder: Path, source: str = "trace.csv", extra: str = "") -> Path:
    (folder / "trace.csv").write_text("job_id,submit_time,num_gpus,duration\nj1,0,1,10\nj2,5,2,20\n")
    (folder / "load.csv").write_text("time,utilization\n0,0.5\n600,0.2\n")
    config = folder / "exp.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: inputs
        traces: [{{name: t, source: "{source}"}}]
        clusters: [lyra-testbed]
        inference: {{load: load.csv}}
        policies: [fifo]
        seeds: [0]
        """) + extra)
    return config


def test_every_input_is_named_by_its_content_and_changes_the_key(tmp_path):
    config = write_experiment(tmp_path)
    [replay] = load_config(config).grid("v")
    trace, load = str(tmp_path / "trace.csv"), str(tmp_path / "load.csv")
    assert replay.inputs == {trace: inputs.read(trace).sha, load: inputs.read(load).sha}
    (tmp_path / "trace.csv").write_text("job_id,submit_time,num_gpus,duration\nj1,0,1,10\nj2,5,2,21\n")
    [changed] = load_config(config).grid("v")
    assert changed.inputs[trace] != replay.inputs[trace] and changed.key != replay.key
    assert changed.inputs[load] == replay.inputs[load]


def test_map_paths_rewrites_each_input_and_leaves_names_alone(tmp_path):
    config = write_experiment(tmp_path)
    [replay] = load_config(config).grid("v")
    moved = inputs.map_paths(replay, lambda path: "/copies/" + Path(path).name)
    assert moved.source == "/copies/trace.csv" and moved.inference["load"] == "/copies/load.csv"
    assert moved.cluster == "lyra-testbed" and moved.models == replay.models  # a shipped name, the catalog
    # on a worker the client's paths do not exist: those the replay's inputs name are still rewritten
    ghost = replay.model_copy(update={"source": "/nowhere/trace.csv", "inputs": {"/nowhere/trace.csv": "ab"}})
    assert inputs.map_paths(ghost, lambda path: "/copy").source == "/copy"


def test_a_folder_input_is_one_digest_over_its_files_and_is_written_back_whole(tmp_path):
    store = tmp_path / "store"
    (store / "records").mkdir(parents=True)
    (store / "records" / "a.json").write_text("{}")
    (store / "b.txt").write_text("b")
    found = inputs.read(str(store))
    assert set(found.files) == {"records/a.json", "b.txt"}
    copy = inputs.write(found, tmp_path / "copies")
    assert copy.is_dir() and (copy / "records" / "a.json").read_text() == "{}" and copy.name == "store"
    assert inputs.write(found, tmp_path / "copies") == copy  # written once
    (store / "b.txt").write_text("c")
    assert inputs.read(str(store)).sha != found.sha


def test_a_file_url_is_read_by_the_client_and_replayed_from_its_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDLAB_HOME", str(tmp_path / "home"))
    config = write_experiment(tmp_path, source=(tmp_path / "trace.csv").as_uri())
    [replay] = load_config(config).grid("v")
    url = (tmp_path / "trace.csv").as_uri()
    assert replay.source == url and replay.inputs[url] == inputs.read(str(tmp_path / "trace.csv")).sha
    local, names = localised(replay)
    assert Path(local.source).read_bytes() == (tmp_path / "trace.csv").read_bytes()
    assert Path(local.source).is_relative_to(tmp_path / "home" / "inputs")
    assert client_names(f"read {local.source}", names) == f"read {url}"


def test_a_url_that_cannot_be_read_is_refused_naming_the_file_and_key(tmp_path):
    config = write_experiment(tmp_path, source=(tmp_path / "missing.csv").as_uri())
    with pytest.raises(ConfigError, match=r"exp\.yaml: traces\[0\]\.source: file://.*missing\.csv: not found"):
        load_config(config)
    config = write_experiment(tmp_path, source="nosuchscheme://bucket/trace.csv")
    with pytest.raises(ConfigError, match=r"traces\[0\]\.source: nosuchscheme://bucket/trace\.csv: cannot read it"):
        load_config(config)


def test_worker_reach_names_what_a_worker_cannot_use(tmp_path):
    """What each worker is asked before the first replay (tasks/tracking.worker_reach), answered here."""
    from schedlab.tasks.tracking import worker_reach

    marker = tmp_path / ".reach"
    marker.write_text("token")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert worker_reach(uri, str(marker), "token", None) == []
    assert worker_reach(uri, str(marker), "other", None) == ["store"]  # another machine's file of that name
    assert worker_reach(uri, str(tmp_path / "missing"), "token", None) == ["store"]
    assert worker_reach("http://127.0.0.1:9/", None, "", "http://127.0.0.1:9/api") == ["store", "api"]
    assert not (tmp_path / "mlflow.db").exists()  # asking opens and creates nothing
