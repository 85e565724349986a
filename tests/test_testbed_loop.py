"""The testbed's whole loop on this machine's CPU, CI-sized (about a minute on a quiet 2-core machine):
profile the mini trace's workload, fit, run the trace for real, replay it with the node's models,
compare. Asserts the outputs' structure and a loose bound only (the error budget is measured by
hand, ``docs/how-to/testbed.md``: a busy machine makes the real run slower than its own profile)."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pandas as pd
import pytest
from schedlab.cli import main
from schedlab.profiling.testbed.activity import ActivityLog, completeness

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def one_node(tmp_path_factory):
    """``schedlab testbed --track`` on this machine: (OUT, SCHEDLAB_HOME, exit code, what it printed)."""
    root = tmp_path_factory.mktemp("testbed-loop")
    out, home = root / "out", root / "home"
    devices = "2" if len(os.sched_getaffinity(0)) >= 2 else "1"
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as env, contextlib.redirect_stdout(printed):
        env.setenv("SCHEDLAB_HOME", str(home))
        env.delenv("MLFLOW_TRACKING_URI", raising=False)
        code = main(["testbed", "--track", "--generate", "3", "--workloads", "bert:4", "--policy", "fifo", "--devices",
                     devices, "--min-job-s", "2", "--max-job-s", "4", "--profile-iters", "5", "--profile-seconds",
                     "0.5", "--overhead-samples", "1", "--budget-s", "300", "--seed", "1", "--out", str(out)])
    return out, home, code, printed.getvalue()


def test_profile_fit_run_replay_compare(one_node):
    """``schedlab testbed --track``: the loop, then each policy's run in MLflow like a replay's."""
    out, home, code, printed = one_node
    assert code == 0, printed[-3000:]
    assert "fifo: 3/3 jobs finished on the testbed, 3/3 in the replay" in printed and "per-job JCT error" in printed
    node = json.loads((out / "node" / "node.json").read_text())
    assert node["startup_s"] > 0 and node["restart_s"] > 0 and node["facts"]["fit"]["mape"]
    trace = pd.read_csv(out / "trace.csv")
    # a multi-device count of the trace has its start-up measured apart (the replay's stall table)
    assert set(node["startup_by_devices"]) == {str(n) for n in trace["num_gpus"] if n > 1}
    comparison = json.loads((out / "fifo" / "comparison.json").read_text())
    for side in ("real", "replay"):
        assert set(comparison[side]) >= {"avg_jct_s", "makespan_s", "p95_jct_s", "finished"}
        assert comparison[side]["finished"] == len(trace)
    assert set(comparison["relative_error"]) >= {"avg_jct", "makespan", "p95_jct"}
    assert set(comparison["per_job_jct_error"]) >= {"median", "p90", "max", "worst_job"}
    assert comparison["decisions"]["real"] == comparison["decisions"]["replay"] == len(trace)  # fifo: one start each
    assert comparison["activity_problems"] == {"real": [], "replay": []}
    real = pd.read_parquet(out / "fifo" / "testbed" / "jobs.parquet")
    replay = pd.read_parquet(out / "fifo" / "replay" / "jobs.parquet")
    assert list(real.columns) == list(replay.columns) and list(real["job_id"]) == list(replay["job_id"])
    for side in ("testbed", "replay"):
        assert completeness(ActivityLog.read(out / "fifo" / side / "activity.jsonl"), trace["job_id"]) == []
    ratio = comparison["real"]["avg_jct_s"] / comparison["replay"]["avg_jct_s"]
    assert 1 / 3 < ratio < 3, f"real / replayed average JCT = {ratio:.2f} (load {comparison['load_after']})"
    assert "every job" in (out / "fifo" / "comparison.html").read_text().lower()

    from schedlab.tasks import tracking

    c = tracking.client(f"sqlite:///{home / 'mlflow.db'}")
    [run] = c.search_runs([c.get_experiment_by_name("testbed").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["policy"] == "fifo" and run.data.params["device"] == "cpu"
    m = run.data.metrics
    assert m["testbed.avg_jct_s"] == comparison["real"]["avg_jct_s"] and m["error.avg_jct"] == comparison["relative_error"]["avg_jct"]
    assert {"per_job_error.median", "per_job_error.p90", "decisions_identical"} <= set(m)
    assert {a.path for a in c.list_artifacts(run.info.run_id)} >= {"comparison.json", "comparison.html", "testbed", "replay"}


def test_the_same_trace_on_two_nodes_with_the_first_runs_models(one_node, tmp_path, capsys):
    """``--dask-address``: two workers, each a node lending one CPU device (``test_testbed_nodes.py``), run the
    one-node run's trace with its node models (``--models``) under two policies: every job of each ran and
    finished on the nodes, the comparison written."""
    import shutil

    from tests.test_testbed_nodes import CORES, HOSTS, two_nodes

    if len(CORES) < 2 or shutil.which("taskset") is None:
        pytest.skip("two nodes of one core each need two cores and taskset")
    first, _, code, _ = one_node
    assert code == 0
    out = tmp_path / "two-nodes"
    with two_nodes() as address:
        code = main(["testbed", "--dask-address", address, "--models", str(first / "node"), "--trace",
                     str(first / "trace.csv"), "--policy", "fifo", "sjf", "--budget-s", "300", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    assert f"{HOSTS[0]}/cpu:{CORES[0]}, {HOSTS[1]}/cpu:{CORES[1]}" in printed
    assert "nodes' clocks against this one's: 127.0.0.1 " in printed and "warning: a node's clock" not in printed
    summary = json.loads((out / "fifo" / "testbed" / "summary.json").read_text())
    assert summary["devices"] == [f"{HOSTS[0]}/cpu:{CORES[0]}", f"{HOSTS[1]}/cpu:{CORES[1]}"]
    jobs = len(pd.read_csv(first / "trace.csv"))
    for policy in ("fifo", "sjf"):  # the second policy's jobs run in folders of their own on each node
        comparison = json.loads((out / policy / "comparison.json").read_text())
        assert comparison["real"]["finished"] == comparison["replay"]["finished"] == jobs
        assert comparison["activity_problems"] == {"real": [], "replay": []}
        real = pd.read_parquet(out / policy / "testbed" / "jobs.parquet")
        assert (real["end_time"] - real["start_time"] > 1.0).all(), real  # each ran (start-up alone is ~2 s)
