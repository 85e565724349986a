"""The drill-down's fairness figures recomputed from a replay's job table (``jobs.parquet``): slowdown over
every job's solo run time (its ``duration``, never the sharing counterfactual ``exclusive_jct_estimate``),
and Jain's index over users and virtual clusters where the trace has them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from schedlab.sched.reporting import drilldown


@pytest.fixture(scope="module")
def shared():
    """castor on 300 synthetic jobs at load 2 on 2x8: some jobs start beside another, so the engine sets
    their ``exclusive_jct_estimate`` (Castor eq. 24) and leaves the others' NaN."""
    from schedlab.sched.replay import ReplaySpec, run
    from schedlab.sched.traces import LoadOptions

    [result] = run(ReplaySpec(cluster="2x8", policies=["castor"], seed=0, annotate=True, options=LoadOptions(num_jobs=300, load=2.0,
                                                                                            seed=0)))
    return result


def test_slowdown_is_over_the_duration_of_every_job(shared, tmp_path):
    jobs = pd.read_parquet(shared.write(tmp_path) / "jobs.parquet")
    estimated = jobs["exclusive_jct_estimate"].notna()
    assert 0 < estimated.sum() < len(jobs)  # the sharing counterfactual: set for the jobs that started shared only
    figures = drilldown.fairness(jobs, 16)
    slowdown = jobs["jct_s"] / jobs["duration"]
    assert figures["slowdown_mean"] == pytest.approx(float(slowdown.mean()), rel=1e-9, abs=1e-9)
    assert figures["slowdown_p99"] == pytest.approx(float(slowdown.quantile(0.99)), rel=1e-9, abs=1e-9)
    assert figures["slowdown_max"] == pytest.approx(float(slowdown.max()), rel=1e-9, abs=1e-9)
    # the old reading (the counterfactual JCT where set, queueing included) gives another figure
    mixed = jobs["jct_s"] / jobs["exclusive_jct_estimate"].where(estimated, jobs["duration"])
    assert abs(float(mixed.mean()) - figures["slowdown_mean"]) > 1e-6


def _grouped_trace(path, vcs: int = 3):
    """A canonical trace of 200 jobs with 6 users and ``vcs`` virtual clusters (some jobs with neither)."""
    rng = np.random.default_rng(3)
    n = 200
    table = pd.DataFrame({"job_id": [f"g{i}" for i in range(n)], "submit_time": np.sort(rng.uniform(0, 20_000, n)),
                          "num_gpus": rng.choice([1, 2, 4, 8], n), "duration": rng.uniform(60, 4 * 3600, n),
                          "user": [f"u{k}" for k in rng.integers(0, 6, n)],
                          "vc": [f"vc{k}" for k in rng.integers(0, vcs, n)]})
    table.loc[::17, "user"] = None  # a job without a user: left out of the index, not an error
    table.to_csv(path, index=False)
    return table


def _jain_by_hand(jobs: pd.DataFrame, column: str) -> float:
    """Jain's index (Jain, Chiu and Hawe 1984) of the per-group mean slowdowns, from plain sums."""
    sums: dict[str, list[float]] = {}
    for job in jobs.itertuples():
        group = getattr(job, column)
        if isinstance(group, str):
            sums.setdefault(group, []).append(job.jct_s / job.duration)
    means = [sum(v) / len(v) for v in sums.values()]
    return sum(means) ** 2 / (len(means) * sum(m * m for m in means))


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    from schedlab.sched.replay import ReplaySpec, run

    folder = tmp_path_factory.mktemp("grouped")
    trace = _grouped_trace(folder / "grouped.csv")
    results = run(ReplaySpec(trace=str(folder / "grouped.csv"), format="canonical", cluster="2x8",
                             policies=["fifo", "sjf"], seed=0))
    return trace, results, folder


def test_user_and_vc_reach_jobs_parquet_and_jain_is_what_they_say(grouped):
    from schedlab.sched.results.metrics import JOB_COLUMNS

    trace, results, folder = grouped
    by_id = trace.set_index("job_id")
    for result in results:
        assert "user" not in result.jobs.columns and "vc" not in result.jobs.columns  # the digested table as before
        assert list(result.jobs.columns[:len(JOB_COLUMNS)]) == list(JOB_COLUMNS)
        jobs = pd.read_parquet(result.write(folder / result.policy) / "jobs.parquet")
        assert list(jobs.columns) == [*result.jobs.columns, "user", "vc"]
        pd.testing.assert_frame_equal(jobs.drop(columns=["user", "vc"]), result.jobs, check_dtype=False)
        assert jobs["vc"].tolist() == by_id.loc[jobs["job_id"], "vc"].tolist()
        assert jobs["user"].isna().sum() == trace["user"].isna().sum()
        figures = drilldown.fairness(jobs, 16)
        assert figures["jain_users"] == pytest.approx(_jain_by_hand(jobs, "user"), rel=1e-9, abs=1e-9)
        assert figures["jain_vcs"] == pytest.approx(_jain_by_hand(jobs, "vc"), rel=1e-9, abs=1e-9)
        assert 1 / 6 <= figures["jain_users"] <= 1 and 1 / 3 <= figures["jain_vcs"] <= 1
    fifo, sjf = (drilldown.fairness(pd.read_parquet(folder / r.policy / "jobs.parquet"), 16) for r in results)
    assert fifo["jain_users"] != sjf["jain_users"]  # it measures the policy, not the trace


def test_compare_shows_jain_and_says_when_it_is_absent(grouped, shared, tmp_path):
    _, results, folder = grouped
    tables = {("g", "2x8", 0): {r.policy: pd.read_parquet(folder / r.policy / "jobs.parquet") for r in results}}
    text = drilldown.to_text(drilldown.drilldown(tables, "sjf", "fifo", {"2x8": 16}), "sjf", "fifo")
    assert "jain_users" in text and "jain_vcs" in text and "not computed" not in text
    # a synthetic trace names no users or VCs: the keys are absent (nothing NaN-logged) and the text says why
    assert shared.groups is None
    figures = drilldown.fairness(pd.read_parquet(shared.write(tmp_path) / "jobs.parquet"), 16)
    assert "jain_users" not in figures and "jain_vcs" not in figures
    tables = {("syn", "2x8", 0): {"castor": shared.jobs, "again": shared.jobs}}
    text = drilldown.to_text(drilldown.drilldown(tables, "castor", "again", {"2x8": 16}), "castor", "again")
    assert "not computed: jain_users (the replays' jobs.parquet has no 'user' column" in text and "jain_vcs (" in text


def test_one_vc_is_no_index(tmp_path):
    """One virtual cluster (an ITP file is one): Jain's index over VCs would be 1 by definition, so absent."""
    from schedlab.sched.replay import ReplaySpec, run

    _grouped_trace(tmp_path / "one.csv", vcs=1)
    [result] = run(ReplaySpec(trace=str(tmp_path / "one.csv"), format="canonical", cluster="2x8", policies=["fifo"]))
    figures = drilldown.fairness(result.jobs_with_groups(), 16)
    assert "jain_vcs" not in figures and 0 < figures["jain_users"] <= 1


def test_a_tracked_replay_logs_jain_only_where_the_trace_has_groups(tmp_path, seed_home, monkeypatch):
    """``log_replay`` (what every experiment runs): jain_users and jain_vcs logged for the grouped trace,
    equal to the index recomputed from the run's jobs.parquet; none at all for a synthetic trace."""
    from schedlab.sched.spec import load_config
    from schedlab.tasks import tracking
    from schedlab.tasks.replay import log_replay

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _grouped_trace(tmp_path / "grouped.csv")
    path = tmp_path / "exp.yaml"
    path.write_text("name: jain\ntraces:\n  - {name: g, source: grouped.csv, format: canonical}\n"
                    "  - {name: syn, options: {num_jobs: 50}}\nclusters: [2x8]\npolicies: [fifo]\n")
    uri = f"sqlite:///{seed_home(tmp_path / 'home', prefect=False) / 'mlflow.db'}"
    tracking.check_tracking(uri)
    exp = tracking.ensure_experiment(uri, "jain", tmp_path / "art")
    for spec in load_config(path).grid("test-version"):
        logged = log_replay(spec, uri, exp, None)
        metrics = tracking.client(uri).get_run(logged["run_id"]).data.metrics
        if spec.trace_label == "syn":
            assert not {"jain_users", "jain_vcs"} & set(metrics)
            continue
        jobs = pd.read_parquet(tracking.download(uri, logged["run_id"], "jobs.parquet", tmp_path / "dl"))
        assert metrics["jain_users"] == pytest.approx(_jain_by_hand(jobs, "user"), rel=1e-9, abs=1e-9)
        assert metrics["jain_vcs"] == pytest.approx(_jain_by_hand(jobs, "vc"), rel=1e-9, abs=1e-9)


def test_the_experiment_table_shows_jain_only_where_a_replay_reported_it():
    from schedlab.sched.reporting import compare

    base = {"avg_jct_s": 3600.0, "p95_jct_s": 7200.0, "avg_wait_s": 60.0, "avg_queue_s": 60.0, "makespan_s": 9e4,
            "gpu_util": 0.5, "preemptions": 0}
    rows = [{"trace": "g", "cluster": "2x8", "policy": p, "seed": s, **base, "jain_users": j + s / 100}
            for p, j in (("fifo", 0.8), ("sjf", 0.6)) for s in (0, 1)]
    table = compare.comparison(rows, "fifo")
    assert table.set_index("policy").loc["sjf", "jain_users"] == pytest.approx(0.605)
    assert "jain_vcs" not in table.columns  # no replay reported it
    text = compare.to_text(table)
    assert "jain_users" in text and "0.605 ± 0.007" in text
    plain = compare.comparison([{k: v for k, v in r.items() if k != "jain_users"} for r in rows], "fifo")
    assert "jain_users" not in plain.columns
