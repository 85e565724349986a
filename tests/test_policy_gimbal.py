"""Gimbal's policies (specs/gimbal.md §2, §7.2 items 7-9): Algorithm 1's sign conventions (the job the
prose of §5.2 names is swelled), early exit with the best configuration restored, the 10(M−1) bound,
stale timers, the star rule (property test), base policies unchanged with Gimbal's mechanisms off, and
short end-to-end replays of each registered Gimbal policy."""

from __future__ import annotations

import math
import random

import pytest
from helpers import make_table, shared_data
from hypothesis import given, settings
from hypothesis import strategies as st
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.models.interference import Analytic, MpsCap
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.policies import POLICIES, make_policy
from schedlab.sched.policies.base import Policy
from schedlab.sched.policies.gimbal.policy import GimbalError
from schedlab.sched.policies.gimbal.search import TAG
from schedlab.sched.models.sharing import SharingModel


def table_of(rows, models, deadlines=None):
    table = make_table(rows)
    table["model"] = [m for m, _ in models]
    table["batch_size"] = [float(b) for _, b in models]
    if deadlines is not None:
        table["deadline"] = deadlines
    return table


def run(table, cluster, source, policy="gimbal-jct", params=None, base=None):
    spec = load_cluster(cluster)
    decider = make_policy(policy, params)
    if base is not None:
        decider.base = base
    engine = Engine(jobs_from_table(table), ClusterState(spec), decider, sharing=SharingModel.for_cluster(spec, source))
    engine.run()
    return engine, {j.job_id: j for j in engine.jobs}


def pair_source(xi_mps):
    """Lucid scores under time-slicing see ξ = 1.05 (score 0: it packs); under MPS the pair runs at ξ⁰."""
    return MpsCap(Analytic(timeslice=1.05, mps=xi_mps))


LONG = 1e6


def bert_beside_ncf(deadlines=None, durations=(LONG + 10, LONG)):
    return table_of([("A", 0, 1, durations[0]), ("B", 10, 1, durations[1])], [("bert", 12), ("ncf", 256)], deadlines)


# ---- Algorithm 1: who is swelled (A1) -----------------------------------------------------------------------------
@pytest.mark.parametrize(("objective", "durations", "deadlines", "swelled"), [
    ("jct", (LONG + 10, LONG), None, "B"),  # JCT: squeeze the high-utilisation job (bert), swell the small one
    ("deadline", (LONG + 10, LONG), [9e6, 3e6], "B"),  # deadline: the shorter headroom is swelled
    ("deadline", (LONG + 10, LONG), [3e6, 9e6], "A"),
    ("makespan", (LONG + 10, LONG * 1.5), None, "B"),  # makespan: the longer job is swelled
    ("makespan", (LONG + 10, LONG * 0.5), None, "A"),
])
def test_algorithm_1_swells_the_job_the_prose_names(objective, durations, deadlines, swelled):
    engine, jobs = run(bert_beside_ncf(deadlines, durations), "1x1:a40", pair_source(2.2),
                       params={"objective": objective})
    assert engine.policy.coordinator.swelled[0] == (swelled,)
    assert engine.policy.coordinator.metrics()["gimbal_searches"] == 1
    assert jobs[swelled].workers.shares is not None


def test_early_exit_restores_the_best_configuration():
    # ξ⁰ = 2.2 both: squeezing A (bert, low JCT priority) to p trades 2.2 p^-0.5 for 1 + 1.2 p²; the search
    # goes down in 10 % steps, fails three times past the optimum and restores it
    engine, jobs = run(bert_beside_ncf(), "1x1:a40", pair_source(2.2))
    coordinator = engine.policy.coordinator
    objective = {p: 2.2 * p ** -0.5 + 1 + 1.2 * p * p for p in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)}
    best = min(objective, key=objective.get)
    best_index = round((1.0 - best) / 0.1)
    assert coordinator.early_exits == 1
    assert coordinator.final_shares == pytest.approx([best, 1.0])
    assert coordinator.lgrr_iterations == [best_index + 3]  # three unsuccessful squeezes past the best
    assert coordinator.lgrr_switches == best_index + 3 + 1 + 1  # + the restore, + A back to 100 % once B ended (A10)
    assert set(jobs["A"].workers.shares.values()) == {1.0}
    assert coordinator.search_seconds == [pytest.approx(9 + 39 * (best_index + 3))]


def test_no_gain_exits_after_three_failures_at_full_caps():
    engine, jobs = run(bert_beside_ncf(), "1x1:a40", pair_source(1.05))
    coordinator = engine.policy.coordinator
    assert coordinator.early_exits == 1 and coordinator.final_shares == [1.0, 1.0]
    assert coordinator.search_seconds == [pytest.approx(9 + 3 * 39)]
    assert coordinator.lgrr_switches == 4  # three squeezes and the restore, 3.6 s each on A
    # A ran at ξ⁰ = 1.05 except for 4 stalls of 3.6 s and 117 s at its squeezed paces
    assert jobs["A"].end_time > jobs["B"].end_time


def test_research_s_searches_a_set_again():
    engine, jobs = run(bert_beside_ncf(), "1x1:a40", pair_source(2.2), params={"research_s": 3600})
    assert engine.policy.coordinator.metrics()["gimbal_searches"] > 10  # one per hour over ~2e6 s, until B ends


def test_timing_model_uses_measured_windows():
    engine, jobs = run(bert_beside_ncf(), "1x1:a40", pair_source(1.05), params={"timing": "model"})
    seconds = engine.policy.coordinator.search_seconds[0]
    assert 0 < seconds < 9 + 3 * 39  # 5 steps of a sub-second iteration, + 3.6 s per switch


# ---- unequal sets through a scripted base --------------------------------------------------------------------------
class ScriptBase(Policy):
    """Starts ``plan[job] = host`` beside the host's alone GPUs (fewest servers first), else on free GPUs."""

    name = "script-base-test"
    summary = paper = ""

    def __init__(self, plan: dict | None = None, rng: random.Random | None = None) -> None:
        super().__init__()
        self.plan, self.rng = plan or {}, rng
        self.waiting: list = []
        self.by_id: dict = {}
        self.rejected = 0

    def on_arrival(self, engine, job):
        self.waiting.append(job)
        self.by_id[job.job_id] = job

    def schedule(self, engine):
        check_star(engine)
        for job in list(self.waiting):
            proposal = self.propose(engine, job)
            if proposal is not None:
                if engine.star_violation(job, proposal) is None:
                    engine.start(job, share_gpus=proposal)
                    self.waiting.remove(job)
                    check_star(engine)
                    continue
                self.rejected += 1
            if job.num_gpus <= engine.cluster.free_gpus and engine.start(job):
                self.waiting.remove(job)
                check_star(engine)

    def propose(self, engine, job):
        holders = engine.cluster.holders
        if self.rng is None:
            host = self.by_id.get(self.plan.get(job.job_id))
            if host is None or not host.running:
                return None
            alone = sorted((g for g in host.gpus if len(holders[g]) == 1),
                           key=lambda g: (-sum(len(holders[h]) == 1 for h in host.gpus if h // 2 == g // 2), g))
            return tuple(alone[: job.num_gpus]) if len(alone) >= job.num_gpus else None
        running = list(engine.running)
        if not running:
            return None
        host = self.rng.choice(running)
        n = job.num_gpus
        if host.num_gpus > n:
            alone = [g for g in host.gpus if len(holders[g]) == 1]
            return tuple(self.rng.sample(alone, n)) if len(alone) >= n else None
        if host.num_gpus == n:
            return host.gpus
        cover, total = [], 0
        for other in self.rng.sample(running, len(running)):
            if other.num_gpus < n and total + other.num_gpus <= n:
                cover.append(other)
                total += other.num_gpus
        return tuple(g for o in cover for g in o.gpus) if total == n else None


def check_star(engine) -> None:
    """§5.1 from the GPUs alone (independent of the registry): ≤ 2 holders per GPU; every co-location
    component is a star around one largest job; equal sizes only as an identical pair; ≤ 5 jobs."""
    holders = engine.cluster.holders
    neighbours: dict = {job: set() for job in engine.running}
    for on in holders:
        assert len(on) <= 2
        if len(on) == 2:
            neighbours[on[0]].add(on[1])
            neighbours[on[1]].add(on[0])
    seen = set()
    for job in list(neighbours):
        if job in seen or not neighbours[job]:
            continue
        component, stack = set(), [job]
        while stack:
            x = stack.pop()
            if x not in component:
                component.add(x)
                stack.extend(neighbours[x])
        seen |= component
        assert len(component) <= 5
        center = max(component, key=lambda j: j.num_gpus)
        for other in component - {center}:
            assert neighbours[other] == {center}, "a member shares with a non-J_max job"
            assert set(other.gpus) <= set(center.gpus)
            assert all(center in holders[g] for g in other.gpus)
            if other.num_gpus == center.num_gpus:
                assert len(component) == 2 and set(other.gpus) == set(center.gpus)
        group = engine.policy.sets.of.get(center)
        assert group is not None and set(group.members) == component and group.jmax.num_gpus == center.num_gpus


def one_large_two_small(xi_mps=2.2):
    table = table_of([("J", 0, 4, LONG), ("P1", 5, 1, LONG / 2), ("P2", 6, 2, LONG / 2)],
                     [("cifar10", 32), ("ncf", 256), ("ncf", 256)])
    return table, MpsCap(Analytic(timeslice=xi_mps, mps=xi_mps))


@pytest.mark.parametrize("objective", ["jct", "makespan", "deadline"])
@pytest.mark.parametrize("xi", [1.3, 2.2, 3.5])
def test_worst_case_is_at_most_10_m_minus_1_lgrr_iterations(objective, xi):
    table, source = one_large_two_small(xi)
    engine, jobs = run(table, "2x2:a40", source, params={"objective": objective, "early_exit": 1000},
                       base=ScriptBase({"P1": "J", "P2": "J"}))
    coordinator = engine.policy.coordinator
    assert engine.policy.sets.unequal_packs == 2 and max(engine.policy.sets.sizes) == 3
    assert coordinator.lgrr_iterations and all(n <= 10 * (3 - 1) for n in coordinator.lgrr_iterations)


def test_liss_only_ablation_balances_the_straggler():
    table, source = one_large_two_small(2.0)
    engine, jobs = run(table, "2x2:a40", source, params={"lgrr": False}, base=ScriptBase({"P1": "J", "P2": "J"}))
    coordinator = engine.policy.coordinator
    assert coordinator.metrics()["gimbal_searches"] == 0 and coordinator.lgrr_switches == 0
    assert coordinator.liss_steps >= 1
    # J's workers: ξ = 2 on three shared GPUs, 1 alone; LISS ends J well before the pace-2 finish
    assert jobs["J"].end_time < 2 * LONG * 0.95


def test_stale_timers_are_ignored():
    table, source = one_large_two_small(2.2)
    seen = {}

    class Probe(ScriptBase):
        def on_timer(self, engine, payload):
            coordinator = engine._gimbal.coordinator
            (sid, search), = coordinator.searches.items()
            version, seq = search.generation, search.seq
            before = (search.iterations, search.failures, {j: dict(j.workers.shares) for j in search.jobset.members})
            for stale in ((TAG, sid, version - 1, seq), (TAG, sid, version, seq - 1), (TAG, sid + 99, version, seq)):
                coordinator.on_timer(engine._engine, stale)
            seen["same"] = before == (search.iterations, search.failures,
                                      {j: dict(j.workers.shares) for j in search.jobset.members})
            seen["calibrating"] = all(engine.calibrating(j) for j in search.jobset.members)

        def schedule(self, engine):
            if not seen:
                seen["armed"] = True
                engine.set_timer(100.0, "probe")
            super().schedule(engine)

    engine, jobs = run(table, "2x2:a40", source, base=Probe({"P1": "J", "P2": "J"}))
    assert seen["same"] and seen["calibrating"]  # the proxy tells the base a search is running (Gandiva waits)
    assert not any(engine.policy.coordinator.busy(j) for j in jobs.values())


def test_membership_change_aborts_the_search_and_searches_again():
    table = table_of([("J", 0, 4, LONG), ("P1", 5, 1, 80), ("P2", 6, 2, LONG / 2)],
                     [("cifar10", 32), ("ncf", 256), ("ncf", 256)])
    source = MpsCap(Analytic(timeslice=2.2, mps=2.2))
    engine, jobs = run(table, "2x2:a40", source, base=ScriptBase({"P1": "J", "P2": "J"}))
    coordinator = engine.policy.coordinator
    assert coordinator.aborted >= 1  # P1 ended inside the first search
    assert coordinator.metrics()["gimbal_searches"] >= 1


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_star_rule_is_never_violated(seed):
    rng = random.Random(seed)
    rows, models = [], []
    for i in range(24):
        rows.append((f"j{i}", rng.uniform(0, 600), rng.choice((1, 1, 2, 2, 4)), rng.uniform(100, 3000)))
        models.append(rng.choice((("cifar10", 32), ("ncf", 256), ("imagenet", 32))))
    source = MpsCap(Analytic(timeslice=1.6, mps=rng.uniform(1.05, 3.0)))
    base = ScriptBase(rng=rng)
    engine, jobs = run(table_of(rows, models), "4x2:a40", source, base=base)
    assert all(j.finished for j in jobs.values())


def test_a_breaking_pack_is_refused_with_its_rule():
    class Bad(ScriptBase):
        def propose(self, engine, job):  # P2 (2 GPUs) onto one GPU of J and one of P1: spans two jobs
            if job.job_id == "P2":
                j, p1 = self.by_id["J"], self.by_id["P1"]
                return (next(g for g in j.gpus if len(engine.cluster.holders[g]) == 1), p1.gpus[0])
            return super().propose(engine, job)

        def schedule(self, engine):
            for job in list(self.waiting):
                proposal = self.propose(engine, job)
                engine.start(job, share_gpus=proposal) if proposal else engine.start(job)
                self.waiting.remove(job)

    table = table_of([("J", 0, 4, 100), ("P1", 5, 1, 100), ("P2", 6, 2, 100)],
                     [("cifar10", 32), ("ncf", 256), ("ncf", 256)])
    with pytest.raises(GimbalError, match="§5.1"):
        run(table, "2x2:a40", MpsCap(Analytic(1.5)), base=Bad({"P1": "J"}))


# ---- base policies unchanged when Gimbal's mechanisms are off -------------------------------------------------------
COLUMNS = ["job_id", "start_time", "end_time", "preemptions"]


@pytest.mark.parametrize("gimbal", ["gimbal-jct", "gimbal-deadline", "gimbal-makespan"])
def test_base_policy_unchanged_with_gimbal_off(gimbal):
    from schedlab.sched.results.metrics import job_table
    from schedlab.sched.traces import LoadOptions, load_trace
    from helpers import prepared_table

    spec = load_cluster("4x2:a40")
    trace, _ = load_trace(None, fmt="synthetic", options=LoadOptions(num_jobs=80, load=2.5, seed=5))
    trace, _ = prepared_table(trace[trace["num_gpus"] <= 8], spec, annotate=True, seed=5)
    source = Analytic(timeslice=1.1, mps=1.1)  # one ξ for both modes: the proxy's MPS packs change nothing
    wrapped = make_policy(gimbal, {"unequal": False, "liss": False, "lgrr": False})
    base = make_policy(wrapped.params.base, wrapped.base.params.model_dump())  # the same base, unwrapped
    results = []
    for name, decider in ((wrapped.params.base, base), (gimbal, wrapped)):
        engine = Engine(jobs_from_table(trace), ClusterState(spec), decider, sharing=SharingModel.for_cluster(spec, source))
        result = engine.run()
        results.append(job_table(result)[COLUMNS].to_csv(index=False, float_format=repr))
        if name == gimbal:
            assert engine.policy.coordinator.metrics()["gimbal_searches"] == 0
            assert all(j.workers.batches is None and set(j.workers.shares.values()) <= {1.0}
                       for j in engine.jobs if j.workers and j.workers.shares)
    assert results[0] == results[1]


def test_registered_with_paper_and_simplified():
    for name, base, objective in (("gimbal-jct", "lucid", "jct"), ("gimbal-deadline", "gandiva", "deadline"),
                                  ("gimbal-makespan", "gavel", "makespan")):
        cls = POLICIES[name]
        assert "Gimbal" in cls.paper and "§5.2" in cls.paper and "OURS" in cls.simplified and cls.shares_gpus
        params = cls.Params()
        assert (params.base, params.objective) == (base, objective)
    with pytest.raises(ValueError, match="granularity"):
        make_policy("gimbal-jct", {"granularity": 0})
    with pytest.raises(ValueError, match="base_params|max_pair_score"):
        make_policy("gimbal-jct", {"base_params": {"max_pair_score": -1}})
    with pytest.raises(ValueError, match="extra|bogus"):
        make_policy("gimbal-makespan", {"bogus": 1})
    lucid = make_policy("gimbal-jct").base.params
    assert lucid.max_pair_score == 3 and lucid.max_pack_gpus is not None  # §7.2 relaxations (A12)
    gavel = make_policy("gimbal-makespan").base.params
    assert (gavel.objective, gavel.mode) == ("makespan", "mps")


# ---- end to end ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["gimbal-jct", "gimbal-deadline", "gimbal-makespan"])
def test_end_to_end_replay(policy):
    from helpers import prepared_table, replay_table
    from schedlab.sched.traces import LoadOptions, load_trace

    spec = load_cluster("4x2:a40")
    trace, _ = load_trace(None, fmt="synthetic", options=LoadOptions(num_jobs=60, load=2.5, seed=11))
    trace, _ = prepared_table(trace[trace["num_gpus"] <= 8], spec, annotate=True, seed=11)
    result = replay_table(trace, spec, policy, interference="mpscap:analytic:1.1", seed=11)
    summary = result.summary
    assert summary["jobs"] == len(trace) and summary["interference"].startswith("mpscap:rho=0.5:eta=2:analytic")
    for key in ("gimbal_searches", "gimbal_search_mean_s", "gimbal_search_p95_s", "gimbal_lgrr_switches",
                "gimbal_liss_steps", "gimbal_early_exits", "gimbal_unequal_packs", "gimbal_max_set_size",
                "gimbal_mean_set_size", "gimbal_mean_final_share"):
        assert math.isfinite(summary[key])
    assert summary["gimbal_searches"] > 0 and summary["gimbal_max_set_size"] <= 5


def test_end_to_end_on_gavel_measured_pairs():
    from helpers import prepared_table, replay_table
    from schedlab.sched.traces import LoadOptions, load_trace

    path = shared_data("profiles", "gavel", "simulation_throughputs.json")
    spec = load_cluster("4x2:a40")
    trace, _ = load_trace(None, fmt="synthetic", options=LoadOptions(num_jobs=60, load=2.5, seed=2))
    trace, _ = prepared_table(trace[trace["num_gpus"] <= 8], spec, annotate=True, seed=2)
    result = replay_table(trace, spec, "gimbal-jct", interference=f"mpscap:gavel:{path}", seed=2)
    assert result.summary["jobs"] == len(trace) and result.summary["gimbal_searches"] > 0


def test_no_memory_for_the_switching_context_ends_the_search():
    # the pair fits, but not with Gimbal's extra 200 MB CUDA context (§6): no LGRR step is possible
    from schedlab.sched.core.cluster import ClusterSpec, PoolSpec
    from schedlab.sched.models.workloads import default_catalog

    catalog = default_catalog()
    need = catalog.memory_gib("bert", 12) + catalog.memory_gib("ncf", 256)
    spec = ClusterSpec(name="tight", pools=[PoolSpec(servers=1, gpus_per_server=1, gpu_type="a40",
                                                     gpu_memory_gb=need + 0.05)])
    decider = make_policy("gimbal-jct")
    engine = Engine(jobs_from_table(bert_beside_ncf()), ClusterState(spec), decider,
                    sharing=SharingModel.for_cluster(spec, pair_source(2.2)))
    engine.run()
    metrics = decider.metrics()
    assert metrics["gimbal_searches"] == 1 and metrics["gimbal_lgrr_switches"] == 0
    assert decider.coordinator.search_seconds == [pytest.approx(9.0)]  # the measurement window only


# ---- makespan_guard (OURS, issue #26): F better but summed throughput lower is refused --------------------------
def _makespan_pair(xi, guard):
    # makespan: A (longer) is swelled, B squeezed; under M6, 1/ξ_A + 1/ξ_B = 1/(1 + (ξ⁰-1)p²) + √p/ξ⁰
    params = {"objective": "makespan", "makespan_guard": guard}
    return run(bert_beside_ncf(durations=(LONG + 10, LONG * 0.5)), "1x1:a40", pair_source(xi), params=params)


def test_makespan_guard_refuses_a_best_f_configuration_that_lowers_summed_throughput():
    # ξ⁰ = 1.3: each 10 % squeeze of B lowers max R_j (A speeds up) but the pair's Σ 1/pace falls (1.538 at
    # 100 %, 1.534 at 90 %): Algorithm 1 keeps the squeeze, the guard refuses it and the start is restored
    engine, _ = _makespan_pair(1.3, "none")
    plain = engine.policy.coordinator
    assert plain.swelled[0] == ("A",) and min(plain.final_shares) < 1.0
    engine, jobs = _makespan_pair(1.3, "throughput")
    guarded = engine.policy.coordinator
    assert guarded.final_shares == [1.0, 1.0]
    assert guarded.guard_refusals == 3 and guarded.early_exits == 1  # three refused plans end the search
    assert engine.policy.metrics()["gimbal_guard_refusals"] == 3
    assert "gimbal_guard_refusals" not in plain.metrics()  # default summaries keep their keys (digests)


def test_makespan_guard_keeps_squeezes_that_raise_summed_throughput():
    # ξ⁰ = 2.2: squeezing B raises Σ 1/pace above the start's (0.909) at every cap: the guard changes nothing
    plain, _ = _makespan_pair(2.2, "none")
    guarded, jobs = _makespan_pair(2.2, "throughput")
    assert min(plain.policy.coordinator.final_shares) < 1.0
    assert guarded.policy.coordinator.final_shares == plain.policy.coordinator.final_shares
    assert guarded.policy.coordinator.guard_refusals == 0
    assert [j.end_time for j in guarded.jobs] == [j.end_time for j in plain.jobs]


@pytest.mark.parametrize(("policy", "params", "match"), [
    ("gimbal-jct", {"makespan_guard": "throughput"}, "objective 'makespan' only"),
    ("gimbal-deadline", {"makespan_guard": "throughput"}, "objective 'makespan' only"),
    ("gimbal-jct", {"objective": "makespan", "search_gate": "kept"}, "round-based base"),
])
def test_our_options_are_validated(policy, params, match):
    with pytest.raises(ValueError, match=match):
        make_policy(policy, params)
