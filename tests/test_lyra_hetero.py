"""Heterogeneous jobs under ``lyra`` (Lyra EuroSys'23 §2.1, §6, §7.1; specs/lyra.md §2.6, §6 A17): a job
may hold V100 (training) and T4 (on-loan) GPUs at once, is scheduled after all other jobs, and runs at
``heterogeneous_perf`` x its normalised GPUs / demand while mixed, at full speed on one type."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_table
from pydantic import ValidationError
from schedlab.sched.core.cluster import ClusterSpec, PoolSpec
from schedlab.sched.core.engine import Engine
from schedlab.sched.models.inference import InferenceLoad
from schedlab.sched.core.job import Job, jobs_from_table
from schedlab.sched.policies import make_policy
from schedlab.sched.core.pools import LoanOptions, Orchestrator, PooledCluster
from schedlab.sched.models.scaling import use_elastic_scaling


def spec(training: int = 2, inference: int = 3) -> ClusterSpec:
    # inference 3 servers, headroom ceil(0.02 x 3) = 1: at most 2 servers (16 T4) lent
    return ClusterSpec(name="hetero", pools=[
        PoolSpec(name="training", servers=training, gpus_per_server=8),
        PoolSpec(name="inference", servers=inference, gpus_per_server=8, gpu_type="t4", gpu_memory_gb=16)])


def steps(*pairs) -> InferenceLoad:
    times, util = zip(*pairs)
    return InferenceLoad(np.array(times, float), np.array(util, float), 10_000_000.0, "test")


def run(rows, *, hetero, fungible=None, elastic=None, load=None, params=None, **options):
    table = make_table(rows)
    table["heterogeneous"] = hetero
    table["fungible"] = fungible if fungible is not None else [False] * len(rows)
    if elastic is not None:
        table["elastic_min"] = [lo for lo, _ in elastic]
        table["elastic_max"] = [hi for _, hi in elastic]
    loan = LoanOptions(load="constant:0", **options)
    policy = make_policy("lyra", {"rescale_interval_s": 0, **(params or {})})
    engine = Engine(jobs_from_table(table), PooledCluster(spec(), loan), policy,
                    orchestrator=Orchestrator(load or steps((0, 0.0)), loan),
                    preemption_overhead_s=policy.default_preemption_overhead_s)
    use_elastic_scaling(engine)
    return engine.run(), engine, policy


def kinds(engine: Engine, job: Job) -> tuple[int, int]:
    first = engine.cluster.first_inference_gpu
    return sum(g < first for g in job.gpus), sum(g >= first for g in job.gpus)


def test_jobs_from_table_reads_the_heterogeneous_column():
    table = make_table([("a", 0, 1, 10), ("b", 0, 1, 10), ("c", 0, 1, 10)])
    table["heterogeneous"] = [True, False, None]
    assert [j.heterogeneous for j in jobs_from_table(table)] == [True, False, False]


def test_mixed_speed_is_perf_times_normalised_gpus_over_demand():
    cluster = PooledCluster(spec(), LoanOptions(load="constant:0"))
    first = cluster.first_inference_gpu
    job = Job("h", 0, 8, 100)
    job.gpus = tuple(range(4)) + tuple(range(first, first + 12))  # 4 V100 + 12 T4 = 8 V100s' worth
    assert cluster.speed(job) == pytest.approx(0.7)
    job.gpus = tuple(range(4)) + tuple(range(first, first + 10))  # 4 + 10/3 = 7.33 of 8
    assert cluster.speed(job) == pytest.approx(0.7 * (4 + 10 / 3) / 8)
    cluster.heterogeneous_perf = 1.0  # Ideal
    job.gpus = tuple(range(4)) + tuple(range(first, first + 12))
    assert cluster.speed(job) == pytest.approx(1.0)
    job.gpus = tuple(range(8))  # one type: full speed
    assert cluster.speed(job) == 1.0


def test_heterogeneous_perf_is_validated():
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValidationError, match="heterogeneous_perf"):
            LoanOptions(load="constant:0", heterogeneous_perf=bad)


@pytest.mark.parametrize("perf", [0.7, 1.0])
def test_a_job_on_both_types_runs_at_perf_times_normalised_rate(perf):
    # a holds 12 of 16 V100s; h (8 GPUs) gets the 4 free V100s + 12 T4s (16 T4 lent: 24 would fit
    # on loan alone, 16 does not): normalised 8 of 8 -> rate perf
    result, _, policy = run([("a", 0, 12, 5000), ("h", 10, 8, 700)], hetero=[False, True],
                                 heterogeneous_perf=perf)
    h = result.jobs[1]
    assert h.start_time == 10 and h.end_time == pytest.approx(10 + 700 / perf)
    assert policy.metrics()["mixed_starts"] == 1 and h.ran_on_loan


def test_a_job_on_one_type_runs_at_full_speed():
    # training has room for h: V100 only, rate 1
    result, _, _ = run([("a", 0, 8, 5000), ("h", 10, 8, 700)], hetero=[False, True])
    h = result.jobs[1]
    assert h.end_time == pytest.approx(710) and not h.ran_on_loan
    # training full: h (4 GPUs) on 12 T4s alone, rate 1 (r = 3, σ = 1/3)
    result, _, policy = run([("a", 0, 16, 5000), ("h", 10, 4, 700)], hetero=[False, True])
    h = result.jobs[1]
    assert h.end_time == pytest.approx(710) and h.ran_on_loan and policy.metrics()["mixed_starts"] == 0


def test_heterogeneous_jobs_are_scheduled_after_all_others():
    # at 1000 a frees the training servers; b (5000 s) and h (100 s, shorter) wait. Nothing is lent
    # (u = 1), so only one fits: SJF would start h, but a heterogeneous job comes last (§6)
    rows = [("a", 0, 16, 1000), ("b", 10, 16, 5000), ("h", 20, 16, 100)]
    full = steps((0, 1.0))
    result, _, _ = run(rows, hetero=[False, False, True], load=full)
    _, b, h = result.jobs
    assert b.start_time == pytest.approx(1000) and h.start_time == pytest.approx(6000)
    result, _, _ = run(rows, hetero=[False, False, False], load=full)  # same jobs, none heterogeneous
    assert result.jobs[2].start_time == pytest.approx(1000) and result.jobs[1].start_time == pytest.approx(1100)


def test_elastic_heterogeneous_job_base_on_training_flexible_on_loan():
    # e (base 4, max 8) alone: base on V100s, its 4 flexible GPUs' worth as 12 T4s -> mixed, normalised
    # 8 of base 4 -> 0.7 x 2 = 1.4 (better than 1.0 at base, so the knapsack takes them)
    result, _, policy = run([("e", 0, 4, 1400)], hetero=[True], fungible=[True], elastic=[(4, 8)])
    e = result.jobs[0]
    assert e.end_time == pytest.approx(1000)
    assert policy.scale_outs == 1 and e.ran_on_loan


def test_flexible_workers_fall_back_to_training_servers_when_nothing_is_lent():
    # u = 1: nothing on loan, so e's flexible workers go to training servers: 8 V100s, rate 2
    result, _, policy = run([("e", 0, 4, 1400)], hetero=[True], fungible=[True], elastic=[(4, 8)],
                            load=steps((0, 1.0)))
    e = result.jobs[0]
    assert e.end_time == pytest.approx(700) and not e.ran_on_loan and policy.scale_outs == 1


def test_reclaim_preempts_a_mixed_job_and_shrinks_flexible_workers():
    # at 600 inference takes every server back. h (inelastic, 4 V100 + 12 T4) is preempted and restarts
    # from zero on training servers only (after a); e (elastic, base 4 V100, flexible 12 T4) only
    # loses its flexible workers, then grows on training servers
    load = steps((0, 0.0), (600, 1.0))
    result, _, _ = run([("a", 0, 12, 3000), ("h", 10, 8, 1000)], hetero=[False, True], load=load)
    h = result.jobs[1]
    record = result.pools.reclaims[0]
    assert h.preemptions == 1 and record.preempted == 1 and record.shrunk == 0
    assert h.start_time == pytest.approx(10) and h.end_time == pytest.approx(3000 + 63 + 1000)
    result, engine, _ = run([("e", 0, 4, 4000)], hetero=[True], fungible=[True], elastic=[(4, 8)], load=load)
    e = result.jobs[0]
    record = result.pools.reclaims[0]
    assert e.preemptions == 0 and record.shrunk == 1 and record.flex_servers == 2
    # rate 1.4 while mixed; after, nothing is lent: flexible workers on training servers, rate 2
    assert e.end_time == pytest.approx(600 + (4000 - 600 * 1.4) / 2)
    first = engine.cluster.first_inference_gpu
    assert not any(engine.cluster.holders[g] for g in range(first, len(engine.cluster.holders)))


def test_preempted_pools_any_lets_a_preempted_job_use_both_types_again():
    rows = [("a", 0, 8, 30000), ("b", 0, 4, 30000), ("h", 10, 8, 1000)]
    load = steps((0, 0.0), (600, 1.0), (1200, 0.0))
    result, _, _ = run(rows, hetero=[False, False, True], load=load, params={"preempted_pools": "any"})
    h = result.jobs[2]
    assert h.preemptions == 1 and h.end_time == pytest.approx(1200 + 63 + 1000 / 0.7)
    result, _, _ = run(rows, hetero=[False, False, True], load=load)  # default: training only after
    assert result.jobs[2].end_time > 30000
