"""Engine invariants over random small traces and clusters (hypothesis), for every baseline policy."""

from __future__ import annotations

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.core.job import Job, jobs_from_table
from schedlab.sched.results.metrics import job_table
from schedlab.sched.policies import BASELINES, POLICIES, make_policy


class CheckedEngine(Engine):
    """The real engine, asserting the invariants after every scheduling pass and completion."""

    completions: dict[str, int]

    def _record_utilization(self) -> None:
        cluster = self.cluster
        held = [g for job in self.running for g in job.gpus]
        assert len(held) == len(set(held)), "a GPU is held by two jobs"
        assert len(held) == cluster.total_gpus - cluster.free_gpus <= cluster.total_gpus
        for job in self.running:
            assert len(job.gpus) == job.num_gpus, f"job {job.job_id} holds part of its gang"
            assert job.start_time >= job.submit_time
        super()._record_utilization()

    def _complete(self, job: Job) -> None:
        self.completions[job.job_id] = self.completions.get(job.job_id, 0) + 1
        super()._complete(job)


@st.composite
def scenarios(draw):
    servers = draw(st.integers(1, 3))
    per_server = draw(st.sampled_from([1, 2, 4, 8]))
    capacity = servers * per_server
    n = draw(st.integers(1, 25))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.5, 3.0, 40.0, 500.0]), min_size=n, max_size=n))
    rows = []
    t = 0.0
    for i, gap in enumerate(gaps):
        t += gap
        gpus = draw(st.sampled_from([g for g in (1, 2, 3, 4, 8, 16) if g <= capacity]))
        duration = draw(st.sampled_from([1.0, 7.5, 60.0, 3600.0, 20000.0]))
        rows.append((f"j{i}", t, gpus, duration))
    table = pd.DataFrame(rows, columns=["job_id", "submit_time", "num_gpus", "duration"])
    policy = draw(st.sampled_from(BASELINES))
    placements = ["fewest-servers", "consolidated", "best-fit", "random"]
    if POLICIES[policy].waits_when_refused:  # only these run under a strategy that may refuse
        placements += ["strict-consolidated", "strict-best-fit"]
    return f"{servers}x{per_server}", table, policy, draw(st.sampled_from(placements))


def _run(cluster: str, table: pd.DataFrame, policy: str, placement: str, seed: int = 0):
    jobs = jobs_from_table(table)
    engine = CheckedEngine(
        jobs, ClusterState(load_cluster(cluster)), make_policy(policy), placement=placement, seed=seed
    )
    engine.completions = {}
    result = engine.run()
    return engine, job_table(result)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants(scenario):
    cluster, table, policy, placement = scenario
    engine, jobs = _run(cluster, table, policy, placement)
    assert sorted(engine.completions) == sorted(table["job_id"]), "a job did not complete"
    assert set(engine.completions.values()) == {1}, "a job completed twice"
    assert (jobs["start_time"] >= jobs["submit_time"]).all()
    assert (jobs["jct_s"] >= jobs["duration"] - 1e-6).all()
    if policy in ("fifo", "sjf", "ssf", "backfill"):
        assert (jobs["preemptions"] == 0).all()
    if policy == "fifo":  # strict: start times follow submission order
        assert jobs.sort_values(["submit_time", "job_id"])["start_time"].is_monotonic_increasing


@settings(max_examples=40, deadline=None)
@given(scenarios(), st.integers(0, 3))
def test_same_seed_same_output(scenario, seed):
    cluster, table, policy, placement = scenario
    _, first = _run(cluster, table, policy, placement, seed)
    _, second = _run(cluster, table, policy, placement, seed)
    pd.testing.assert_frame_equal(first, second)
