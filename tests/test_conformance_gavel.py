"""schedlab's ``gavel`` against Gavel's own simulator (issue #23), and the differences located on it.

The simulator's per-job JCTs on its 96-job ``max_min_fairness`` trace (16 V100s) are fixtures
(``fixtures/conformance/gavel-*.csv``, recorded by ``schedlab.studies.conformance.gavel_record``, which
states the commit, flags and the analysis-only edit of its fractional-steps variant). Bars: average
JCT within 1 % on every case; with Gavel's solver's equal shares (``gavel-ecos-ties``) against the
simulator without whole-step rounds, at least 90 % of jobs within 1 s."""

from __future__ import annotations

import pandas as pd
import pytest
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.policies import make_policy
from schedlab.sched.policies.gavel.lp import build_problem, solve
from schedlab.studies.conformance import common, gavel
from helpers import replay_table



@pytest.mark.parametrize("case", sorted(gavel.CASES))
def test_schedlab_gavel_agrees_with_the_authors_simulator(case):
    _, _, least_within_1s = gavel.CASES[case]
    r = common.compare(gavel.run_ours(case), gavel.load_expected(case))
    assert r["jobs"] == 96
    assert abs(r["avg_jct_rel"]) <= gavel.AVG_JCT_BAR, r
    assert r["within_1s"] >= least_within_1s, r
    assert abs(r["makespan_s"] / r["makespan_s_peer"] - 1) <= 0.01, r


def test_every_variant_has_its_recorded_output():
    columns = ["job_id", "job_type", "scale_factor", "total_steps", "arrival_time", "duration_s", "jct_s"]
    for variant in gavel.VARIANTS:
        expected = pd.read_csv(gavel.fixture_path(variant))
        assert list(expected.columns) == columns and len(expected) == 96
        assert (expected["jct_s"] >= expected["duration_s"] - 1e-3).all()


# ---- the located differences, on three jobs ---------------------------------------------------------
@pytest.mark.parametrize("after_start, started", [(True, 360.0), (False, 2160.0)])
def test_a_resolve_at_time_zero_does_not_start_the_interval(after_start, started):
    """Gavel's simulator reads a last reset at time 0 as "never reset". A 2-GPU job runs alone on two
    GPUs from time 0; a 1-GPU job arriving at 100 s is owed the larger share (X = 1 against 0.5: equal
    GPU share) once the LP is re-solved: at the next round (360 s) as Gavel's code does, or, counting
    the 1,920 s interval from time 0, at the first round boundary after it (2,160 s)."""
    frame = pd.DataFrame({"job_id": ["big", "small"], "submit_time": [0.0, 100.0], "num_gpus": [2, 1],
                          "duration": [5000.0, 5000.0]})
    params = {"space_sharing": False, "resolve_after_start": after_start}
    jobs = replay_table(frame, "2x1", "gavel", params, preemption_overhead_s=0.0).jobs.set_index("job_id")
    assert jobs.loc["small", "start_time"] == started
    assert jobs.loc["big", "preemptions"] >= 1


def test_refine_tolerance_breaks_equal_shares_and_zero_keeps_them():
    """Three equal one-GPU jobs on two GPUs: the optimum is unique, 2/3 each. The second stage may lower
    the minimum by ``tolerance`` (relative), and the capacity it frees goes to one job (a vertex), which
    the round ranking (X / time received) then puts first; with 0 the three stay equal, as ECOS (Gavel's
    solver) returns them. Both keep the minimum within the tolerance and fill the two GPUs."""
    problem = build_problem([1, 1, 1], [(0,), (1,), (2,)], [(1.0,), (1.0,), (1.0,)], capacity=2)
    refined, exact = solve(problem, "max_min_fairness"), solve(problem, "max_min_fairness", tolerance=0.0)
    assert refined.value == exact.value == pytest.approx(2 / 3)
    assert refined.x.sum() == pytest.approx(2.0) and exact.x.sum() == pytest.approx(2.0)
    assert refined.x.max() - refined.x.min() > 1e-7  # one job holds the slack
    assert refined.x.min() >= 2 / 3 * (1 - 1e-6) - 1e-12
    assert exact.x == pytest.approx([2 / 3] * 3, abs=1e-12)


def test_allocation_decimals_and_tolerance_are_validated():
    for bad in ({"allocation_decimals": 0}, {"allocation_decimals": 16}, {"refine_tolerance": -1e-9},
                {"refine_tolerance": 1.0}):
        with pytest.raises(ValueError):
            make_policy("gavel", bad)
    with pytest.raises(ValueError, match="tolerance"):
        solve(build_problem([1], [(0,)], [(1.0,)], capacity=1), "max_min_fairness", tolerance=1.5)


def test_allocation_decimals_rounds_the_allocation():
    """``allocation_decimals`` rounds X (HiGHS leaves dust in the last bits of equal jobs' shares)."""
    frame = pd.DataFrame({"job_id": ["a", "b", "c"], "submit_time": [0.0] * 3, "num_gpus": [1] * 3,
                          "duration": [1000.0] * 3})
    for digits, share in ((None, 2 / 3), (1, 0.7)):
        policy = make_policy("gavel", {"space_sharing": False, "refine_tolerance": 0.0, "allocation_decimals": digits})
        solved = []
        reallocate = policy._reallocate
        policy._reallocate = lambda engine, policy=policy, reallocate=reallocate: (
            reallocate(engine), solved.append(dict(policy.alloc)))
        Engine(jobs_from_table(frame), ClusterState(load_cluster("2x1")), policy, preemption_overhead_s=0.0).run()
        assert list(solved[0].values()) == pytest.approx([share] * 3, abs=1e-12)
