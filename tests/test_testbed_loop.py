"""The testbed's whole loop on this machine's CPU, CI-sized (about a minute on a quiet 2-core machine):
profile the mini trace's workload, fit, run the trace for real, replay it with the node's models,
compare. Asserts the outputs' structure and a loose bound only (the error budget is measured by
hand, ``docs/testbed.md``: a busy machine makes the real run slower than its own profile)."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
from schedlab.profiling.testbed.__main__ import main
from schedlab.profiling.testbed.activity import ActivityLog, completeness

pytestmark = pytest.mark.slow


def test_profile_fit_run_replay_compare(tmp_path, capsys):
    out = tmp_path / "out"
    devices = "2" if len(os.sched_getaffinity(0)) >= 2 else "1"
    code = main(["--generate", "3", "--workloads", "bert:4", "--policy", "fifo", "--devices", devices,
                 "--min-job-s", "2", "--max-job-s", "4", "--profile-iters", "5", "--overhead-samples", "1",
                 "--budget-s", "300", "--seed", "1", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "fifo: 3/3 jobs finished on the testbed, 3/3 in the replay" in printed and "per-job JCT error" in printed
    node = json.loads((out / "node" / "node.json").read_text())
    assert node["startup_s"] > 0 and node["restart_s"] > 0 and node["facts"]["fit"]["mape"]
    trace = pd.read_csv(out / "trace.csv")
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
