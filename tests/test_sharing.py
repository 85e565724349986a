"""GPU sharing: Castor's Theorem 1 and Alg. 2, the fast SJF-BSBF search against the direct one,
memory feasibility, straggler pace, the interference sources, the engine's invariants under the
sharing policies, and the sharing metrics (eq. 24) -- against schedules computed by hand."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from helpers import SHARED_DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedlab.sched.models.annotate import annotate
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine, EngineError
from schedlab.sched.models.interference import (
    Analytic,
    GavelTable,
    InterferenceError,
    PairsTable,
    make_interference,
)
from schedlab.sched.core.job import Job, jobs_from_table
from schedlab.sched.results.metrics import job_table, sharing_summary
from schedlab.sched.policies import POLICIES, make_policy
from schedlab.sched.policies.base import Policy
from schedlab.sched.policies.sharing.policy import (
    SJFBSBF,
    algorithm2,
    sharing_threshold,
    theorem1,
)
from helpers import replay_table
from schedlab.sched.models.sharing import SharingModel
from schedlab.sched.traces import LoadOptions, load_trace
from test_engine_properties import CheckedEngine

REPO = Path(__file__).resolve().parents[1]
GAVEL_JSON = SHARED_DATA / "profiles" / "gavel" / "simulation_throughputs.json"


# ---- helpers -----------------------------------------------------------------------------------


def workload_table(rows) -> pd.DataFrame:
    """A job table from (job_id, submit, gpus, duration, model, per-GPU batch) rows."""
    return pd.DataFrame(rows, columns=["job_id", "submit_time", "num_gpus", "duration", "model", "batch_size"])


class Scripted(Policy):
    """Starts each job, in arrival order, exactly as ``plan[job_id]`` says (``engine.start`` kwargs);
    ``after(engine, job)`` runs after each start (to look at the engine at that instant)."""

    name = "scripted"
    default_preemption_overhead_s = 0.0

    def __init__(self, plan: dict[str, dict], after=None) -> None:
        super().__init__()
        self.plan, self.after, self.queue = plan, after, []

    def on_arrival(self, engine, job) -> None:
        self.queue.append(job)

    def schedule(self, engine) -> None:
        while self.queue:
            job = self.queue.pop(0)
            assert engine.start(job, **self.plan[job.job_id]), f"scripted start of {job.job_id} failed"
            if self.after:
                self.after(engine, job)


def scripted_run(rows, cluster: str, source, plan: dict[str, dict], after=None):
    spec = load_cluster(cluster)
    jobs = jobs_from_table(workload_table(rows))
    engine = Engine(jobs, ClusterState(spec), Scripted(plan, after), sharing=SharingModel.for_cluster(spec, source))
    result = engine.run()
    return engine, result, {j.job_id: j for j in jobs}


def pairs_csv(path: Path, rows) -> Path:
    frame = pd.DataFrame(rows, columns=list(PairsTable.COLUMNS))
    frame.to_csv(path, index=False)
    return path


# ---- 1. Theorem 1 --------------------------------------------------------------------------------


def test_theorem1_case1_by_hand():
    # A has 10 s left, B needs 4 s, ξ = 1.5 both: a ξ_A = 15 >= b ξ_B = 6, B ends first at 6;
    # A did 6/1.5 = 4 s of work, its last 6 s alone: ends at 12. Share: (6 + 12)/2 = 9.
    # Wait: A ends at 10, B at 14: (10 + 14)/2 = 12.
    share, t_share, t_wait = theorem1(10, 4, 4, 1.5, 1.5)
    assert share and t_share == pytest.approx(9) and t_wait == pytest.approx(12)
    # b (with accumulation) longer than b_wait: B ends at 6 x 1.5 = 9, A at 9 + 10 - 6 = 13 -> 11; wait (20 + 4)/2
    share, t_share, t_wait = theorem1(10, 6, 4, 1.5, 1.5)
    assert share and t_share == pytest.approx(11) and t_wait == pytest.approx(12)


def test_theorem1_case2_by_hand():
    # a = 2, b = 10, ξ_A = 1.2, ξ_B = 2: a ξ_A = 2.4 < 20: A ends first at 2.4; B did 1.2 s, 8.8 alone
    # -> 11.2. Share (2.4 + 11.2)/2 = 6.8; wait (2 + 12)/2 = 7 -> share (2ξ_B + ξ_A - 2ξ_Aξ_B = 0.4 > 0).
    share, t_share, t_wait = theorem1(2, 10, 10, 1.2, 2.0)
    assert share and t_share == pytest.approx(6.8) and t_wait == pytest.approx(7)
    # ξ_A = 2, ξ_B = 1.2: 2.4 + 2 - 4.8 < 0: A ends at 4, B did 4/1.2, rest alone -> 4 + 10 - 10/3
    share, t_share, t_wait = theorem1(2, 10, 10, 2.0, 1.2)
    assert not share and t_share == pytest.approx((4 + 14 - 10 / 3) / 2) and t_wait == pytest.approx(7)


def test_theorem1_boundary_is_a_tie_and_waits():
    # ξ_A = ξ_B = 1.5: 2ξ_B + ξ_A - 2ξ_Aξ_B = 3 + 1.5 - 4.5 = 0. Case 2 (a ξ_A = 3 < 15): A ends
    # at 3, B did 2 s and needs 8 alone -> 11: share (3 + 11)/2 = 7 = wait (2 + 2 + 10)/2.
    share, t_share, t_wait = theorem1(2, 10, 10, 1.5, 1.5)
    assert t_share == pytest.approx(t_wait) == pytest.approx(7)
    assert share is False
    for a in (0.5, 1.0, 3.0, 7.5):  # every a in case 2 is on the boundary: always a tie
        assert theorem1(a, 10, 10, 1.5, 1.5)[0] is False


xis = st.floats(1.0, 4.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.floats(0.01, 1e5), st.floats(0.01, 1e5), xis, xis)
def test_theorem1_case2_sign_rule(a, b, xi_a, xi_b):
    """In case 2 (with b = b_wait) sharing wins iff 2ξ_B + ξ_A - 2ξ_Aξ_B > 0 (eq. 23)."""
    if not a * xi_a < b * xi_b:
        return
    lhs = 2 * xi_b + xi_a - 2 * xi_a * xi_b
    share, t_share, t_wait = theorem1(a, b, b, xi_a, xi_b)
    # t_wait - t_share = a lhs / (2 ξ_B): away from the boundary the sign decides
    assert t_wait - t_share == pytest.approx(a * lhs / (2 * xi_b), rel=1e-9, abs=1e-7 * (a + b))
    if a * abs(lhs) / (2 * xi_b) > 1e-9 * (a + b):  # clear of theorem1's tie tolerance
        assert share == (lhs > 0)


def test_theorem1_case2_sign_rule_grid():
    a, b = 1.0, 100.0  # a ξ_A < b ξ_B for every ξ below: always case 2
    for i in range(11):
        for j in range(11):
            xi_a, xi_b = 1 + 0.2 * i, 1 + 0.2 * j
            lhs = 2 * xi_b + xi_a - 2 * xi_a * xi_b
            if abs(lhs) < 1e-9:
                assert not theorem1(a, b, b, xi_a, xi_b)[0]  # tie -> wait
            else:
                assert theorem1(a, b, b, xi_a, xi_b)[0] == (lhs > 0), (xi_a, xi_b)


options_st = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 4, 8]),
        st.floats(1.0, 3.0),  # ξ_new
        st.floats(1.0, 3.0),  # ξ_running
        st.floats(0.3, 1.0),  # solo speed with accumulation
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=400, deadline=None)
@given(options_st, st.floats(1.0, 1e5), st.floats(0.0, 5e5))
def test_sharing_threshold_is_a_lower_bound(options, remaining, a):
    threshold = sharing_threshold(remaining, options)
    share, _, _ = algorithm2(a, remaining, options)
    if share:
        assert a >= threshold * (1 - 1e-9) - 1e-9
    # tight (the docstring's "least time-to-go"): clearly past the threshold, some option's pair JCT
    # shared is no worse than waiting (it may be a tie within theorem1's tolerance when ξ makes the
    # benefit's slope ~0)
    if math.isfinite(threshold) and a > threshold + 1e-6 * (a + remaining):
        pairs = [theorem1(a, remaining / speed, remaining, xi_run, xi_new) for _, xi_new, xi_run, speed in options]
        assert max(t_wait - t_share for _, t_share, t_wait in pairs) > -1e-9 * (a + remaining)


@settings(max_examples=100, deadline=None)
@given(options_st, st.floats(1.0, 1e4), st.floats(0.01, 100.0))
def test_sharing_threshold_scales_with_remaining(options, remaining, factor):
    base = sharing_threshold(remaining, options)
    scaled = sharing_threshold(remaining * factor, options)
    if math.isinf(base):
        assert math.isinf(scaled)
    else:
        assert scaled == pytest.approx(base * factor, rel=1e-9, abs=1e-9)


# ---- 2. Algorithm 2 ------------------------------------------------------------------------------


def test_algorithm2_picks_the_lowest_pair_jct():
    left, remaining = 10.0, 4.0
    options = [(1, 1.5, 1.5, 1.0), (2, 1.2, 1.1, 0.8)]
    # option 1: theorem1(10, 4, 4, 1.5, 1.5) = 9. Option 2: b = 5, ξ_B = 1.2 -> B ends at 6,
    # A at 6 + 10 - 6/1.1; average (12 + 10 - 6/1.1)/2 = 8.2727 < 9 -> steps 2.
    share, steps, t = algorithm2(left, remaining, options)
    assert share and steps == 2 and t == pytest.approx((12 + 10 - 6 / 1.1) / 2)
    # order does not matter when one option is strictly better
    assert algorithm2(left, remaining, options[::-1])[1] == 2
    # a worse second option leaves the first
    assert algorithm2(left, remaining, [(1, 1.5, 1.5, 1.0), (2, 1.5, 1.5, 0.5)])[:2] == (True, 1)


def test_algorithm2_ties_go_to_the_smaller_batch():
    same = [(1, 1.5, 1.5, 1.0), (2, 1.5, 1.5, 1.0), (4, 1.5, 1.5, 1.0)]
    share, steps, t = algorithm2(10.0, 4.0, same)
    assert share and steps == 4 and t == pytest.approx(9)


def test_algorithm2_waits_when_no_option_beats_waiting():
    # a = 2, b = 10, ξ = 1.5: a tie (boundary) -> wait; ξ = 2.5 both: sharing loses outright.
    share, _, t = algorithm2(2.0, 10.0, [(1, 1.5, 1.5, 1.0), (2, 2.5, 2.5, 1.0)])
    assert not share and t == pytest.approx(7)  # the pair's JCT if B waits
    assert algorithm2(2.0, 10.0, []) == (False, 1, math.inf)


# ---- 3. the fast SJF-BSBF search equals the direct evaluation of every partner ----------------


class DirectBSBF(SJFBSBF):
    """SJF-BSBF evaluating Alg. 2 against every running job that holds a GPU alone."""

    name = "test-sjf-bsbf-direct"

    def beneficial(self, engine, job, enough):
        holders = engine.cluster.holders
        by_holder: dict[Job, list[int]] = {}
        for g in engine.cluster.single_gpu_ids():
            by_holder.setdefault(holders[g][0], []).append(g)
        found = []
        for partner, gpus in by_holder.items():
            options = self.options(engine, job, partner, max_steps=1 << 30)
            share, steps, pair_jct = algorithm2(engine.expected_end(partner) - engine.now, job.remaining, options)
            if share:
                found.append((pair_jct, partner.index, steps, partner, gpus))
        found.sort(key=lambda entry: (entry[0], entry[1]))
        return found


class FullyDirectBSBF(DirectBSBF):
    """The direct search with the policy's other short cuts off too: no remaining-time limit, no
    skipping of jobs that found no partner while the state did not change."""

    name = "test-sjf-bsbf-fully-direct"

    def _remaining_limit(self, engine, job):
        return math.inf

    def schedule(self, engine):
        self._no_partner_at.clear()
        super().schedule(engine)


@pytest.fixture
def direct_policies(monkeypatch):
    monkeypatch.setitem(POLICIES, DirectBSBF.name, DirectBSBF)
    monkeypatch.setitem(POLICIES, FullyDirectBSBF.name, FullyDirectBSBF)
    yield  # monkeypatch removes both afterwards


@pytest.fixture(scope="module")
def synthetic_traces():
    traces = {}
    for seed in (0, 1, 2):
        table, _ = load_trace(None, "synthetic", LoadOptions(num_jobs=300, max_gpus=32, load=4, seed=seed))
        traces[seed] = annotate(table, seed=seed)
    return traces


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("source", ["analytic", "analytic:1.3", "analytic:1.9"])
@pytest.mark.parametrize("mode", ["timeslice", "mps"])
def test_fast_bsbf_search_equals_direct(direct_policies, synthetic_traces, seed, source, mode):
    table = synthetic_traces[seed]
    fast = replay_table(table, "4x8", "sjf-bsbf", {"mode": mode}, interference=source)
    assert fast.summary["shared_job_fraction"] > 0  # the traces do exercise sharing
    for name in (DirectBSBF.name, FullyDirectBSBF.name):
        direct = replay_table(table, "4x8", name, {"mode": mode}, interference=source)
        pd.testing.assert_frame_equal(fast.jobs, direct.jobs)


def test_fast_bsbf_search_equals_direct_gavel(direct_policies, synthetic_traces):
    if not GAVEL_JSON.exists():
        pytest.skip(f"shared data not present: {GAVEL_JSON}")
    source = f"gavel:{GAVEL_JSON}"  # ξ differs per workload pair: the grouping matters
    fast = replay_table(synthetic_traces[1], "4x8", "sjf-bsbf", interference=source)
    direct = replay_table(synthetic_traces[1], "4x8", DirectBSBF.name, interference=source)
    pd.testing.assert_frame_equal(fast.jobs, direct.jobs)


def test_bsbf_never_starts_a_pair_that_cannot_run(tmp_path):
    # 20 GiB GPUs. J (imagenet b128, 2 GPUs) beside P1 (bert b12, 15 GiB) fits only at accumulation 4
    # (2.7 GiB); beside P2 (cifar10) it fits at any batch, but the table says the pair cannot run at
    # micro-batch 32 (ξ = inf). P1 ends sooner, so its pair is best and sets accumulation 4; P2's
    # best option is accumulation 1, and _choose keeps 4 for both without asking whether J at
    # micro-batch 32 can run beside P2: the engine then refuses the start.
    cluster = tmp_path / "c.yaml"
    cluster.write_text("name: c\npools:\n- servers: 1\n  gpus_per_server: 2\n  gpu_memory_gb: 20\n")
    table = pairs_csv(tmp_path / "pairs.csv", [
        ("imagenet", 128, "bert", 12, "timeslice", 50, 1.0, 1.0),
        ("imagenet", 128, "cifar10", 64, "timeslice", 50, 1.3, 1.3),
        ("imagenet", 32, "cifar10", 64, "timeslice", 50, math.inf, math.inf),
    ])
    rows = [("P1", 0, 1, 500, "bert", 12), ("P2", 0, 1, 1001, "cifar10", 64), ("J", 1, 2, 100, "imagenet", 128)]
    jobs = replay_table(workload_table(rows), str(cluster), "sjf-bsbf", interference=f"table:{table}").jobs
    assert (jobs["end_time"] - jobs["submit_time"] >= jobs["duration"]).all()


@pytest.mark.parametrize("gang_check", ["theorem1", "memory"])
def test_bsbf_gang_check_rejudges_partners_at_the_gang_batch(tmp_path, gang_check):
    # 20 GiB GPUs. J (imagenet b128, 2 GPUs, 100 s) beside P1 (bert b12) fits only at accumulation 4;
    # beside P2 (cifar10, 100 s left) Theorem 1 says share at accumulation 1 (pair JCT 140 s, the
    # best) but wait at 4, where J's solo speed drops to 0.75 (case 2: b - b_wait = 33 s > a(3 - 2ξ) = 20 s).
    # Alg. 1 line 12 keeps only pairs that win; the gang runs at the smallest batch any chosen pair
    # needs (4), so with gang_check: theorem1 P2 is re-judged there (found on sjf-bsbf-philly seed 9:
    # a 16-GPU job beside 600-h jobs at accumulation 4, +2.8 h average JCT); with the default
    # (memory) P2 only has to fit at 4, and J takes both GPUs at t = 1.
    cluster = tmp_path / "c.yaml"
    cluster.write_text("name: c\npools:\n- servers: 1\n  gpus_per_server: 2\n  gpu_memory_gb: 20\n")
    table = pairs_csv(tmp_path / "pairs.csv", [
        ("imagenet", 32, "bert", 12, "timeslice", 50, 1.0, 1.0),
        ("imagenet", 128, "cifar10", 64, "timeslice", 50, 1.4, 1.4),
        ("imagenet", 32, "cifar10", 64, "timeslice", 50, 1.4, 1.4),
    ])
    engine = Engine([], ClusterState(load_cluster(str(cluster))), Scripted({}),
                    sharing=SharingModel.for_cluster(load_cluster(str(cluster)), "analytic"))
    speed = engine.sharing.accumulation_speed(_job("J", "imagenet", 128, gpus=2), 4)
    assert theorem1(100.0, 100.0, 100.0, 1.4, 1.4)[0]  # P2 at accumulation 1: share
    assert not theorem1(100.0, 100.0 / speed, 100.0, 1.4, 1.4)[0]  # at accumulation 4: wait
    rows = [("P1", 0, 1, 500, "bert", 12), ("P2", 0, 1, 101, "cifar10", 64), ("J", 1, 2, 100, "imagenet", 128)]
    log: list[dict] = []
    SJFBSBF.decision_log = log
    try:
        jobs = replay_table(workload_table(rows), str(cluster), "sjf-bsbf", {"gang_check": gang_check},
                            interference=f"table:{table}").jobs
    finally:
        SJFBSBF.decision_log = None
    j = jobs.set_index("job_id").loc["J"]
    assert j["accumulation_steps"] == 4
    if gang_check == "theorem1":
        assert log and all(r["pred_share_s"] < r["pred_wait_s"] for r in log)  # every pair wins as it runs
        assert j["start_time"] == 101.0  # J waits for P2, then shares P1's GPU at accumulation 4
    else:
        assert j["start_time"] == 1.0  # beside P1 and P2 at once, P2's pair losing at accumulation 4
        assert any(r["pred_share_s"] >= r["pred_wait_s"] for r in log)

# ---- 4. memory feasibility -----------------------------------------------------------------------

# catalog memory: bert at batch 12 is 15 GiB per GPU, bert at 4 ~6.09 GiB, cifar10 at 32 ~0.63 GiB


def _job(job_id, model, batch, gpus=1, duration=100.0, index=0):
    return Job(job_id, 0.0, gpus, duration, index=index, model=model, batch_size=batch)


def test_can_share_only_when_both_fit():
    spec = load_cluster("1x1:t4")  # 16 GiB
    engine = Engine([], ClusterState(spec), Scripted({}), sharing=SharingModel.for_cluster(spec, "analytic"))
    big, small, tiny = _job("big", "bert", 12), _job("small", "bert", 4), _job("tiny", "cifar10", 32)
    assert engine.can_share(big, tiny)  # 15 + 0.63 <= 16
    assert not engine.can_share(big, small) and not engine.can_share(small, big)  # 15 + 6.09 > 16
    # halving big's micro-batch twice (accumulation 2: 6 per step -> 8.3 GiB) makes it fit
    assert engine.can_share(big, small, accumulation_steps=2)
    assert big.accumulation_steps == 1  # the check leaves the job as it was
    v100 = load_cluster("1x1:v100")  # 32 GiB: the same pair fits
    engine32 = Engine([], ClusterState(v100), Scripted({}), sharing=SharingModel.for_cluster(v100, "analytic"))
    assert engine32.can_share(big, small)
    # without a sharing model nothing shares
    assert not Engine([], ClusterState(spec), Scripted({})).can_share(big, tiny)


def test_engine_refuses_a_forced_start_that_does_not_fit(tmp_path):
    cluster = tmp_path / "small.yaml"
    cluster.write_text("name: small\npools:\n- servers: 1\n  gpus_per_server: 2\n  gpu_type: t4\n  gpu_memory_gb: 10\n")
    rows = [("A", 0, 1, 100, "bert", 4), ("B", 1, 1, 10, "bert", 4)]  # 6.09 GiB each: 12.2 > 10
    plan = {"A": {"placement": [(0, 1)]}, "B": {"share_gpus": (0,)}}
    with pytest.raises(EngineError, match="job B and job A do not fit in one GPU's memory"):
        scripted_run(rows, str(cluster), "analytic", plan)
    # the same on a 16 GiB GPU is fine and B runs at 1/1.5 speed
    _, _, jobs = scripted_run(rows, "1x2:t4", "analytic", plan)
    assert jobs["B"].end_time == pytest.approx(1 + 15)


def test_greedy_sharing_waits_when_memory_is_short():
    # sjf-ffs on one 16 GiB GPU: B (bert 12, 15 GiB) cannot go beside A (bert 4): it waits for A.
    rows = [("A", 0, 1, 100, "bert", 4), ("B", 1, 1, 10, "bert", 12), ("C", 2, 1, 10, "cifar10", 32)]
    jobs = replay_table(workload_table(rows), "1x1:t4", "sjf-ffs").jobs.set_index("job_id")
    # C (0.63 GiB) shares with A at 2 (ξ 1.5): ends at 17; B starts alone at A's end
    assert jobs.at["C", "start_time"] == 2 and jobs.at["C", "end_time"] == pytest.approx(17)
    assert jobs.at["A", "end_time"] == pytest.approx(105)  # 15 s beside C at 1/1.5 speed: 5 s lost
    assert jobs.at["B", "start_time"] == pytest.approx(105) and jobs.at["B", "shared_s"] == 0


# ---- 5. straggler pace ---------------------------------------------------------------------------


@pytest.fixture
def straggler_table(tmp_path):
    # imagenet beside P1 (cifar10): ξ 1.2 for it, 1.25 for P1; beside P2 (ncf): 2.0 for it, 1.5 for P2
    return pairs_csv(tmp_path / "pairs.csv", [
        ("imagenet", 64, "cifar10", 64, "timeslice", 50, 1.2, 1.25),
        ("imagenet", 64, "ncf", 256, "timeslice", 50, 2.0, 1.5),
    ])


def test_straggler_runs_at_the_slowest_pace_and_speeds_up(straggler_table):
    # S (a 2-GPU imagenet job) goes beside P1 on GPU 0 and P2 on GPU 1 (the scripted policy starts
    # jobs in (submit, id) order: P1, P2, S)
    rows = [("P1", 0, 1, 100, "cifar10", 64), ("P2", 0, 1, 30, "ncf", 256), ("S", 0, 2, 60, "imagenet", 64)]
    plan = {"P1": {"placement": [(0, 1)]}, "P2": {"placement": [(0, 1)]}, "S": {"share_gpus": (0, 1)}}
    seen = {}

    def after(engine, job):
        if job.job_id == "S":
            seen["pace"] = job.pace
            seen["gpus"] = {j.job_id: j.gpus for j in engine.running}
            seen["free_at"] = (engine.gpus_free_at(1), engine.gpus_free_at(2), engine.gpus_free_at(3))

    _, result, jobs = scripted_run(rows, "1x2", f"table:{straggler_table}", plan, after)
    p1, p2, j = jobs["P1"], jobs["P2"], jobs["S"]
    assert seen["gpus"] == {"P1": (0,), "P2": (1,), "S": (0, 1)}
    assert seen["pace"] == 2.0  # the slowest of its two GPUs
    # t=0..45: P2 runs at 1/1.5 and ends at 45; S did 45/2 = 22.5; P1 did 45/1.25 = 36.
    # t=45..: S beside P1 only, pace 1.2: 37.5 x 1.2 = 45 -> ends at 90; P1 did 36 more (72).
    # P1 then alone: 28 s -> 118.
    assert p2.end_time == pytest.approx(45)
    assert j.end_time == pytest.approx(90)
    assert p1.end_time == pytest.approx(118)
    # expected ends at t=0 (S's pace 2): P2 45, S 120, P1 125; a GPU frees when its last holder ends
    assert seen["free_at"] == (pytest.approx(120), pytest.approx(125), math.inf)
    table = job_table(result).set_index("job_id")
    assert table.at["S", "avg_xi"] == pytest.approx((45 * 2.0 + 45 * 1.2) / 90)
    assert table.at["P1", "avg_xi"] == pytest.approx((90 * 1.25 + 28) / 118)
    assert table.at["S", "shared_s"] == pytest.approx(90) and table.at["P1", "shared_s"] == pytest.approx(90)
    # eq. 24: S waited for 2 GPUs -> both free at 100 (P2's 30, P1's 100 at t=0); + 60 s solo
    assert table.at["S", "exclusive_jct_estimate"] == pytest.approx(160)
    assert math.isnan(table.at["P1", "exclusive_jct_estimate"])
    assert result.shared_gpu_seconds == pytest.approx(45 + 90)  # GPU1 0..45, GPU0 0..90


def test_straggler_under_sjf_ffs(straggler_table):
    """The same scenario chosen by a real policy: P1 and P2 take both GPUs, J goes beside them."""
    rows = [("P1", 0, 1, 100, "cifar10", 64), ("P2", 0, 1, 30, "ncf", 256), ("J", 0.5, 2, 60, "imagenet", 64)]
    jobs = replay_table(workload_table(rows), "1x2", "sjf-ffs", interference=f"table:{straggler_table}").jobs
    jobs = jobs.set_index("job_id")
    # from 0.5: P2 has 29.5 left at 1/1.5 -> ends 44.75; J did 44.25/2; then pace 1.2
    j_left = 60 - 44.25 / 2
    assert jobs.at["P2", "end_time"] == pytest.approx(0.5 + 29.5 * 1.5)
    assert jobs.at["J", "end_time"] == pytest.approx(44.75 + j_left * 1.2)


# ---- 6. interference sources ---------------------------------------------------------------------


def test_analytic_source():
    a, b = _job("a", "cifar10", 64), _job("b", "bert", 4)
    assert Analytic().ratio(a, b, "timeslice") == (1.5, 1.5)
    assert Analytic().ratio(a, b, "mps") == pytest.approx((1 + 0.57 * 0.5,) * 2)  # MPS keeps 57% of the excess
    assert make_interference("analytic:1.9").ratio(a, b, "mps") == pytest.approx((1 + 0.57 * 0.9,) * 2)
    assert make_interference("analytic:1.3").ratio(a, b, "timeslice", (30.0, 70.0)) == (1.3, 1.3)
    assert Analytic(2.0, mps=1.1).ratio(a, b, "mps") == (1.1, 1.1)
    assert make_interference(None).name == "analytic:1.5"
    with pytest.raises(InterferenceError, match=">= 1"):
        Analytic(0.9)
    with pytest.raises(InterferenceError, match="unknown sharing mode 'spatial'"):
        Analytic().ratio(a, b, "spatial")


def test_pairs_table_source(tmp_path):
    path = pairs_csv(tmp_path / "pairs.csv", [
        ("cifar10", 32, "ncf", 256, "timeslice", 50, 1.1, 1.2),
        ("cifar10", 128, "ncf", 256, "timeslice", 50, 1.3, 1.4),
        ("cifar10", 128, "ncf", 256, "mps", 30, 1.05, 1.06),
        ("cifar10", 128, "ncf", 256, "mps", 70, 1.01, 1.02),
    ])
    source = make_interference(f"table:{path}")
    assert isinstance(source, PairsTable)
    ncf = _job("n", "ncf", 512)
    assert source.ratio(_job("c", "cifar10", 40), ncf, "timeslice") == (1.1, 1.2)  # nearest batch: 32
    assert source.ratio(_job("c", "cifar10", 100), ncf, "timeslice") == (1.3, 1.4)  # nearest: 128
    cifar = _job("c", "cifar10", 128)
    assert source.ratio(cifar, ncf, "mps", (70.0, 30.0)) == (1.01, 1.02)  # the measured share
    assert source.ratio(cifar, ncf, "mps", (30.0, 70.0)) == (1.05, 1.06)
    # micro-batch: accumulation 4 turns batch 128 into 32 steps
    cifar.accumulation_steps = 4
    assert source.ratio(cifar, ncf, "timeslice") == (1.1, 1.2)
    # a pair it does not cover (the other order) goes to the analytic fallback, counted once per pair
    assert source.ratio(ncf, cifar, "timeslice") == (1.5, 1.5)
    assert source.ratio(ncf, cifar, "timeslice") == (1.5, 1.5)
    assert source.fallbacks == 1


def test_pairs_table_errors_name_the_row(tmp_path):
    good = ("cifar10", 32, "ncf", 256, "timeslice", 50, 1.1, 1.2)
    bad = pairs_csv(tmp_path / "bad.csv", [good, ("cifar10", 64, "ncf", 256, "timeslice", 50, 0.8, 1.2)])
    with pytest.raises(InterferenceError, match=r"bad\.csv, row 2: xi_a / xi_b must be numbers >= 1"):
        make_interference(f"table:{bad}")
    nan = pairs_csv(tmp_path / "nan.csv", [good, good, ("cifar10", 64, "ncf", 256, "timeslice", 50, 1.2, None)])
    with pytest.raises(InterferenceError, match="row 3"):
        PairsTable(nan)
    missing = tmp_path / "missing.csv"
    pd.DataFrame([good[:6]], columns=list(PairsTable.COLUMNS[:6])).to_csv(missing, index=False)
    with pytest.raises(InterferenceError, match=r"missing columns \['xi_a', 'xi_b'\]"):
        PairsTable(missing)
    with pytest.raises(InterferenceError, match="not found"):
        PairsTable(tmp_path / "nope.csv")


def test_pairs_table_keys_rows_by_the_jobs_device_counts(tmp_path):
    """A 2-device job beside a one-device partner on each of its devices reads the rows measured so
    (both orientations); other counts read the one-device pair's."""
    columns = [*PairsTable.COLUMNS[:6], "gpus_a", "gpus_b", "xi_a", "xi_b"]
    rows = [("imagenet", 32, "deepspeech2", 16, "timeslice", 100, 1, 1, 1.75, 2.2),
            ("deepspeech2", 16, "imagenet", 32, "timeslice", 100, 1, 1, 2.2, 1.75),
            ("imagenet", 32, "deepspeech2", 16, "timeslice", 100, 2, 1, 2.3, 2.6),
            ("deepspeech2", 16, "imagenet", 32, "timeslice", 100, 1, 2, 2.6, 2.3)]
    path = tmp_path / "gang.csv"
    pd.DataFrame(rows, columns=columns).to_csv(path, index=False)
    source = make_interference(f"table:{path}")
    one, speech = _job("i", "imagenet", 32), _job("d", "deepspeech2", 16)
    two, four = _job("i2", "imagenet", 32, gpus=2), _job("i4", "imagenet", 32, gpus=4)
    assert source.ratio(one, speech, "timeslice") == (1.75, 2.2)
    assert source.ratio(two, speech, "timeslice") == (2.3, 2.6)
    assert source.ratio(speech, two, "timeslice") == (2.6, 2.3)
    assert source.ratio(four, speech, "timeslice") == (1.75, 2.2) and source.fallbacks == 0  # not measured
    half = tmp_path / "half.csv"
    pd.DataFrame(rows, columns=columns).drop(columns="gpus_b").to_csv(half, index=False)
    with pytest.raises(InterferenceError, match=r"half\.csv: column gpus_a without gpus_b"):
        PairsTable(half)
    zero = tmp_path / "zero.csv"
    pd.DataFrame([*rows[:2], rows[2][:6] + (0, 1) + rows[2][8:]], columns=columns).to_csv(zero, index=False)
    with pytest.raises(InterferenceError, match=r"zero\.csv, row 3: gpus_a / gpus_b must be whole numbers >= 1"):
        PairsTable(zero)


def test_gavel_table_source():
    if not GAVEL_JSON.exists():
        pytest.skip(f"shared data not present: {GAVEL_JSON}")
    measured = json.loads(GAVEL_JSON.read_text())["v100"]
    r50, r18 = "('ResNet-50 (batch size 64)', 1)", "('ResNet-18 (batch size 16)', 1)"
    paired = measured[r50][r18]
    expect = (measured[r50]["null"] / paired[0], measured[r18]["null"] / paired[1])
    source = make_interference(f"gavel:{GAVEL_JSON}")
    assert isinstance(source, GavelTable) and source.name == "gavel:v100"
    imagenet, cifar = _job("i", "imagenet", 64), _job("c", "cifar10", 16)
    xi = source.ratio(imagenet, cifar, "timeslice")
    assert xi == pytest.approx(expect) and all(x > 1 for x in xi)
    # MPS: the 43% rule on Gavel's (time-sliced) measurement; the reverse pair swaps
    assert source.ratio(imagenet, cifar, "mps") == pytest.approx([1 + 0.57 * (x - 1) for x in expect])
    assert source.ratio(cifar, imagenet, "timeslice") == pytest.approx(expect[::-1])
    assert source.fallbacks == 0
    assert make_interference(f"gavel:{GAVEL_JSON}:k80").name == "gavel:k80"
    with pytest.raises(InterferenceError, match="not found"):
        GavelTable("/nonexistent/throughputs.json")


def test_model_source():
    source = make_interference(f"model:{REPO / 'conf' / 'models' / 'interference-gavel-v100'}")
    assert source.name.startswith("model:")
    jobs = [_job("c", "cifar10", 64), _job("i", "imagenet", 32), _job("b", "bert", 8)]
    for a in jobs:
        for b in jobs:
            for mode in ("timeslice", "mps"):
                xi = source.ratio(a, b, mode, (50.0, 50.0) if mode == "mps" else None)
                assert all(math.isfinite(x) and x >= 1 for x in xi), (a.model, b.model, mode, xi)


def test_unknown_source_is_an_error():
    with pytest.raises(InterferenceError, match="unknown interference source 'nope:1'"):
        make_interference("nope:1")


# ---- 7. engine invariants under the sharing policies ---------------------------------------------


class SharingCheckedEngine(CheckedEngine):
    """CheckedEngine for sharing: at most two jobs per GPU, both fitting in its memory; every running
    job holds its whole gang; partners and paces agree with who is on which GPU."""

    def _record_utilization(self) -> None:
        cluster = self.cluster
        on_gpu: dict[int, list[Job]] = {}
        for job in self.running:
            assert len(job.gpus) == len(set(job.gpus)) == job.num_gpus, f"job {job.job_id} holds part of its gang"
            assert job.start_time >= job.submit_time
            for g in job.gpus:
                on_gpu.setdefault(g, []).append(job)
        for g, holders in enumerate(cluster.holders):
            assert len(holders) <= 2, f"GPU {g} holds {len(holders)} jobs"
            assert sorted(map(id, holders)) == sorted(map(id, on_gpu.get(g, []))), f"GPU {g}: holders disagree"
            if len(holders) == 2:
                a, b = holders
                assert self.sharing.memory_gib(a) + self.sharing.memory_gib(b) <= cluster.gpu_memory_gib + 1e-9
        assert cluster.free_gpus == sum(1 for h in cluster.holders if not h)
        assert cluster.double_gpus == sum(1 for h in cluster.holders if len(h) == 2)
        assert cluster.single_gpus == sum(1 for h in cluster.holders if len(h) == 1)
        for job in self.running:
            shared = Counter(h for g in job.gpus for h in cluster.holders[g] if h is not job)
            assert dict(shared) == {p: c for p, (c, _) in (job.partners or {}).items()}, f"job {job.job_id} partners"
            pace = max((xi for _, xi in job.partners.values()), default=1.0) if job.partners else 1.0
            assert job.pace == pace and job.rate == pytest.approx(job.solo_speed / pace)
        # gpus_free_at(n): the n-th soonest time a busy GPU's last holder ends
        frees = sorted(max(self.expected_end(h) for h in holders) for holders in cluster.holders if holders)
        for needed in {1, len(frees) // 2, len(frees)} - {0} if frees else ():
            assert self.gpus_free_at(needed) == pytest.approx(frees[needed - 1], rel=1e-9)
        assert self.gpus_free_at(len(frees) + 1) == math.inf and self.gpus_free_at(0) == self.now
        Engine._record_utilization(self)


SHARING_POLICIES = {
    "sjf-ffs": None,
    "sjf-bsbf": None,
    "sjf-bsbf-mps": ("sjf-bsbf", {"mode": "mps"}),
    "castor": {"predictor": "analytic:1.2"},  # predictions that differ from the truth (the XGBoost one is slow)
    "lucid": None,
    "gandiva": None,
    "gavel": {"round_s": 600.0},
}


@st.composite
def sharing_scenarios(draw):
    cluster = draw(st.sampled_from(["1x2", "1x4", "2x2", "2x4"]))
    capacity = load_cluster(cluster).total_gpus
    n = draw(st.integers(1, 14))
    rows, t = [], 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.5, 30.0, 400.0]))
        gpus = draw(st.sampled_from([g for g in (1, 1, 2, 4) if g <= capacity]))
        duration = draw(st.sampled_from([5.0, 90.0, 1800.0, 7200.0]))
        rows.append((f"j{i}", t, gpus, duration))
    table = pd.DataFrame(rows, columns=["job_id", "submit_time", "num_gpus", "duration"])
    table = annotate(table, seed=draw(st.integers(0, 3)), gpu_type="t4")
    source = draw(st.sampled_from(["analytic", "analytic:1.1", "analytic:1.9"]))
    return cluster, table, draw(st.sampled_from(sorted(SHARING_POLICIES))), source


def _run_sharing(cluster: str, table: pd.DataFrame, key: str, source: str, seed: int = 0):
    entry = SHARING_POLICIES[key]
    policy, params = entry if isinstance(entry, tuple) else (key, entry)
    spec = load_cluster(cluster)
    engine = SharingCheckedEngine(
        jobs_from_table(table), ClusterState(spec), make_policy(policy, params), seed=seed,
        sharing=SharingModel.for_cluster(spec, source),
    )
    engine.completions = {}
    return engine, job_table(engine.run())


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sharing_scenarios())
def test_sharing_invariants(scenario):
    cluster, table, policy, source = scenario
    engine, jobs = _run_sharing(cluster, table, policy, source)
    assert sorted(engine.completions) == sorted(table["job_id"]), "a job did not complete"
    assert set(engine.completions.values()) == {1}, "a job completed twice"
    assert (jobs["start_time"] >= jobs["submit_time"]).all()
    # sharing slows a job down, never speeds it up
    assert (jobs["jct_s"] >= jobs["duration"] * (1 - 1e-9) - 1e-6).all()
    assert (jobs["end_time"] - jobs["start_time"] >= jobs["duration"] * (1 - 1e-9) - 1e-6).all()
    assert (jobs["avg_xi"] >= 1 - 1e-9).all()
    assert engine.cluster.free_gpus == engine.cluster.total_gpus and not engine.running


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sharing_scenarios(), st.integers(0, 3))
def test_sharing_same_seed_same_output(scenario, seed):
    cluster, table, policy, source = scenario
    _, first = _run_sharing(cluster, table, policy, source, seed)
    _, second = _run_sharing(cluster, table, policy, source, seed)
    pd.testing.assert_frame_equal(first, second)


# ---- 8. sharing metrics --------------------------------------------------------------------------


def test_sharing_metrics_by_hand():
    # 1x2, analytic ξ 1.5. A (2 GPUs, 100 s) at 0; B (1 GPU, 20 s) at 10 beside A on one GPU;
    # C (1 GPU, 5 s) at 120 alone.
    rows = [("A", 0, 2, 100, "cifar10", 64), ("B", 10, 1, 20, "cifar10", 64), ("C", 120, 1, 5, "ncf", 256)]
    plan = {"A": {"placement": [(0, 2)]}, "B": {"share_gpus": (0,)}, "C": {}}
    _, result, jobs = scripted_run(rows, "1x2", "analytic", plan)
    # B: 20 s at 1/1.5 -> 10..40. A (straggler on its shared GPU): 10 s, then 30 s at 1/1.5 (20 s of
    # work), then 70 s alone -> 110. C: 120..125.
    assert (jobs["A"].end_time, jobs["B"].end_time, jobs["C"].end_time) == pytest.approx((110, 40, 125))
    table = job_table(result)
    summary = sharing_summary(table, result)
    assert summary["shared_job_fraction"] == pytest.approx(2 / 3)  # A and B
    # busy GPU-seconds: 2 x 110 (A; B shares one of them) + 5 (C); shared: one GPU 10..40
    assert result.busy_gpu_seconds == pytest.approx(225) and result.shared_gpu_seconds == pytest.approx(30)
    assert summary["shared_gpu_time_fraction"] == pytest.approx(30 / 225)
    xi_a = (10 + 30 * 1.5 + 70) / 110
    assert summary["avg_xi"] == pytest.approx((xi_a + 1.5 + 1.0) / 3)
    assert summary["avg_xi_shared_jobs"] == pytest.approx((xi_a + 1.5) / 2)
    # eq. 24: B would have had a GPU when A ended (100, at t=10) and then run 20 s: 120 - 10 = 110
    # from submission; it took 30 -> benefit 110/30. Only B started beside another job.
    by_id = table.set_index("job_id")
    assert by_id.at["B", "exclusive_jct_estimate"] == pytest.approx(110)
    assert summary["avg_sharing_benefit"] == pytest.approx(110 / 30)


def test_sharing_metrics_through_replay():
    # sjf-ffs on one GPU: A (100 s) at 0, B (10 s) at 1 shares at once (ξ 1.5): B ends 16, A 105.
    rows = [("A", 0, 1, 100, "cifar10", 64), ("B", 1, 1, 10, "cifar10", 64)]
    result = replay_table(workload_table(rows), "1x1", "sjf-ffs")
    summary = result.summary
    assert summary["shared_job_fraction"] == 1.0
    assert summary["shared_gpu_time_fraction"] == pytest.approx(15 / 105)
    # B alone: GPU free at 100, + 10 s -> 110 - 1 = 109 over its JCT of 15
    assert summary["avg_sharing_benefit"] == pytest.approx(109 / 15)
    assert summary["avg_xi"] == pytest.approx(((90 + 15 * 1.5) / 105 + 1.5) / 2)
