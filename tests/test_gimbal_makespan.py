"""``gimbal-makespan`` over Gavel (Gimbal §3, §6, §7.2): Gavel's LP sees the pair throughputs Gimbal
measured after calibrating a pair, and a Gavel round that keeps a pair on its GPUs keeps its calibration
(no aborted search, no new switch). Plain Gavel has no measured rates (its replays stay bit-identical:
tests/test_replay_digests.py)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from helpers import make_table
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.models.interference import Analytic, MpsCap
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.policies import make_policy
from schedlab.sched.models.sharing import SharingModel

LONG = 20000.0


def pair_run(params=None, third_at=None, b_work=LONG / 2):
    """bert (long, swelled) beside ncf (shorter, squeezed) on one A40 under Gavel's makespan LP;
    ξ⁰ = 1.3 under MPS, so the pair is an LP column (1/1.3 + 1/1.3 > 1). ``third_at``: a third job
    arrives then, which makes Gavel re-solve its LP after the search."""
    rows = [("A", 0, 1, LONG), ("B", 0, 1, b_work)]
    models = [("bert", 12.0), ("ncf", 256.0)]
    if third_at is not None:
        rows.append(("C", third_at, 1, LONG / 4))
        models.append(("ncf", 256.0))
    table = make_table(rows)
    table["model"] = [m for m, _ in models]
    table["batch_size"] = [b for _, b in models]
    spec = load_cluster("1x1:a40")
    policy = make_policy("gimbal-makespan", params)
    engine = Engine(jobs_from_table(table), ClusterState(spec), policy,
                    sharing=SharingModel.for_cluster(spec, MpsCap(Analytic(timeslice=1.3, mps=1.3))))
    return engine, {j.job_id: j for j in engine.jobs}


def observe(engine):
    """Record, after every pass of Gavel (rounds and events), the state of the pair, and every LP column
    list Gavel builds at a re-solve (observation only: both wrap the real methods)."""
    gimbal = engine.policy
    base, coordinator = gimbal.base, gimbal.coordinator
    passes, columns = [], []
    schedule, combinations = base.schedule, base._combinations

    def on_pass(view):
        schedule(view)
        a, b = (next(j for j in engine.jobs if j.job_id == name) for name in "AB")
        passes.append({"now": engine.now, "rounds": len(base.round_times), "b_shares": dict(b.workers.shares or {}) if b.workers else {},
                       "a_rate": 1 / a.pace, "b_rate": 1 / b.pace, "b_running": b.running, "searching": bool(coordinator.searches), "aborted": coordinator.aborted,
                       "switches": coordinator.lgrr_switches, "searches": len(coordinator.search_seconds)})

    def on_combinations(view, jobs):
        combos, rates = combinations(view, jobs)
        measured = {(i, k): r for i, of in coordinator.measured.items() for k, r in of.items()}
        columns.append((view.now, dict(zip(combos, rates)), measured))
        return combos, rates

    base.schedule, base._combinations = on_pass, on_combinations
    return passes, columns


def test_plain_gavel_has_no_measured_rates():
    gavel = make_policy("gavel", {"objective": "makespan", "mode": "mps"})
    assert gavel.measured_rates is None


def test_gavel_lp_receives_the_calibrated_pair_rates():
    engine, jobs = pair_run(third_at=4000)
    passes, columns = observe(engine)
    engine.run()
    gimbal, a, b = engine.policy, jobs["A"], jobs["B"]
    assert gimbal.coordinator.measured == {}  # finished jobs' pairs are dropped
    assert gimbal.base._pair_rates(engine, a, b) == pytest.approx((1 / 1.3, 1 / 1.3))  # Gavel's own estimate
    _, first, measured = columns[0]
    assert not measured and first[(0, 1)] == pytest.approx((1 / 1.3, 1 / 1.3))  # first solve: nothing measured
    _, resolved, measured = next(c for c in columns if c[0] > 4000)  # C arrived: Gavel re-solves
    searched = next(p for p in passes if p["searches"] == 1)
    assert searched["b_rate"] < 1 / 1.3 < searched["a_rate"]  # makespan: the shorter B squeezed to swell A (§5.2)
    assert measured[(0, 1)] == pytest.approx((searched["a_rate"], searched["b_rate"]))  # 1 / pace after the search
    assert resolved[(0, 1)] == measured[(0, 1)]  # the LP column is the measured one
    assert measured[(1, 0)] == measured[(0, 1)][::-1]
    assert gimbal.base.measured_rates == gimbal.coordinator.measured_rates


def test_feed_rates_off_keeps_gavels_estimate():
    engine, _ = pair_run({"feed_rates": False}, third_at=4000)
    _, columns = observe(engine)
    engine.run()
    assert engine.policy.base.measured_rates is None
    assert any(measured for *_, measured in columns)  # measured, but not given to Gavel
    assert all(cols[(0, 1)] == pytest.approx((1 / 1.3, 1 / 1.3)) for _, cols, _ in columns if (0, 1) in cols)


def test_a_round_that_keeps_the_pair_keeps_its_calibration():
    # B has 90 % of A's work: Gavel's makespan LP runs the pair most of the time (A alone now and then), so
    # several rounds in a row re-plan the same pair on the same GPU; they must leave its calibration alone
    engine, _ = pair_run(b_work=0.9 * LONG)
    passes, _ = observe(engine)
    engine.run()
    kept = [(before, after) for before, after in pairwise(passes)
            if before["searches"] and not before["searching"] and before["b_running"] and after["b_running"]
            and after["rounds"] == before["rounds"] + 1 and before["b_shares"][0] < 1.0]
    assert len(kept) >= 4  # round boundaries with the calibrated (B squeezed) pair running on both sides
    for before, after in kept:  # same cap, no switch, no aborted or new search
        assert (after["b_shares"], after["switches"], after["aborted"], after["searches"], after["searching"]) == (
            before["b_shares"], before["switches"], before["aborted"], before["searches"], False)


def searches_started(params):
    """(time, Gavel rounds so far, set changed at) of every search start of the pair run (B at 90 % of A's work)."""
    engine, _ = pair_run(params, b_work=0.9 * LONG)
    coordinator, base, starts = engine.policy.coordinator, engine.policy.base, []
    start = coordinator._start

    def on_start(view, jobset):
        starts.append((view.now, len(base.round_times)))
        start(view, jobset)

    coordinator._start = on_start
    engine.run()
    return engine, starts


def test_search_gate_kept_searches_only_a_pair_a_round_boundary_kept():
    # OURS (issue #26): the pair forms in Gavel's first round; gated, its search waits for the next boundary
    _, starts = searches_started(None)
    assert starts[0][1] == 1  # ungated: searched in the round that formed it (at the first 30 s tick)
    engine, gated = searches_started({"search_gate": "kept"})
    coordinator = engine.policy.coordinator
    assert gated[0][1] >= 2 and gated[0][0] >= engine.policy.base.round_times[1]
    assert coordinator.gated >= 1 and coordinator.metrics()["gimbal_gated_searches"] == coordinator.gated
    assert coordinator.aborted == 0
