"""The ``gavel`` policy: its LP on hand-checkable cases, its rounds, and replays that must finish."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import shared_data
from schedlab.sched.models.annotate import annotate
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.policies import POLICIES, SHARING, make_policy
from schedlab.sched.policies.gavel.lp import build_problem, effective_throughputs, solve
from helpers import replay_table
from schedlab.sched.models.sharing import SharingModel
from schedlab.sched.traces import load_trace
from schedlab.sched.traces.common import LoadOptions

SINGLES_AND_PAIR = [(0,), (1,), (0, 1)]


def two_jobs_one_gpu(xi: float):
    return build_problem([1, 1], SINGLES_AND_PAIR, [(1.0,), (1.0,), (1 / xi, 1 / xi)], capacity=1)


# ---- the LP (Gavel §3.1, §4.1, §4.2) ---------------------------------------------------------------
def test_small_xi_pair_gets_all_the_time():
    solution = solve(two_jobs_one_gpu(1.2), "max_min_fairness")
    assert solution.x == pytest.approx([0, 0, 1], abs=1e-5)
    assert solution.value == pytest.approx(1 / 1.2)


def test_large_xi_time_slices_singles_half_each():
    solution = solve(two_jobs_one_gpu(3.0), "max_min_fairness")
    assert solution.x == pytest.approx([0.5, 0.5, 0], abs=1e-5)
    assert solution.value == pytest.approx(0.5)


def test_makespan_favours_the_longer_remaining_job():
    problem = two_jobs_one_gpu(3.0)
    solution = solve(problem, "makespan", remaining=[100.0, 300.0])
    # thr_j >= remaining_j / T with x_a + x_b <= 1: T = 400, x = (0.25, 0.75); both finish together
    assert solution.x == pytest.approx([0.25, 0.75, 0], abs=1e-5)
    thr = effective_throughputs(problem, solution.x)
    assert 100 / thr[0] == pytest.approx(300 / thr[1], rel=1e-4)
    fair = solve(problem, "max_min_fairness")
    assert fair.x[1] < solution.x[1]


def test_max_min_weights_throughput_by_gpus_and_fills_spare_capacity():
    # an 8-GPU and a 1-GPU job on 8 GPUs: equal GPU share (Gavel multiplies by scale factor) bounds
    # the minimum at 1; the second stage then gives the big job the 7 GPUs left (x = 7/8).
    problem = build_problem([8, 1], [(0,), (1,)], [(1.0,), (1.0,)], capacity=8)
    solution = solve(problem, "max_min_fairness")
    assert solution.value == pytest.approx(1.0)
    assert solution.x == pytest.approx([7 / 8, 1.0], abs=1e-5)


def test_lp_respects_capacity_and_job_time():
    rng = np.random.default_rng(0)
    n, gpus = 30, rng.choice([1, 1, 1, 2, 4], 30)
    combos = [(j,) for j in range(n)] + [(a, b) for a in range(n) for b in range(a + 1, n) if gpus[a] == gpus[b]]
    rates = [(1.0,)] * n + [tuple(rng.uniform(0.5, 0.9, 2)) for _ in combos[n:]]
    problem = build_problem(gpus, combos, rates, capacity=16)
    for objective in ("max_min_fairness", "makespan"):
        x = solve(problem, objective, remaining=rng.uniform(10, 1000, n)).x
        assert float(np.dot(problem.combo_gpus, x)) <= 16 + 1e-6
        per_job = np.bincount(problem.entry_job, weights=x[problem.entry_combo], minlength=n)
        assert per_job.max() <= 1 + 1e-6


def test_unknown_objective_and_params_are_errors():
    with pytest.raises(ValueError, match="unknown gavel objective"):
        solve(two_jobs_one_gpu(2.0), "fastest")
    with pytest.raises(ValueError, match="round_ss"):
        make_policy("gavel", {"round_ss": 1})
    assert "gavel" in POLICIES and "gavel" in SHARING


# ---- rounds on the engine (Gavel §5) --------------------------------------------------------------
def table(rows):
    """(job_id, submit, gpus, duration) rows of cifar10 batch-32 jobs: two fit on one GPU."""
    frame = pd.DataFrame(rows, columns=["job_id", "submit_time", "num_gpus", "duration"])
    return frame.assign(model="cifar10", batch_size=32.0)


def engine_for(frame, cluster, params=None, interference="analytic", overhead=0.0):
    spec = load_cluster(cluster)
    policy = make_policy("gavel", params)
    engine = Engine(
        jobs_from_table(frame), ClusterState(spec), policy, preemption_overhead_s=overhead,
        sharing=SharingModel.for_cluster(spec, interference),
    )
    return engine, policy


def test_small_xi_jobs_run_as_a_pair():
    result = replay_table(table([("A", 0, 1, 100), ("B", 0, 1, 100)]), "1x1", "gavel", interference="analytic:1.2")
    jobs = result.jobs.set_index("job_id")
    assert list(jobs["end_time"]) == pytest.approx([120, 120])  # together at 1/1.2 speed
    assert (jobs["shared_s"] > 0).all() and result.summary["preemptions"] == 0


def test_large_xi_jobs_alternate_by_round_priority():
    engine, policy = engine_for(table([("A", 0, 1, 1000), ("B", 0, 1, 1000)]), "1x1", interference="analytic:3")
    result = engine.run()
    a, b = result.jobs
    assert a.shared_seconds == 0 and b.shared_seconds == 0  # never co-located: time-sliced singles
    assert a.preemptions >= 2 and b.preemptions >= 2  # X = 0.5 each: priority X / received alternates them
    assert abs(a.end_time - b.end_time) <= 360 + 1e-6


def test_round_timer_fires_every_round_s():
    engine, policy = engine_for(table([("A", 0, 1, 2000), ("B", 10, 1, 2000), ("C", 20, 1, 2000)]), "1x1",
                                interference="analytic:3")
    fired = []
    on_timer = policy.on_timer
    policy.on_timer = lambda eng, payload: (fired.append(eng.now), on_timer(eng, payload))
    engine.run()
    assert policy.round_times[0] == 0
    assert np.diff(policy.round_times) == pytest.approx(360)
    assert np.diff(fired) == pytest.approx(360) and fired[0] == 360


def test_jobs_chosen_again_keep_running():
    # Gavel's lease extension (§5): a job chosen round after round is never checkpointed
    result = replay_table(table([("A", 0, 1, 2000), ("B", 0, 2, 1500)]), "1x4", "gavel", interference="analytic:3")
    jobs = result.jobs.set_index("job_id")
    assert result.summary["preemptions"] == 0
    assert list(jobs["end_time"]) == pytest.approx([2000, 1500])


def test_makespan_objective_replays():
    frame = table([("short", 0, 1, 100), ("long", 0, 1, 3000), ("mid", 5, 1, 700)])
    result = replay_table(frame, "1x1", "gavel", {"objective": "makespan"}, interference="analytic:3")
    assert result.summary["jobs"] == 3 and result.jobs["end_time"].notna().all()


# ---- invariants and replays -----------------------------------------------------------------------
def synthetic(num_jobs, max_gpus, load, seed=0):
    frame, _ = load_trace(None, "synthetic", LoadOptions(num_jobs=num_jobs, max_gpus=max_gpus, load=load, seed=seed))
    return annotate(frame)


def checked(engine, policy):
    """Wrap the policy so every decision is checked against the engine's invariants."""
    finished: dict[str, int] = {}
    schedule, on_finish = policy.schedule, policy.on_finish

    def check_schedule(eng):
        schedule(eng)
        for job in eng.running:
            assert all(len(eng.cluster.holders[g]) <= 2 for g in job.gpus)
            partners = list(job.partners or ())
            assert len(partners) <= 1
            if partners:  # a pair shares exactly the same GPUs (Gavel §3.1: equal scale factors)
                assert sorted(partners[0].gpus) == sorted(job.gpus)

    def count_finish(eng, job):
        finished[job.job_id] = finished.get(job.job_id, 0) + 1
        on_finish(eng, job)

    policy.schedule, policy.on_finish = check_schedule, count_finish
    return finished


@pytest.mark.parametrize("objective", ["max_min_fairness", "makespan"])
def test_engine_invariants_under_contention(objective):
    frame = synthetic(300, max_gpus=16, load=4.0)
    engine, policy = engine_for(frame, "2x8", {"objective": objective}, overhead=63.0)
    finished = checked(engine, policy)
    result = engine.run()
    assert len(finished) == len(frame) and set(finished.values()) == {1}
    assert all(j.finished and j.remaining == 0 for j in result.jobs)
    assert result.shared_gpu_seconds > 0  # pairs were actually used
    assert sum(j.preemptions for j in result.jobs) > 0
    assert policy.lp_solve_times and max(policy.lp_solve_times) < 5.0


def test_synthetic_300_job_replay_finishes():
    result = replay_table(synthetic(300, max_gpus=64, load=2.0), "16x8", "gavel", interference="analytic")
    assert result.summary["jobs"] == 300
    assert result.jobs["end_time"].notna().all()
    assert (result.jobs["jct_s"] >= result.jobs["duration"] - 1e-6).all()


def test_replay_with_gavels_measured_table():
    path = shared_data("profiles", "gavel", "simulation_throughputs.json")
    frame = synthetic(150, max_gpus=16, load=4.0, seed=1)
    result = replay_table(frame, "2x8", "gavel", interference=f"gavel:{path}")
    assert result.summary["jobs"] == 150 and result.jobs["end_time"].notna().all()
    assert result.summary["interference"] == "gavel:v100"


def test_lp_window_leaves_the_rest_as_fill():
    frame = synthetic(120, max_gpus=8, load=6.0, seed=2)
    engine, policy = engine_for(frame, "1x8", {"max_jobs_in_lp": 5, "reallocation_interval_s": 0})
    finished = checked(engine, policy)
    allocated: list[int] = []
    reallocate = policy._reallocate

    def record(eng):
        reallocate(eng)
        allocated.append(len({i for key in policy.alloc for i in key}))

    policy._reallocate = record
    engine.run()
    assert len(finished) == 120
    assert allocated and max(allocated) <= 5  # the LP sees only the 5 oldest jobs; the rest are fill


# ---- speed tricks that must not change a result ------------------------------------------------------
def random_problem(rng, n: int, capacity: int):
    gpus = rng.choice([1, 2, 4, 8], n)
    combos = [(j,) for j in range(n)] + [(a, b) for a in range(n) for b in range(a + 1, n)
                                         if gpus[a] == gpus[b] and rng.random() < 0.3]
    rates = [(1.0,)] * n + [tuple(rng.uniform(0.3, 0.95, 2)) for _ in combos[n:]]
    return build_problem(gpus, combos, rates, capacity)


def test_direct_highs_returns_exactly_what_milp_returns(monkeypatch):
    from schedlab.sched.policies.gavel import lp as gavel_lp

    rng = np.random.default_rng(3)
    cases = [(random_problem(rng, int(rng.integers(2, 40)), int(rng.integers(4, 64))), objective)
             for _ in range(12) for objective in ("max_min_fairness", "makespan")]
    remaining = [rng.uniform(10, 1e4, p.num_jobs) for p, _ in cases]
    direct = [solve(p, objective, rem) for (p, objective), rem in zip(cases, remaining)]
    monkeypatch.setattr(gavel_lp, "_highs", lambda: None)  # the public route: scipy.optimize.milp
    for (p, objective), rem, fast in zip(cases, remaining, direct):
        slow = solve(p, objective, rem)
        assert np.array_equal(fast.x, slow.x) and fast.value == slow.value


def test_repeat_solver_reuses_only_an_identical_problem():
    from schedlab.sched.policies.gavel.lp import RepeatSolver

    rng = np.random.default_rng(4)
    problem = random_problem(rng, 20, 16)
    solver = RepeatSolver()
    first = solver.solve(problem, "max_min_fairness")
    again = solver.solve(build_problem(problem.job_gpus, *_combos_of(problem), problem.capacity), "max_min_fairness")
    assert again.x is first.x  # same arrays: the remembered solution
    other = solver.solve(build_problem(problem.job_gpus, *_combos_of(problem), problem.capacity + 1), "max_min_fairness")
    assert other.x is not first.x
    span = solver.solve(problem, "makespan", remaining=np.arange(1.0, 21.0))
    assert solver.solve(problem, "makespan", remaining=np.arange(1.0, 21.0)).x is span.x
    assert solver.solve(problem, "makespan", remaining=np.arange(2.0, 22.0)).x is not span.x


def _combos_of(problem):
    combos, rates = [], []
    for c in range(problem.num_combos):
        members = problem.entry_combo == c
        combos.append(tuple(int(j) for j in problem.entry_job[members]))
        rates.append(tuple(float(r) for r in problem.entry_rate[members]))
    return combos, rates


def reference_plan(policy, engine) -> list[tuple[int, ...]]:
    """Gavel §5's round plan computed afresh: every combination ranked, then every job left over alone."""
    since = engine.now - policy.last_solve if np.isfinite(policy.last_solve) else None
    seed, alloc, received, deficit = policy.params.round_s / 2, policy.alloc, policy.received, policy.deficit

    def live_deficit(key):
        owed = alloc.get(key, 0.0) * since if since is not None else 0.0
        return deficit.get(key, 0.0) + owed - received.get(key, 0.0)

    ranked = sorted(alloc, key=lambda k: (-alloc[k] / (seed + received.get(k, 0.0)), -live_deficit(k), -alloc[k], k))
    free, taken, plan = engine.cluster.total_gpus, set(), []
    for key in ranked + sorted(((i,) for i in policy.active), key=lambda k: (-live_deficit(k), k[0])):
        gpus = max(policy.active[i].num_gpus for i in key)
        if gpus <= free and taken.isdisjoint(key) and free:
            plan.append(key)
            taken.update(key)
            free -= gpus
    return plan


def test_kept_fill_order_matches_ranking_every_job():
    """``fill`` (sorted, with replaced entries left in it) holds exactly the fill ranks computed afresh,
    and the plan walked from it is the plan of a from-scratch ranking of every job."""
    frame = synthetic(200, max_gpus=8, load=6.0, seed=5)
    engine, policy = engine_for(frame, "1x8", {"max_jobs_in_lp": 6, "reallocation_interval_s": 720})
    plan, checks = policy._plan, []

    def checked_plan(eng):
        since = eng.now - policy.last_solve if np.isfinite(policy.last_solve) else None
        fresh = []
        for i in policy.active:
            key = (i,)
            if key not in policy.alloc:
                owed = policy.alloc.get(key, 0.0) * since if since is not None else 0.0
                fresh.append((-(policy.deficit.get(key, 0.0) + owed - policy.received.get(key, 0.0)), i))
        live = [e for e in policy.fill if policy.fill_of.get(e[1]) is e]
        assert policy.fill == sorted(policy.fill) and live == sorted(policy.fill_of.values()) == sorted(fresh)
        expected = reference_plan(policy, eng)
        chosen = plan(eng)
        assert list(chosen) == expected
        checks.append((len(fresh), len(policy.fill) > len(live)))
        return chosen

    policy._plan = checked_plan
    engine.run()
    assert len(checks) > 50 and max(n for n, _ in checks) > 20  # many rounds, with a real backlog
    assert any(stale for _, stale in checks)  # replaced entries were in the list (and were skipped)
