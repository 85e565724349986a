"""Lucid: hand-computed scenarios for its packing rule (same GPU count, memory cap, sharing score,
time-aware priority ratio), its priority order, and the engine's invariants on a synthetic trace."""

from __future__ import annotations

import math

import pytest
from helpers import make_table, shared_data
from packing import run as run_packing
from packing import workloads
from schedlab.sched.models.annotate import annotate
from schedlab.sched.traces import LoadOptions, load_trace


def run(table, cluster, xi, policy="lucid", params=None, overhead=None):
    return run_packing(table, cluster, xi, policy, params, overhead)

def test_packs_only_beside_a_job_of_the_same_gpu_count():
    # A (2 GPUs) runs; B (1 GPU) cannot pack beside it and takes a free GPU; C (2 GPUs, priority
    # 500x2 <= 2 x 1000x2) packs beside A. ξ = 1.05 -> speed 0.952 >= 0.95: every score is 0.
    table = workloads(
        [("A", 0, 2, 1000), ("B", 10, 1, 1000), ("C", 20, 2, 500)],
        [("cifar10", 32), ("ncf", 256), ("ncf", 256)],
    )
    engine, jobs = run(table, "1x4", "analytic:1.05")
    partner_of = {job.job_id: partner and partner.job_id for _, job, partner in engine.log}
    assert partner_of == {"A": None, "B": None, "C": "A"}
    # C runs at 1/1.05 from t=20: ends 20 + 500 x 1.05 = 545; A did 10 + 20 + 500 by then, ends 545 + 480
    assert jobs["C"].end_time == pytest.approx(545.0)
    assert jobs["A"].end_time == pytest.approx(1025.0)
    assert jobs["B"].end_time == pytest.approx(1010.0)


def test_memory_cap_is_respected():
    # 16 GB T4s: bert at batch 12 (15.0 GiB) fits beside ncf (0.12 GiB) but not beside imagenet (2.72 GiB)
    table = workloads(
        [("A", 0, 1, 1000), ("B", 0, 1, 1000), ("C", 10, 1, 100), ("D", 20, 1, 100)],
        [("bert", 12), ("bert", 12), ("imagenet", 32), ("ncf", 256)],
    )
    engine, jobs = run(table, "1x2:t4", "analytic:1.05")
    partner_of = {job.job_id: partner and partner.job_id for _, job, partner in engine.log}
    assert partner_of["D"] in ("A", "B")
    assert partner_of["C"] is None and jobs["C"].start_time == pytest.approx(1000.0)  # waited for a GPU
    assert jobs["C"].shared_seconds == 0.0


@pytest.mark.parametrize(("xi", "packs"), [("analytic:1.1", True), ("analytic:1.2", False), ("analytic", False)])
def test_sharing_score_thresholds(xi, packs):
    # speed 1/1.1 = 0.91 -> score 1 each, pair 2 <= 2 packs; 1/1.2 = 0.83 and 1/1.5 -> score 2, never
    table = workloads([("A", 0, 1, 1000), ("B", 10, 1, 100)], [("cifar10", 32), ("ncf", 256)])
    engine, jobs = run(table, "1x1", xi)
    assert engine.policy.packs == (1 if packs else 0)
    assert jobs["B"].start_time == pytest.approx(10.0 if packs else 1000.0)
    assert engine.policy.score(engine, jobs["A"]) == {"analytic:1.1": 1}.get(xi, 2)


@pytest.mark.parametrize(("duration", "packs"), [(1900, True), (2100, False)])
def test_time_aware_priority_ratio(duration, packs):
    # the newcomer packs only if its priority value <= 2 x the running job's (2 x 1000)
    table = workloads([("A", 0, 1, 1000), ("B", 10, 1, duration)], [("cifar10", 32), ("ncf", 256)])
    engine, jobs = run(table, "1x1", "analytic:1.05")
    assert engine.policy.packs == (1 if packs else 0)


def test_priority_is_estimated_gpu_time_and_does_not_block():
    # at t=100 two GPUs free up: C (1 GPU x 90 s = 90) outranks B (2 GPUs x 60 s = 120) although B
    # is shorter; B then waits for both GPUs. No sharing (ξ = 1.5 -> every score is 2).
    table = make_table([("A1", 0, 1, 100), ("A2", 0, 1, 100), ("B", 1, 2, 60), ("C", 2, 1, 90)])
    table = annotate(table, seed=0)
    engine, jobs = run(table, "1x2", "analytic")
    assert jobs["C"].start_time == pytest.approx(100.0)
    assert jobs["B"].start_time == pytest.approx(190.0)


def test_multi_server_jobs_are_never_packed():
    # 16-GPU jobs span two 8-GPU servers: Lucid leaves them exclusive even when sharing is free
    table = workloads([("A", 0, 16, 1000), ("B", 10, 16, 100)], [("cifar10", 32), ("ncf", 256)])
    engine, jobs = run(table, "2x8", "analytic:1.05")
    assert engine.policy.packs == 0 and jobs["B"].start_time == pytest.approx(1000.0)
    engine, jobs = run(table, "2x8", "analytic:1.05", params={"max_pack_gpus": 16})
    assert engine.policy.packs == 1


@pytest.mark.parametrize("xi", ["analytic:1.05", "analytic:1.1"])
def test_invariants_on_a_synthetic_trace(xi):
    table, _ = load_trace(None, "synthetic", LoadOptions(num_jobs=2000, max_gpus=128, load=2.0))
    engine, jobs = run(annotate(table, seed=0), "16x8", xi)
    assert len(jobs) == 2000 and all(math.isfinite(j.end_time) for j in jobs.values())
    assert engine.policy.packs > 0 and sum(j.preemptions for j in jobs.values()) == 0
    for _, job, partner in engine.log:
        if partner is not None:
            assert job.num_gpus == partner.num_gpus <= 8


def test_invariants_with_gavel_measured_interference():
    path = shared_data("profiles", "gavel", "simulation_throughputs.json")
    table, _ = load_trace(None, "synthetic", LoadOptions(num_jobs=500, max_gpus=32, load=2.0))
    engine, jobs = run(annotate(table, seed=0), "4x8", f"gavel:{path}")
    assert all(math.isfinite(j.end_time) for j in jobs.values())
