"""Pools whose capacity changes over time (sched/core/pools.py): loaning, reclaiming, lost progress, T4 speed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from helpers import make_table
from schedlab.sched.core.cluster import ClusterSpec, PoolSpec
from schedlab.sched.core.engine import Engine, EngineError
from schedlab.sched.models.inference import InferenceLoad
from schedlab.sched.core.job import Job, jobs_from_table
from schedlab.sched.policies.base import Policy
from schedlab.sched.core.pools import (
    LoanOptions,
    Orchestrator,
    PooledCluster,
    PoolError,
    place_on,
)
from helpers import replay_table


def spec(training: int = 2, inference: int = 4, per: int = 8) -> ClusterSpec:
    return ClusterSpec(name="pooled", pools=[
        PoolSpec(name="training", servers=training, gpus_per_server=per),
        PoolSpec(name="inference", servers=inference, gpus_per_server=per, gpu_type="t4", gpu_memory_gb=16)])


class LoanFifo(Policy):
    """Strict FIFO that borrows: non-fungible jobs on training servers, fungible ones there first,
    then on on-loan servers with ``ceil(r·d)`` T4 GPUs; preempted jobs go back to the head."""

    name = "loan-fifo"
    summary = paper = "test"
    uses_loaning = True

    def __init__(self, params=None) -> None:
        super().__init__(params)
        self.queue: list[Job] = []
        self.reclaimed = []

    def on_arrival(self, engine, job):
        self.queue.append(job)

    def on_reclaimed(self, engine, plan):
        self.reclaimed.append(plan)
        self.queue[:0] = sorted(plan.preempt, key=lambda j: j.index)

    def schedule(self, engine):
        cluster = engine.cluster
        while self.queue:
            job = self.queue[0]
            d = job.requested_gpus
            placement = place_on(cluster, range(cluster.training_servers), d)
            gpus = d
            if placement is None and job.fungible:
                gpus = cluster.loan_gpus(d)
                placement = place_on(cluster, list(cluster.on_loan), gpus)
            if placement is None or not engine.start(job, placement, num_gpus=gpus):
                return
            self.queue.pop(0)


def run(rows, load: InferenceLoad, policy=None, *, fungible=None, checkpoint=None, reclaim="lyra", cluster=None,
        **options):
    table = make_table(rows)
    if fungible is not None:
        table["fungible"] = fungible
    if checkpoint is not None:
        table["checkpoint"] = checkpoint
    pooled = PooledCluster(cluster or spec(), LoanOptions(load="constant:0", reclaim=reclaim, **options))
    policy = policy or LoanFifo()
    orch = Orchestrator(load, LoanOptions(load="constant:0", reclaim=reclaim, **options))
    engine = Engine(jobs_from_table(table), pooled, policy, orchestrator=orch)
    return engine.run(), engine, policy


def steps(*pairs) -> InferenceLoad:
    times, util = zip(*pairs)
    return InferenceLoad(np.array(times, float), np.array(util, float), 10_000_000.0, "test")


def test_capacity_follows_the_load_with_headroom():
    # 4 inference servers, headroom ceil(.02*4) = 1: u = 0 -> 3 lent; u = .5 -> 2 needed -> 1 lent
    result, engine, _ = run([("a", 0, 8, 2000)], steps((0, 0.0), (900, 0.5)))
    orch = result.pools
    assert orch.timeline == [(0.0, 3), (900.0, 1)]
    assert orch.loan_ops == 1 and len(orch.reclaims) == 1 and orch.reclaims[0].servers == 2
    assert engine.cluster.total_gpus == 16 + 8
    # capacity integral: 40 GPUs for 900 s, then 24 GPUs until the job ends at 2000
    assert orch.cluster.capacity_gpu_s == pytest.approx(40 * 900 + 24 * 1100)


def test_only_available_servers_count_as_free():
    pooled = PooledCluster(spec())
    assert pooled.free_gpus == pooled.total_gpus == 16 and pooled.idle_inference() == [2, 3, 4, 5]
    pooled.lend([3])
    assert pooled.free_gpus == 24 and pooled.loan_free_gpus == 8 and pooled.training_free_gpus == 16
    assert place_on(pooled, [3], 8) == [(3, 8)]
    with pytest.raises(PoolError, match="not an idle inference server"):
        pooled.lend([3])
    pooled.take_from_servers([(3, 2)], Job("x", 0, 2, 10))
    with pytest.raises(PoolError, match="still holds job"):
        pooled.take_back([3])
    with pytest.raises(ValueError, match="0 free GPUs"):
        pooled.take_from_servers([(4, 1)], Job("y", 0, 1, 10))


def test_fungible_job_runs_on_loan_with_r_t4_gpus_and_unchanged_time():
    # training is full with job a; fungible b (2 GPUs) runs on 6 T4 GPUs at rate 1 (r = 3, σ = 1/3)
    result, _, _ = run([("a", 0, 16, 5000), ("b", 10, 2, 1000)], steps((0, 0.0)), fungible=[False, True])
    a, b = result.jobs
    assert b.ran_on_loan and not a.ran_on_loan
    assert b.start_time == 10 and b.end_time == pytest.approx(1010)
    assert b.num_gpus == 6 and b.requested_gpus == 2
    assert result.pools.cluster.loan_busy_gpu_s == pytest.approx(6 * 1000)


def test_r2_runs_slower_on_t4():
    result, _, _ = run([("a", 0, 16, 5000), ("b", 10, 2, 1000)], steps((0, 0.0)), fungible=[False, True],
                       gpu_equivalence=2.0)
    b = result.jobs[1]
    assert b.num_gpus == 4 and b.end_time == pytest.approx(10 + 1000 / (4 / 3 / 2))


def test_non_fungible_job_waits_for_training_servers():
    result, _, _ = run([("a", 0, 16, 5000), ("b", 10, 2, 1000)], steps((0, 0.0)))
    assert result.jobs[1].start_time == 5000 and not result.jobs[1].ran_on_loan


def test_reclaim_preempts_without_checkpoint_restarts_from_zero_plus_overhead():
    # b on loan from 10; at 600 inference needs every server back: b loses 590 s of progress, waits for
    # training (a ends at 5000) and runs its full 1000 s after the 63 s restore overhead
    result, engine, policy = run([("a", 0, 16, 5000), ("b", 10, 2, 1000)], steps((0, 0.0), (600, 1.0)),
                                 fungible=[False, True])
    b = result.jobs[1]
    assert b.preemptions == 1 and b.preemptions_lost == 1 and b.lost_work_s == pytest.approx(590)
    assert b.end_time == pytest.approx(5000 + 63 + 1000)
    plan = policy.reclaimed[0]
    assert plan.preempt == (b,) and len(plan.servers) == 3
    assert engine.cluster.on_loan == {}


def test_reclaim_keeps_progress_of_checkpointed_jobs():
    result, _, _ = run([("a", 0, 16, 5000), ("b", 10, 2, 1000)], steps((0, 0.0), (600, 1.0)),
                       fungible=[False, True], checkpoint=[True, True])
    b = result.jobs[1]
    assert b.preemptions == 1 and b.preemptions_lost == 0
    assert b.end_time == pytest.approx(5000 + 63 + 410)


def test_keep_progress_option_for_jobs_without_checkpoint_column():
    result, _, _ = run([("a", 0, 16, 5000), ("b", 10, 2, 1000)], steps((0, 0.0), (600, 1.0)),
                       fungible=[False, True], lose_progress=False)
    assert result.jobs[1].end_time == pytest.approx(5000 + 63 + 410)


def test_elastic_job_on_a_reclaimed_server_shrinks_instead_of_being_preempted():
    class Elastic(LoanFifo):
        def schedule(self, engine):
            for job in list(self.queue):
                if job.job_id == "e" and engine.cluster.on_loan:
                    base = place_on(engine.cluster, range(engine.cluster.training_servers), 8)
                    engine.start(job, base, num_gpus=8)
                    loaned = min(engine.cluster.on_loan)
                    engine.resize(job, 16, placement=[(loaned, 8)])
                    self.queue.remove(job)

    table = make_table([("e", 0, 8, 4000)]).assign(elastic_min=8, elastic_max=16)
    policy = Elastic()
    engine = Engine(jobs_from_table(table), PooledCluster(spec()), policy,
                    orchestrator=Orchestrator(steps((0, 0.0), (600, 1.0)), LoanOptions(load="constant:0")))
    result = engine.run()
    e = result.jobs[0]
    assert e.preemptions == 0 and e.resizes == 2 and e.num_gpus == 8
    assert policy.reclaimed[0].shrink == (e,) and result.pools.reclaims[0].flex_servers == 1
    assert result.pools.reclaims[0].idle_servers == 2


def test_a_policy_that_returns_an_occupied_server_is_refused():
    class Careless(LoanFifo):
        def choose_reclaim(self, engine, n):
            return sorted(engine.cluster.on_loan)[:n]

        def on_reclaimed(self, engine, plan):
            raise AssertionError("not reached")

    orch_options = LoanOptions(load="constant:0")

    class Bad(Orchestrator):
        def reclaim(self, engine, n):  # skips preempting: the engine must refuse the return
            self.cluster.take_back(sorted(self.cluster.on_loan)[:n])

    table = make_table([("a", 0, 16, 5000), ("b", 10, 2, 1000)]).assign(fungible=[False, True])
    engine = Engine(jobs_from_table(table), PooledCluster(spec()), LoanFifo(),
                    orchestrator=Bad(steps((0, 0.0), (600, 1.0)), orch_options))
    with pytest.raises(PoolError, match="inference is not affected"):
        engine.run()
    # the orchestrator's own path: a policy's choice outside the loan is refused
    class Outside(LoanFifo):
        def choose_reclaim(self, engine, n):
            return [0] * n

    table = make_table([("a", 0, 16, 5000), ("b", 10, 2, 1000)]).assign(fungible=[False, True])
    engine = Engine(jobs_from_table(table), PooledCluster(spec()), Outside(),
                    orchestrator=Orchestrator(steps((0, 0.0), (600, 1.0)), orch_options))
    with pytest.raises(EngineError, match="needs 3 distinct on-loan servers"):
        engine.run()


def test_no_job_ever_sits_on_an_inference_server_property():
    rng = np.random.default_rng(4)
    n = 60
    rows = [(f"j{i}", float(t), int(g), float(d)) for i, (t, g, d) in enumerate(zip(
        np.sort(rng.uniform(0, 20_000, n)), rng.choice([1, 2, 4, 8], n), rng.uniform(100, 4000, n)))]
    util = rng.uniform(0, 1, 80)
    load = InferenceLoad(np.arange(80) * 600.0, util, 80 * 600.0, "random")
    for strategy in ("lyra", "scf", "random", "optimal"):
        result, engine, _ = run(rows, load, fungible=list(rng.random(n) < 0.5), reclaim=strategy)
        assert all(j.finished for j in result.jobs)
        holders = engine.cluster.holders
        first = engine.cluster.first_inference_gpu
        assert all(not holders[g] for g in range(first, len(holders)))
        orch = result.pools
        assert orch.cluster.loan_busy == 0
        assert orch.cluster.loaned_gpu_s <= orch.cluster.capacity_gpu_s


def test_non_lending_policy_is_bit_identical_with_pools():
    from schedlab.sched.core.cluster import load_cluster
    from helpers import prepared_table
    from schedlab.sched.traces import LoadOptions, load_trace
    from test_replay_digests import COLUMNS

    table, _ = load_trace(None, fmt="synthetic", options=LoadOptions(num_jobs=300, load=3.0, seed=7))
    plain_spec = load_cluster("16x4")
    table, _ = prepared_table(table, plain_spec, annotate=True, seed=7)
    pooled_spec = ClusterSpec(name="16x4+4x4", pools=[*plain_spec.pools, PoolSpec(
        name="inference", servers=4, gpus_per_server=4, gpu_type="t4", gpu_memory_gb=16)])
    for policy in ("fifo", "tiresias", "sjf-bsbf"):
        plain = replay_table(table, plain_spec, policy, seed=7)
        pooled = replay_table(table, pooled_spec, policy, seed=7, inference=LoanOptions(load="constant:0.3"))
        pd.testing.assert_frame_equal(plain.jobs[COLUMNS], pooled.jobs[COLUMNS])
        assert pooled.summary["gpu_util"] == pytest.approx(plain.summary["gpu_util"])
        assert pooled.summary["loan_ops"] == 0 and pooled.summary["training_usage"] == pytest.approx(
            plain.summary["gpu_util"])
        # overall: inference busy 30 % of its 16 GPUs beside the training pool's 64
        expected = (plain.summary["gpu_util"] * 64 + 0.3 * 16) / 80
        assert pooled.summary["overall_usage_raw"] == pytest.approx(expected)


def test_loop_ends_when_a_job_can_never_run():
    # a policy that never starts b: the ticks stop after one load period idle and the engine says why
    class Stuck(LoanFifo):
        def on_arrival(self, engine, job):
            if job.job_id != "b":
                super().on_arrival(engine, job)

    with pytest.raises(EngineError, match="left 1 job.s. unfinished"):
        run([("a", 0, 8, 100), ("b", 0, 8, 100)], steps((0, 0.0)), Stuck())


def test_pool_summary_in_replay(monkeypatch):
    table = make_table([("a", 0, 16, 5000), ("b", 10, 2, 1000)]).assign(fungible=[False, True])
    from schedlab.sched import policies

    monkeypatch.setitem(policies.POLICIES, "loan-fifo", LoanFifo)
    result = replay_table(table, spec(), "loan-fifo", inference=LoanOptions(load="constant:0"))
    s = result.summary
    assert s["loan_ops"] == 1 and s["servers_lent"] == 3 and s["reclaim_ops"] == 0
    assert s["jobs_ran_on_loan"] == 1 and s["preemption_ratio"] == 0
    assert s["onloan_usage"] == pytest.approx(6 * 1000 / (24 * 5000))
    # the utilization series splits the busy GPUs by pool: b's 6 T4 GPUs from its start to its end
    util = result.utilization.set_index("time")
    b = result.jobs.iloc[1]
    assert util["onloan_busy_gpus"].loc[b.start_time] == 6 and util["onloan_busy_gpus"].loc[b.end_time] == 0
    assert (util["onloan_busy_gpus"] <= util["busy_gpus"]).all()
    assert s["gpu_util"] == pytest.approx((16 * 5000 + 6 * 1000) / (40 * 5000))
    assert list(result.jobs["ran_on_loan"]) == [False, True]
    assert math.isnan(s["collateral_damage"])


def test_a_job_ending_at_a_tick_ends_before_the_reclaim():
    # b on loan from 0 ends exactly at 600, when inference takes every server back: no preemption
    result, _, policy = run([("a", 0, 16, 5000), ("b", 0, 2, 600)], steps((0, 0.0), (600, 1.0)),
                            fungible=[False, True])
    b = result.jobs[1]
    assert b.preemptions == 0 and b.end_time == 600
    assert policy.reclaimed[0].preempt == ()


@pytest.mark.parametrize(("predictor", "reclaimed_at", "shortfall"), [("oracle", 300.0, 0.0), ("last", 600.0, 450.0)])
def test_predictors_oracle_is_never_short_last_logs_the_shortfall(predictor, reclaimed_at, shortfall):
    # inference needs every server from 450: the oracle sees it at the 300 tick, `last` only at 600
    result, _, _ = run([("a", 0, 8, 2000)], steps((0, 0.0), (450, 1.0)), predictor=predictor)
    orch = result.pools
    assert orch.reclaims[0].time == reclaimed_at
    assert orch.shortfall_server_s == pytest.approx(shortfall)


def test_servegen_on_the_testbed(monkeypatch):
    # 4 inference servers, 2 % headroom = 1 server; ServeGen mapped to u >= 0.42 keeps >= 2 busy, so at
    # most one is lent (the paper's testbed lent up to three on its own scaled-down trace, §7.5)
    from helpers import shared_data
    from schedlab.sched import policies

    path = shared_data("inference", "servegen_total_rate_per_10min.csv")
    monkeypatch.setitem(policies.POLICIES, "loan-fifo", LoanFifo)
    rng = np.random.default_rng(2)
    n = 150
    table = make_table([(f"j{i}", float(t), int(g), float(d)) for i, (t, g, d) in enumerate(zip(
        np.sort(rng.uniform(0, 3 * 86400, n)), rng.choice([1, 2, 4, 8], n), rng.uniform(600, 20000, n)))])
    table["fungible"] = rng.random(n) < 0.5
    result = replay_table(table, "lyra-testbed", "loan-fifo", inference=LoanOptions(load=str(path)))
    util = result.utilization
    assert util["servers_on_loan"].max() == 1 and util["servers_on_loan"].min() == 0
    assert (util["busy_gpus"] <= util["capacity_gpus"]).all()
    assert result.summary["loan_ops"] > 0 and result.summary["reclaim_ops"] > 0


def test_a_borrowing_policy_must_take_back_preempted_jobs():
    class Forgetful(Policy):
        name = "forgetful"
        uses_loaning = True

    with pytest.raises(PoolError, match="no on_reclaimed"):
        Engine([], PooledCluster(spec()), Forgetful(), orchestrator=Orchestrator(steps((0, 0.0)), LoanOptions(load="constant:0")))


class ElasticLoanFifo(LoanFifo):
    """LoanFifo whose elastic jobs take their base on training servers and grow onto on-loan servers."""

    def schedule(self, engine):
        super().schedule(engine)
        cluster = engine.cluster
        for job in list(engine.running):
            if job.elastic_max > job.num_gpus and not job.ran_on_loan:
                extra = place_on(cluster, list(cluster.on_loan), job.elastic_max - job.num_gpus)
                if extra is not None:
                    engine.resize(job, job.elastic_max, placement=extra)


@pytest.mark.parametrize("strategy", ["lyra", "scf", "random"])
def test_elastic_jobs_shrink_or_restart_and_inference_servers_stay_empty(strategy):
    rng = np.random.default_rng(9)
    n = 80
    rows = [(f"j{i}", float(t), int(g), float(d)) for i, (t, g, d) in enumerate(zip(
        np.sort(rng.uniform(0, 30_000, n)), rng.choice([2, 4, 8], n), rng.uniform(300, 6000, n)))]
    table = make_table(rows)
    elastic = rng.random(n) < 0.4
    table["elastic_min"] = np.where(elastic, table["num_gpus"], np.nan)
    table["elastic_max"] = np.where(elastic, 2 * table["num_gpus"], np.nan)
    table["fungible"] = rng.random(n) < 0.5
    load = InferenceLoad(np.arange(100) * 600.0, rng.uniform(0, 1, 100), 100 * 600.0, "random")
    policy = ElasticLoanFifo()
    engine = Engine(jobs_from_table(table), PooledCluster(spec()), policy,
                    orchestrator=Orchestrator(load, LoanOptions(load="constant:0", reclaim=strategy)))
    result = engine.run()
    assert all(j.finished for j in result.jobs)
    shrinks = sum(len(plan.shrink) for plan in policy.reclaimed)
    assert shrinks > 0 and result.pools.reclaims
    first = engine.cluster.first_inference_gpu
    assert not any(engine.cluster.holders[g] for g in range(first, len(engine.cluster.holders)))
    for plan in policy.reclaimed:
        assert all(j.elastic_min for j in plan.shrink)


def test_opportunistic_never_waits_for_more_than_inference_ever_lends():
    # diurnal:0.42:0.95 on 4 inference servers keeps ceil(0.42 x 4) = 2 + 1 headroom at its trough: one
    # server (8 T4 GPUs) is the most ever lent. A fungible 4-GPU job needs 12 T4 GPUs (r = 3): it used to
    # wait for them forever (EngineError: left unfinished, job syn-000530 on the showdown cluster)
    from schedlab.sched.replay import prepare, run as replay
    from schedlab.sched.spec import ReplaySpec

    orch = Orchestrator(InferenceLoad.diurnal(0.42, 0.95), LoanOptions(load="diurnal:0.42:0.95"))
    engine = Engine(jobs_from_table(make_table([("a", 0.0, 1, 10.0)])), PooledCluster(spec()), LoanFifo(),
                    orchestrator=orch)
    assert orch.most_lent() == 1 and engine.cluster.inference_server_ids
    table = make_table([("big", 0.0, 4, 7200.0), ("small", 0.0, 2, 7200.0)]).assign(fungible=True)
    job_spec = ReplaySpec(cluster=spec(), policies=["opportunistic"], inference={"load": "diurnal:0.42:0.95"})
    result = replay(job_spec, prepare(job_spec, table, warn=False))[0]
    assert sorted(result.jobs["job_id"]) == ["big", "small"]  # both finished
    assert result.summary["jobs_ran_on_loan"] == 1  # the small one still ran on the loan
