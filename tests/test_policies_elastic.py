"""The elastic policies of Pollux's world (specs/pollux.md, specs/lyra.md §3): the pollux optimiser
against exhaustive search, the GA's states, invariants of every policy on a fixture goodput workload,
and hand-computed schedules of the study's round-based Tiresias+TunedJobs."""

from __future__ import annotations

import math
import random

import pytest

from helpers import FIXTURES
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.models.goodput import load_applications
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.policies import POLICIES, make_policy
from schedlab.sched.policies.pollux.genetic import GeneticSolver
from schedlab.sched.policies.pollux.optimiser import solve
from schedlab.sched.policies.pollux.problem import JobSpec, Problem, exhaustive, min_node_shapes
from helpers import prepared_table, replay_table
from schedlab.sched.traces import LoadOptions, load_trace

POLLUX = FIXTURES / "pollux"
WORKLOAD = POLLUX / "workload-toy.csv"
ELASTIC = ("pollux", "optimus", "afs", "tiresias")


# ---- the pollux optimiser ---------------------------------------------------------------------
def random_problem(seed: int) -> Problem:
    """A few jobs with concave speed-ups that drop when spread over nodes, on a tiny cluster."""
    rng = random.Random(seed)
    nodes, per = rng.choice([(2, 4), (3, 2), (2, 2), (2, 3)])
    free = [per] * nodes
    jobs = []
    for _ in range(rng.randint(1, 3 if nodes * per > 6 else 4)):
        a, b, c = rng.uniform(0.2, 2), rng.uniform(0.3, 1.0), rng.uniform(0, 0.6)
        current = [0] * nodes
        if rng.random() < 0.6:
            n = rng.randrange(nodes)
            current[n] = rng.randint(0, free[n])
            free[n] -= current[n]
        jobs.append(JobSpec(
            max_gpus=rng.randint(max(1, sum(current)), nodes * per), current=tuple(current),
            speedup=lambda shape, a=a, b=b, c=c: a * sum(shape) ** b / (1 + c * (len(shape) - 1)),
            restart_factor=rng.choice([0.0, 0.3, 0.9, 1.0]),
        ))
    return Problem(jobs, nodes, per, scale=1 / per)


@pytest.mark.slow
def test_optimiser_against_exhaustive_search():
    exact, worst = 0, 1.0
    cases = 150
    for seed in range(cases):
        problem = random_problem(seed)
        ours, best = solve(problem), exhaustive(problem)
        assert problem.feasible(ours), (seed, ours)
        ratio = problem.value(ours) / problem.value(best)
        assert ratio <= 1 + 1e-12  # exhaustive search is the optimum
        exact += ratio >= 1 - 1e-9
        worst = min(worst, ratio)
    # measured: optimal on 149 of these 150 states, the other within 3.5 % (a three-job exchange
    # that single and pair moves do not find)
    assert exact >= cases - 2 and worst > 0.96, (exact, worst)


def test_optimiser_keeps_a_running_job_whose_move_gains_nothing():
    # one job on node 0 with 2 GPUs, cap 2: any change only costs its restart factor
    job = JobSpec(max_gpus=2, current=(2, 0), speedup=lambda shape: float(sum(shape)), restart_factor=0.5)
    problem = Problem([job], 2, 4, scale=0.25)
    assert solve(problem) == [(2, 0)]


def test_optimiser_respects_one_multi_node_job_per_node():
    # two jobs that each want 6 GPUs on 3 nodes of 4: only one may span nodes
    jobs = [JobSpec(max_gpus=6, current=(0, 0, 0), speedup=lambda shape: float(sum(shape)), restart_factor=1.0)
            for _ in range(2)]
    problem = Problem(jobs, 3, 4, scale=0.25)
    alloc = solve(problem)
    assert problem.feasible(alloc)
    assert sum(1 for a in alloc if sum(1 for c in a if c) > 1) <= 1
    assert problem.value(alloc) == pytest.approx(problem.value(exhaustive(problem)))


def test_min_node_shapes():
    assert min_node_shapes(6, 4) == ((4, 2), (3, 3))
    assert min_node_shapes(8, 4) == ((4, 4),)
    assert min_node_shapes(3, 4) == ((3,),)


def test_genetic_algorithm_states_are_feasible_and_never_beat_the_optimum():
    for seed in range(20):
        problem = random_problem(seed)
        ga = GeneticSolver(population=20, generations=10, seed=seed).solve(problem)
        assert problem.feasible(ga)
        assert problem.value(ga) <= problem.value(exhaustive(problem)) * (1 + 1e-12)


# ---- policies end to end on the fixture workload ----------------------------------------------
class Checked:
    """Wraps a policy and checks the engine's state after every decision (a test harness)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.default_preemption_overhead_s = inner.default_preemption_overhead_s
        self.default_allocation_stall_s = inner.default_allocation_stall_s
        self.progress: dict = {}
        self.checks = 0

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def schedule(self, engine) -> None:
        self.inner.schedule(engine)
        cluster = engine.cluster
        held = [g for job in engine.running for g in job.gpus]
        assert len(held) == len(set(held)) <= cluster.total_gpus
        assert cluster.total_gpus - cluster.free_gpus == len(held)
        for job in engine.running:
            assert 1 <= job.num_gpus == len(job.gpus)
        for job in engine.jobs:
            if job.submit_time <= engine.now:
                left = engine.remaining(job)
                assert left <= self.progress.get(job, math.inf) + 1e-9, "progress went backwards"
                self.progress[job] = left
        self.checks += 1


def fixture_engine(policy: str, params: dict | None = None, cluster: str = "2x4",
                   time_origin: str | None = None) -> Engine:
    table, _ = load_trace(WORKLOAD, options=LoadOptions(time_origin=time_origin))
    spec = load_cluster(cluster)
    prepared, _ = prepared_table(table, spec, goodput_root=POLLUX)
    decider = make_policy(policy, params)
    decider.for_goodput_jobs()
    checked = Checked(decider)
    jobs = jobs_from_table(prepared, load_applications(POLLUX))
    return Engine(jobs, ClusterState(spec), checked, seed=0)


@pytest.mark.parametrize("policy", ELASTIC)
@pytest.mark.parametrize("cluster", ["2x4", "1x4", "8x4"])  # 8x4: more GPUs and servers than the data measured
def test_policy_end_to_end_with_invariants(policy, cluster):
    engine = fixture_engine(policy, cluster=cluster)
    result = engine.run()
    assert all(j.finished for j in result.jobs)
    assert engine.policy.checks > 0
    assert engine.cluster.free_gpus == engine.cluster.total_gpus
    for job in result.jobs:  # rounds: nothing starts before the first multiple of 60 s after arrival
        assert job.start_time >= max(60.0, math.ceil(job.submit_time / 60) * 60) - 1e-9


@pytest.mark.parametrize("policy", ELASTIC)
def test_policy_replay_summary(policy):
    table, _ = load_trace(WORKLOAD)
    prepared, _ = prepared_table(table, load_cluster("2x4"), goodput_root=POLLUX)
    result = replay_table(prepared, "2x4", policy, goodput_root=POLLUX)
    assert result.summary["jobs"] == 6 and result.jobs["end_time"].notna().all()


def test_job_table_keeps_the_trace_gpu_count():
    """The job table's ``num_gpus`` is what the trace asked for, whatever pollux last allocated, so
    the papers' large/small classes (Castor Table 5, SJF-BSBF Table III) are the trace's."""
    table, _ = load_trace(WORKLOAD)
    prepared, _ = prepared_table(table, load_cluster("2x4"), goodput_root=POLLUX)
    result = replay_table(prepared, "2x4", "pollux", goodput_root=POLLUX)
    assert result.jobs["num_gpus"].tolist() == prepared["num_gpus"].tolist()


def test_registered_with_paper_and_simplification():
    for name in ("pollux", "optimus", "afs"):
        cls = POLICIES[name]
        assert cls.paper and cls.summary and cls.simplified


def test_elastic_policies_use_more_than_the_trace_gpus():
    # one job alone on 8 GPUs: optimus, afs and pollux all grow it beyond its workload GPU count
    for policy in ("optimus", "afs", "pollux"):
        engine = fixture_engine(policy)
        engine.jobs = engine.jobs[:1]
        engine.run()
        assert engine.jobs[0].num_gpus > engine.jobs[0].requested_gpus, policy


def test_pollux_stays_within_the_measured_placements():
    """A lone job on a cluster larger than the data (the toy's 4 nodes of 2 GPUs, 8 GPUs): pollux
    grows it only as far as the measured range (castor-sim's 128 GPUs against Pollux's 64)."""
    engine = fixture_engine("pollux", cluster="8x4")
    model = engine.jobs[0].goodput.model
    assert (model.max_gpus, model.max_nodes, model.max_servers(4)) == (8, 4, 2)
    engine.jobs = engine.jobs[:1]
    held = []
    original = engine.policy.inner.schedule

    def schedule(eng):
        original(eng)
        held.extend((j.num_gpus, len({g // eng.cluster.gpus_per_server for g in j.gpus})) for j in eng.running)

    engine.policy.inner.schedule = schedule
    engine.run()
    assert held and max(n for n, _ in held) <= 8 and max(s for _, s in held) <= 2


# ---- Tiresias+TunedJobs -------------------------------------------------------------------------
def test_tiresias_tuned_jobs_round_and_stall_by_hand():
    # toy-0 arrives at 100 (the file's clock; 1 GPU, 600 s alone): first round at 120, 30 s stall, done at 750
    engine = fixture_engine("tiresias")
    engine.jobs = engine.jobs[:1]
    engine.run()
    assert engine.jobs[0].end_time == pytest.approx(750.0)


def test_tiresias_mode_selection():
    assert make_policy("tiresias").tuned is None  # other traces: 2D-LAS as before
    auto = make_policy("tiresias")
    auto.for_goodput_jobs()
    assert auto.tuned is not None and auto.tuned.thresholds == [16 * 3600.0] and auto.tuned.promote_knob == 0
    assert auto.default_allocation_stall_s == 30.0 and auto.default_preemption_overhead_s == 30.0
    las = make_policy("tiresias", {"mode": "las"})
    las.for_goodput_jobs()
    assert las.tuned is None
    forced = make_policy("tiresias", {"mode": "tuned-jobs", "queue_thresholds": [100.0]})
    assert forced.tuned.thresholds == [100.0]


def test_tiresias_tuned_skips_what_does_not_fit_and_preempts_demoted_jobs():
    # 1x4 cluster, threshold 60 GPU-s, the toy re-based on its first job (toy-0 at 0): by 300 s every
    # running job is in the second queue, so toy-3 (3 GPUs, first queue) starts at its first round,
    # 300 s, preempting them; toy-4 (1 GPU) then fits beside it only once its turn comes in the queue order
    engine = fixture_engine("tiresias", {"mode": "tuned-jobs", "queue_thresholds": [60.0]}, cluster="1x4",
                            time_origin="first-job")
    result = engine.run()
    jobs = {j.job_id: j for j in result.jobs}
    assert all(j.finished for j in result.jobs)
    assert jobs["toy-3"].start_time == pytest.approx(300.0)
    assert jobs["toy-1"].preemptions >= 1 and jobs["toy-2"].preemptions >= 1
    assert jobs["toy-0"].end_time == pytest.approx(690.0)  # it holds its GPU: 1 GPU still fits


def test_pollux_with_the_genetic_solver_runs_end_to_end():
    engine = fixture_engine("pollux", {"solver": "ga", "ga_population": 10, "ga_generations": 5})
    result = engine.run()
    assert all(j.finished for j in result.jobs)
    assert engine.cluster.free_gpus == engine.cluster.total_gpus


def test_optimus_places_only_on_servers_that_offer_gpus_on_a_pooled_cluster():
    # an inference server not lent offers none: optimus used to target every server of the pooled
    # cluster ("server 8 has 0 free GPUs, 1 asked") on the quickstart's showdown-half
    from schedlab.sched.core.pools import LoanOptions
    from schedlab.sched.replay import run
    from schedlab.sched.spec import ReplaySpec

    spec = ReplaySpec(options={"num_jobs": 150, "load": 3.0, "seed": 1}, annotate=["pollux", {"scheme": "lyra"}],
                      cluster="showdown-half", inference=LoanOptions(load="diurnal:0.42:0.95"), policies=["optimus"])
    [result] = run(spec)
    assert result.summary["jobs"] == 150
