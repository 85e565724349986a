"""The experiment flow for real: a Dask LocalCluster, a sqlite MLflow store, Prefect's test API.

One LocalCluster (2 worker processes) serves the module, reached by address (the ``--dask-address``
path); the flow itself is covered end to end, including a worker killed mid-replay.
"""

from __future__ import annotations

import contextlib
import json
import re
import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from schedlab.sched.spec import load_config
from schedlab.flows.experiment import run_experiment
from schedlab.tasks import tracking
from schedlab.tasks.replay import ReplayFailed, log_replay
from schedlab.tasks.tracking import KEY_TAG, PARENT_TAG, SUPERSEDED_TAG

pytestmark = pytest.mark.timeout(240)

CODE = "test-version"


@pytest.fixture(scope="module")
def dask_address():
    from schedlab.flows.orchestration import local_cluster

    with local_cluster(2) as cluster:  # as `schedlab experiment --workers 2` starts one
        yield cluster.scheduler_address


@pytest.fixture(autouse=True)
def _local_store(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("SCHEDLAB_CODE_VERSION", CODE)


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def uri_of(home: Path) -> str:
    return f"sqlite:///{home / 'mlflow.db'}"


def all_runs(uri: str, name: str, deleted: bool = False) -> list:
    from mlflow.entities import ViewType

    c = tracking.client(uri)
    exp = c.get_experiment_by_name(name)
    if exp is None:
        return []
    return c.search_runs([exp.experiment_id], run_view_type=ViewType.ALL if deleted else ViewType.ACTIVE_ONLY,
                         max_results=1000)


def running_replays(db: Path) -> list[tuple[str, int]]:
    """(run id, worker pid) of replay runs now RUNNING, read with plain sqlite (an MLflow client
    would try to migrate a database the experiment is still creating)."""
    import sqlite3

    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as con:
            rows = con.execute(
                "SELECT r.run_uuid, t.value FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid"
                " WHERE r.status = 'RUNNING' AND t.key = 'schedlab.worker'").fetchall()
    except sqlite3.Error:
        return []
    return [(run_id, int(worker.rsplit(":", 1)[1])) for run_id, worker in rows]


@pytest.mark.slow
def test_experiment_two_policies_two_seeds(tmp_path, prefect_harness, dask_address, seed_home):
    path = write(tmp_path, """\
        name: e2e
        description: two policies on a small synthetic trace
        baseline: fifo
        seeds: [0, 1]
        traces:
          - {name: syn, format: synthetic, options: {num_jobs: 300, load: 3.0}}
        clusters: [4x8]
        policies: [fifo, {name: tiresias, params: {promote_knob: 4}}]
        models: {interference: analytic, iteration_time: catalog}
        """)
    home = seed_home(tmp_path / "home", prefect=False)
    report = run_experiment(path, dask_address=dask_address, home=home, code_version=CODE)
    uri = uri_of(home)
    assert report["failures"] == {} and report["replays"] == 4 and report["replays_run"] == 4

    runs = all_runs(uri, "e2e")
    children = [r for r in runs if r.data.tags.get("schedlab.kind") == "replay"]
    parents = [r for r in runs if r.data.tags.get("schedlab.kind") == "experiment"]
    assert len(children) == 4 and len(parents) == 1
    parent = parents[0]
    specs = {s.key: s for s in load_config(path).grid(CODE)}
    assert {r.data.tags[KEY_TAG] for r in children} == set(specs)
    c = tracking.client(uri)
    for run in children:
        spec = specs[run.data.tags[KEY_TAG]]
        assert run.info.status == "FINISHED"
        assert run.data.tags[PARENT_TAG] == parent.info.run_id
        p = run.data.params
        assert p["policy"] == spec.policy and p["seed"] == str(spec.seed) and p["cluster"] == "4x8"
        assert p["trace"] == "syn" and p["trace.option.num_jobs"] == "300" and p["trace.option.load"] == "3.0"
        assert p["code_version"] == CODE and p["model.interference"] == "analytic"
        assert p["model.iteration_time"] == "catalog"
        if spec.policy == "tiresias":
            assert p["params.promote_knob"] == "4.0"  # the validated value
            assert "params.queue_thresholds" in p  # left at its default, logged all the same
        assert float(p["preemption_overhead_s"]) >= 0 and p["preemption_overhead.source"] == "policy default"
        assert run.data.tags["mlflow.user"] and "mlflow.note.content" in run.data.tags
        m = run.data.metrics
        assert m["avg_wait_s"] >= m["avg_queue_s"]
        assert m["jobs"] == 300 and m["avg_jct_s"] > 0 and 0 < m["gpu_util"] <= 1 and "p95_queue_s" in m
        assert m["avg_jct_h"] == pytest.approx(m["avg_jct_s"] / 3600)  # the views' unit beside the seconds
        names = {a.path for a in c.list_artifacts(run.info.run_id)}
        assert {"jobs.parquet", "summary.json", "utilization.parquet", "jct_cdf.png", "queue_cdf.png",
                "gpu_util.png"} <= names
        local = Path(run.info.artifact_uri.removeprefix("file://"))
        assert local.is_relative_to(home / "mlartifacts")
        assert len(pd.read_parquet(local / "jobs.parquet")) == 300

    assert parent.info.status == "FINISHED"
    names = {a.path for a in c.list_artifacts(parent.info.run_id)}
    assert {"comparison.csv", "comparison.md", "comparison.html", "plots", "exp.yaml"} <= names
    plots = {a.path for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert "plots/jct_cdf__syn__4x8.png" in plots
    assert {"plots/wait_cdf__syn__4x8.png", "plots/wait_cdf_all__syn__4x8.png", "plots/headline__syn__4x8.png"} <= plots
    page = (Path(parent.info.artifact_uri.removeprefix("file://")) / "comparison.html").read_text()
    # the normalised bars, wait top + all, JCT CDF and CCDF, queueing CCDF; the table and each figure stamped
    assert "tiresias" in page and page.count("data:image/png;base64,") == 6
    assert "table as of 4 of 4 replays" in page
    # the leader against the baseline, job by job, beside the page and linked from it
    assert "drilldown.html" in names and "<a href='drilldown.html'>" in page
    drill = (Path(parent.info.artifact_uri.removeprefix("file://")) / "drilldown.html").read_text()
    leader = next(p for p in pd.read_csv(Path(parent.info.artifact_uri.removeprefix("file://")) / "comparison.csv")["policy"]
                  if p != "fifo")
    assert f"{leader} against fifo: 600 jobs over 2 replay pair(s)" in drill
    assert len(re.findall(r"<figcaption>[^<]*, as of 4 of 4 replays", page)) == 6
    # the run's overview: who wins first (all MLflow shows before "Show more"), then the bars and CDFs
    # inline (SVG copies through the UI's get-artifact endpoint), then the table
    note = parent.data.tags["mlflow.note.content"]
    first = note.splitlines()[0]
    assert first.startswith("**syn / 4x8**, best by `avg_jct_s`: 1. **") and "2. **" in first
    assert f"(get-artifact?path=plots%2Fheadline__syn__4x8.svg&run_uuid={parent.info.run_id})" in note
    assert "plots%2Fwait_cdf__syn__4x8.svg" in note and note.index("plots%2Fjct_cdf") < note.index("| policy |")
    assert "plots/headline__syn__4x8.svg" in plots
    table = pd.read_csv(Path(parent.info.artifact_uri.removeprefix("file://")) / "comparison.csv")
    assert sorted(table["policy"]) == ["fifo", "tiresias"] and table["avg_jct_s"].is_monotonic_increasing  # ranked
    assert list(table["done/running/queued"]) == ["2/0/0", "2/0/0"]
    table = table.set_index("policy")
    assert table.loc["fifo", "avg_jct_speedup"] == pytest.approx(1.0)
    fifo_jct = [r.data.metrics["avg_jct_s"] for r in children if r.data.params["policy"] == "fifo"]
    assert table.loc["fifo", "avg_jct_s"] == pytest.approx(sum(fifo_jct) / 2)
    assert table.loc["tiresias", "knobs"] == "promote_knob=4.0"
    assert "avg_jct_speedup" in report["markdown"] and "tiresias" in report["table"] and "avg_wait_s" in report["table"]

    # the MLflow view: classic runs view, the description, one run per policy with mean and spread
    exp = c.get_experiment_by_name("e2e")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert exp.tags["mlflow.note.content"].endswith("\n\ntwo policies on a small synthetic trace")
    assert exp.tags["mlflow.note.content"].startswith(f"Comparison view (classic runs view, baseline first): [{report['ui_url']}]")
    assert "workflowType=machine_learning" in report["ui_url"] and f"/experiments/{exp.experiment_id}/runs?" in report["ui_url"]
    assert "avg_jct_speedup" in parent.data.tags["mlflow.note.content"]  # the table on the run's page
    policy_runs = {r.data.tags["schedlab.label"]: r for r in runs if r.data.tags.get("schedlab.kind") == "policy"}
    assert set(policy_runs) == {"fifo", "tiresias"}
    fifo = policy_runs["fifo"]
    assert fifo.data.tags["schedlab.comparison_run"] == parent.info.run_id and fifo.info.status == "FINISHED"
    assert PARENT_TAG not in fifo.data.tags  # top level: MLflow's table shows child runs collapsed
    view = json.loads(exp.tags["mlflow.sharedViewState.schedlab-comparison"])
    assert "viewStateShareKey=schedlab-comparison" in report["ui_url"]
    assert view["searchFilter"] == "tags.`schedlab.kind` = 'policy'" and "metrics.`avg_wait_h_sd`" in view["selectedColumns"]
    shown = [card["metricKey"] for card in view["compareRunCharts"] if not card["deleted"]]
    assert shown[0] == "avg_jct_h" and "avg_jct_norm" in shown and not any(k.endswith(("_std", "_sd")) for k in shown)
    hidden = {card["metricKey"] for card in view["compareRunCharts"] if card["deleted"]}
    assert set(fifo.data.metrics) <= set(shown) | hidden  # no metric left for the UI to add a chart of its own
    assert fifo.data.tags["mlflow.runColor"] != policy_runs["tiresias"].data.tags["mlflow.runColor"]
    assert fifo.data.metrics["avg_jct_s"] == pytest.approx(sum(fifo_jct) / 2, abs=0.05)  # rounded to 0.1 s
    assert fifo.data.metrics["avg_jct_s_std"] == pytest.approx(abs(fifo_jct[0] - fifo_jct[1]) / 2 ** 0.5, abs=0.05)
    assert {"avg_wait_s", "avg_wait_s_std", "makespan_s", "makespan_s_std", "seeds"} <= set(fifo.data.metrics)
    assert policy_runs["tiresias"].data.params["params.promote_knob"] == "4.0"

    # the same table is a Prefect markdown artifact
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as prefect:
        artifacts = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["experiment-e2e"])))
    assert artifacts and "avg_jct_speedup" in artifacts[0].data

    # re-running the same experiment resumes: nothing is logged twice
    again = run_experiment(path, dask_address=dask_address, home=home, code_version=CODE)
    assert again["replays_run"] == 0 and again["replays_skipped"] == 4
    assert len(all_runs(uri, "e2e", deleted=True)) == 7  # 4 replays, the parent, 2 policy runs: none twice
    assert again["parent_run_id"] == parent.info.run_id

    # the drill-down of two of its policies, job by job, from the store (schedlab compare)
    from schedlab.cli import main

    with pytest.MonkeyPatch.context() as env:
        env.setenv("SCHEDLAB_HOME", str(home))
        env.delenv("MLFLOW_TRACKING_URI", raising=False)
        assert main(["compare", "e2e", "tiresias", "fifo", "--out", str(tmp_path / "cmp")]) == 0
        with pytest.raises(SystemExit):
            main(["compare", "e2e", "tiresias"])
        assert main(["compare", "e2e", "tiresias", "lucid"]) == 2  # no such label: named, exit 2
    per_job = pd.read_csv(tmp_path / "cmp" / "jobs.csv")
    assert len(per_job) == 600 and set(per_job["seed"]) == {0, 1}  # 300 jobs x 2 seeds
    assert set(per_job["effect"]) <= {"helped", "hurt", "unchanged"}
    fifo_jobs = pd.read_parquet(Path(children[0].info.artifact_uri.removeprefix("file://")) / "jobs.parquet")
    assert {"jct_s.tiresias", "jct_s.fifo", "ratio"} <= set(per_job.columns) and len(fifo_jobs) == 300
    assert (per_job["ratio"] == per_job["jct_s.fifo"] / per_job["jct_s.tiresias"]).all()
    assert "<svg" in (tmp_path / "cmp" / "drilldown.html").read_text()


@pytest.mark.slow
def test_failed_replay_run_is_failed_with_error_others_finish(tmp_path, prefect_harness, dask_address, capsys):
    from schedlab.cli import main

    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time,num_gpus,duration\nj1,0,1,10\nj2,5,one,10\n")
    path = write(tmp_path, f"""\
        name: failing
        seeds: [0]
        traces:
          - {{name: syn, format: synthetic, options: {{num_jobs: 100, load: [1.0, 2.0]}}}}
          - {{name: bad, source: {bad.name}, format: canonical}}
        clusters: [4x8]
        policies: [fifo]
        """)
    rc = main(["experiment", str(path), "--dask-address", dask_address])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "FAILED" in err and "bad" in err and "MLflow: http://127.0.0.1:5000/#/experiments/" in out
    assert "schedlab ui" in out
    uri = tracking.tracking_uri() if hasattr(tracking, "tracking_uri") else None
    from schedlab import settings

    uri = settings.tracking_uri()
    runs = all_runs(uri, "failing")
    by_trace = {r.data.params.get("trace.label"): r for r in runs if r.data.tags.get("schedlab.kind") == "replay"}
    assert by_trace["bad"].info.status == "FAILED"
    assert by_trace["syn@1x"].info.status == "FINISHED" and by_trace["syn@2x"].info.status == "FINISHED"
    c = tracking.client(uri)
    error = Path(by_trace["bad"].info.artifact_uri.removeprefix("file://")) / "error.txt"
    assert "TraceError" in error.read_text() and "num_gpus" in error.read_text()
    assert "num_gpus" in by_trace["bad"].data.tags["schedlab.error"]
    parent = next(r for r in runs if r.data.tags.get("schedlab.kind") == "experiment")
    assert parent.info.status == "FAILED" and parent.data.metrics["replays_failed"] == 1
    plots = {a.path for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert "plots/vs_load__syn__4x8.png" in plots  # the config sweeps load


def test_unreachable_tracking_server_and_dask_fail_before_any_work(tmp_path, monkeypatch, capsys):
    from schedlab.cli import main

    path = write(tmp_path, """\
        name: never
        traces: [{name: syn, options: {num_jobs: 10}}]
        clusters: [4x8]
        policies: [fifo]
        """)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    assert main(["experiment", str(path)]) == 2
    assert "tracking server http://127.0.0.1:9 is unreachable" in capsys.readouterr().err
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    started = time.perf_counter()
    assert main(["experiment", str(path), "--dask-address", "tcp://127.0.0.1:9"]) == 2
    assert "Dask scheduler tcp://127.0.0.1:9 is unreachable" in capsys.readouterr().err
    assert time.perf_counter() - started < 30
    from schedlab import settings

    assert all_runs(settings.tracking_uri(), "never") == []
    bad = write(tmp_path, "name: x\ntraces: []\nclusters: [4x8]\n", "bad.yaml")
    assert main(["experiment", str(bad)]) == 2
    assert f"{bad}: invalid experiment config" in capsys.readouterr().err


def test_replay_is_logged_once_even_when_retried(tmp_path, seed_home):
    """A task killed after logging FINISHED but before returning is re-run by Dask: the re-run finds
    the key and logs nothing; a run left RUNNING by a killed worker is retired when redone."""
    path = write(tmp_path, """\
        name: once
        traces: [{name: syn, options: {num_jobs: 50}}]
        clusters: [4x8]
        policies: [fifo, sjf]
        """)
    uri = uri_of(seed_home(tmp_path, prefect=False))
    tracking.check_tracking(uri)
    exp = tracking.ensure_experiment(uri, "once", tmp_path / "art")
    first, second = load_config(path).grid(CODE)
    a = log_replay(first, uri, exp, None)
    b = log_replay(first, uri, exp, None)
    assert a["logged"] and not b["logged"] and a["run_id"] == b["run_id"]
    stale = tracking.client(uri).create_run(exp, tags={KEY_TAG: second.key})  # a worker died here
    c = log_replay(second, uri, exp, None)
    runs = {r.info.run_id: r for r in all_runs(uri, "once", deleted=True)}
    assert runs[stale.info.run_id].info.status == "KILLED"
    assert runs[stale.info.run_id].info.lifecycle_stage == "deleted"
    assert runs[stale.info.run_id].data.tags[SUPERSEDED_TAG] == c["run_id"]
    assert sorted(r.info.status for r in all_runs(uri, "once")) == ["FINISHED", "FINISHED"]
    with pytest.raises(ReplayFailed):
        log_replay(second.model_copy(update={"policy": "nosuch", "label": "nosuch"}), uri, exp, None)


@pytest.mark.slow
def test_worker_killed_mid_experiment_completes_once_and_resumes(tmp_path, prefect_harness, dask_address, seed_home):
    path = write(tmp_path, """\
        name: kill
        seeds: [0]
        traces: [{name: syn, options: {num_jobs: 10000, load: 4.0}}]
        clusters: [castor-sim]
        policies: [srtf, tiresias]
        figures: false
        """)
    home = seed_home(tmp_path / "home", prefect=False)
    uri = uri_of(home)
    outcome: dict = {}

    def experiment() -> None:
        try:
            outcome["report"] = run_experiment(path, dask_address=dask_address, home=home, code_version=CODE)
        except BaseException as err:  # noqa: BLE001 - reported by the assertions below
            outcome["error"] = err

    runner = threading.Thread(target=experiment)
    runner.start()
    killed = None
    deadline = time.monotonic() + 150
    while killed is None and runner.is_alive() and time.monotonic() < deadline:
        running = running_replays(home / "mlflow.db")
        if running:
            killed = running[0]
            os.kill(killed[1], signal.SIGKILL)  # the worker process logging this run, mid-replay
        time.sleep(0.05)
    runner.join(180)
    assert killed is not None and "error" not in outcome, outcome
    report = outcome["report"]
    assert report["failures"] == {} and report["replays_finished"] == 2

    runs = all_runs(uri, "kill", deleted=True)
    replays = [r for r in runs if r.data.tags.get("schedlab.kind") == "replay"]
    finished = [r for r in replays if r.info.status == "FINISHED" and r.info.lifecycle_stage == "active"]
    assert sorted(r.data.tags[KEY_TAG] for r in finished) == sorted(s.key for s in load_config(path).grid(CODE))
    retired = next(r for r in replays if r.info.run_id == killed[0])
    assert retired.info.status == "KILLED" and retired.info.lifecycle_stage == "deleted"

    again = run_experiment(path, dask_address=dask_address, home=home, code_version=CODE)
    assert again["replays_run"] == 0 and again["failures"] == {}
    # figures: false: no figure on any run, the tables and the page as ever
    c = tracking.client(uri)
    artifacts = {r.info.run_id: {a.path for a in c.list_artifacts(r.info.run_id)} for r in all_runs(uri, "kill")}
    parent = next(r.info.run_id for r in all_runs(uri, "kill") if r.data.tags.get("schedlab.kind") == "experiment")
    assert {"comparison.csv", "comparison.html"} <= artifacts[parent] and "plots" not in artifacts[parent]
    assert not [p for paths in artifacts.values() for p in paths if p.endswith((".png", ".svg"))]
    assert len(all_runs(uri, "kill", deleted=True)) == len(runs)
