"""``MpsCap``'s memoised ratio (by both jobs' workload, mode and caps) against its direct computation,
on random pairs of workloads, accumulation steps, modes and caps: the same floats, exactly."""

from __future__ import annotations

import random

import pytest
from helpers import shared_data
from schedlab.sched.models.interference import MpsCap, make_interference
from schedlab.sched.core.job import Job

WORKLOADS = [("cifar10", 32.0), ("ncf", 256.0), ("bert", 12.0), ("cifar10", 64.0), ("resnet50", 64.0)]


@pytest.mark.parametrize("base", ["analytic:1.7", "gavel"])
def test_mpscap_memo_equals_the_direct_ratio(base):
    if base == "gavel":  # ξ by workload and micro-batch: a key that left out accumulation steps would fail
        base = f"gavel:{shared_data('profiles', 'gavel', 'simulation_throughputs.json')}"
    source = make_interference(f"mpscap:{base}")
    assert isinstance(source, MpsCap) and source._memo is not None
    rng = random.Random(0)
    jobs = [Job(job_id=f"j{i}", index=i, submit_time=0.0, duration=1.0, num_gpus=1, model=m, batch_size=b,
                accumulation_steps=rng.choice([1, 2])) for i, (m, b) in enumerate(WORKLOADS * 3)]
    for _ in range(500):  # each pair asked several times: from the memo after the first
        a, b = rng.sample(jobs, 2)
        mode = rng.choice(["mps", "timeslice"])
        shares = rng.choice([None, (100.0, 100.0), (50.0, 100.0), (30.0, 70.0), (10.0, 90.0)])
        assert source.ratio(a, b, mode, shares) == source._ratio(a, b, mode, shares)
    assert len(source._memo) > 10
