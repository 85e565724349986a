"""Gandiva: packing only under overload and only beside a job of the same GPU count, introspective
unpacking when the measured slowdown is too high (and not when it is low), hand-computed, plus the
engine's invariants on a synthetic trace."""

from __future__ import annotations

import math

import pytest
from helpers import shared_data
from packing import run as run_packing
from packing import workloads
from schedlab.sched.models.annotate import annotate
from schedlab.sched.traces import LoadOptions, load_trace

ROWS = [("A", 0, 1, 1000), ("B", 10, 1, 100), ("C", 100, 1, 50)]
MODELS = [("cifar10", 32), ("ncf", 256), ("ncf", 256)]


def run(table, cluster, xi, params=None, overhead=0.0):
    return run_packing(table, cluster, xi, "gandiva", params, overhead, packs_only_under_overload=True)


def test_unpacks_when_measured_slowdown_is_high():
    # ξ = 2.5: B packs beside A at t=10 (no free GPU); at t=70 the check reads 1/2.5 + 1/2.5 = 0.8 < 1
    # and unpacks B (back to the queue, progress kept: 60/2.5 = 24 of 100 s). A then runs alone:
    # 10 + 24 done by t=70, ends at 70 + 966 = 1036. C has B's workload: (cifar10, ncf) failed, so C
    # is never packed beside A. At 1036 B restarts alone (restore overhead 0 here) and C, still
    # waiting, tries the untried pair (ncf, ncf) beside B; at 1096 that fails too: B has done 24 more
    # (52 left, ends 1148), C did 24 (26 left, resumes at 1148, ends 1174).
    engine, jobs = run(workloads(ROWS, MODELS), "1x1", "analytic:2.5")
    partner_of = [(round(t, 6), job.job_id, partner and partner.job_id) for t, job, partner in engine.log]
    assert partner_of == [
        (0, "A", None), (10, "B", "A"), (1036, "B", None), (1036, "C", "B"), (1148, "C", None)
    ]
    assert engine.policy.packs == 2 and engine.policy.unpacks == 2
    assert jobs["B"].preemptions == 1 and jobs["C"].preemptions == 1 and jobs["A"].preemptions == 0
    assert jobs["A"].end_time == pytest.approx(1036.0)
    assert jobs["B"].end_time == pytest.approx(1148.0)
    assert jobs["C"].end_time == pytest.approx(1174.0)


def test_keeps_the_pair_when_measured_slowdown_is_low():
    # ξ = 1.1: 1/1.1 + 1/1.1 = 1.82 >= 1, the pair stays. B ends at 10 + 100 x 1.1 = 120. C arrives
    # at 100 while A's GPU already holds two jobs: it waits for B, packs beside A at 120 and ends at
    # 120 + 50 x 1.1 = 175. A has done 10 + 110/1.1 + 55/1.1 = 160 s by then: it ends at 175 + 840.
    engine, jobs = run(workloads(ROWS, MODELS), "1x1", "analytic:1.1")
    assert engine.policy.packs == 2 and engine.policy.unpacks == 0
    assert sum(j.preemptions for j in jobs.values()) == 0
    assert jobs["B"].end_time == pytest.approx(120.0)
    assert jobs["C"].start_time == pytest.approx(120.0) and jobs["C"].end_time == pytest.approx(175.0)
    assert jobs["A"].end_time == pytest.approx(175.0 + 840.0)


def test_threshold_is_a_parameter():
    engine, _ = run(workloads(ROWS, MODELS), "1x1", "analytic:1.1", params={"min_packed_throughput": 1.9})
    assert engine.policy.unpacks == 1  # 1.82 < 1.9


def test_no_packing_without_overload():
    table = workloads([("A", 0, 1, 1000), ("B", 10, 1, 100)], MODELS[:2])
    engine, jobs = run(table, "1x2", "analytic:1.1")
    assert engine.policy.packs == 0 and jobs["B"].start_time == pytest.approx(10.0)


def test_packs_only_beside_a_job_of_the_same_gpu_count():
    # 4 GPUs held by two 2-GPU jobs; C (1 GPU) finds no 1-GPU partner and waits; D (2 GPUs) packs
    # beside the 2-GPU job with the smaller memory footprint (ncf 0.12 GiB rather than cifar10).
    table = workloads(
        [("A", 0, 2, 1000), ("B", 0, 2, 500), ("C", 10, 1, 100), ("D", 20, 2, 100)],
        [("cifar10", 32), ("ncf", 256), ("ncf", 256), ("cifar10", 32)],
    )
    engine, jobs = run(table, "1x4", "analytic:1.1")
    partner_of = {job.job_id: partner and partner.job_id for _, job, partner in engine.log}
    assert partner_of["D"] == "B" and partner_of["C"] is None
    assert jobs["C"].start_time == pytest.approx(500.0 + 100 * 0.1)  # B slowed by 1.1 for D's 110 s


def test_memory_cap_is_respected():
    # 16 GB T4: bert at batch 12 (15 GiB) and imagenet at batch 32 (2.7 GiB) do not fit together
    table = workloads([("A", 0, 1, 1000), ("B", 10, 1, 100)], [("bert", 12), ("imagenet", 32)])
    engine, jobs = run(table, "1x1:t4", "analytic:1.1")
    assert engine.policy.packs == 0 and jobs["B"].start_time == pytest.approx(1000.0)


@pytest.mark.parametrize("xi", ["analytic:1.1", "analytic:2.5"])
def test_invariants_on_a_synthetic_trace(xi):
    table, _ = load_trace(None, "synthetic", LoadOptions(num_jobs=2000, max_gpus=128, load=2.0))
    engine, jobs = run(annotate(table, seed=0), "16x8", xi, overhead=None)
    assert len(jobs) == 2000 and all(math.isfinite(j.end_time) for j in jobs.values())
    assert engine.policy.packs > 0
    assert sum(j.preemptions for j in jobs.values()) == engine.policy.unpacks
    assert (engine.policy.unpacks > 0) == (xi == "analytic:2.5")
    for _, job, partner in engine.log:
        if partner is not None:
            assert job.num_gpus == partner.num_gpus


def test_invariants_with_gavel_measured_interference():
    path = shared_data("profiles", "gavel", "simulation_throughputs.json")
    table, _ = load_trace(None, "synthetic", LoadOptions(num_jobs=500, max_gpus=32, load=2.0))
    engine, jobs = run(annotate(table, seed=0), "4x8", f"gavel:{path}", overhead=None)
    assert all(math.isfinite(j.end_time) for j in jobs.values())
    assert sum(j.preemptions for j in jobs.values()) == engine.policy.unpacks
