"""Placement strategies: ``strict-consolidated`` (the Tiresias simulator's ``yarn``) against
``fewest-servers`` (old name ``consolidated``, which places whenever enough GPUs are free: its ``count``).
"""

from __future__ import annotations

import random

import pytest
from helpers import make_table
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine, EngineError
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.core.placement import canonical_placement, strict_consolidated
from schedlab.sched.policies import make_policy
from helpers import replay_table


def _state(cluster: str, taken: list[tuple[int, int]]) -> ClusterState:
    state = ClusterState(load_cluster(cluster))
    state.take_from_servers(taken, job=None)
    return state


def test_strict_keeps_a_small_job_on_the_first_server_that_holds_it():
    state = _state("3x4", [(0, 3), (1, 1)])  # free: 1, 3, 4
    rng = random.Random(0)
    assert strict_consolidated(state, 1, rng) == [(0, 1)]  # the lowest server that fits (simulator order)
    assert strict_consolidated(state, 3, rng) == [(1, 3)]
    assert strict_consolidated(state, 4, rng) == [(2, 4)]
    assert strict_consolidated(_state("3x4", [(0, 3), (1, 3), (2, 3)]), 2, rng) is None  # 3 free, none together


def test_strict_gives_a_larger_job_whole_servers_and_one_for_the_rest():
    rng = random.Random(0)
    state = _state("4x4", [(0, 1), (2, 3)])  # free: 3, 4, 1, 4
    assert strict_consolidated(state, 8, rng) == [(1, 4), (3, 4)]
    assert strict_consolidated(state, 6, rng) == [(1, 4), (0, 2)]  # the rest on the lowest other server
    assert strict_consolidated(state, 5, rng) == [(1, 4), (0, 1)]
    assert strict_consolidated(state, 12, rng) is None  # 12 free, but two whole servers only
    spread = _state("3x4", [(0, 2), (1, 2), (2, 2)])  # 6 free, no whole server
    assert strict_consolidated(spread, 6, rng) is None
    assert strict_consolidated(spread, 5, rng) is None


# Three jobs on 2 servers x 4 GPUs, all at t = 0: A (3 GPUs, 1,000 s), B (3 GPUs, 2,000 s), C (2 GPUs,
# 100 s). fifo and tiresias (arrival order) put A on server 0 and B on server 1: 2 GPUs are left, one
# on each server. fewest-servers (the simulator's count) starts C at once across both;
# strict-consolidated (the simulator's yarn) makes it wait until A's server is free at 1,000 s.
# srtf serves C first (server 0), then A (server 1); B's 3 GPUs are free only spread over both
# servers, so under strict-consolidated B waits until C ends at 100 s.
# The Tiresias simulator (959f9b0, schedlab.studies.conformance.tiresias_record's fixes, 1 x 2 nodes x 4 GPUs) gives
# the same: fifo 1,000 / 2,000 / 100 under count and 1,000 / 2,000 / 1,100 under yarn; shortest
# 1,000 / 2,100 / 100 under yarn; dlas-gpu 1,000 / 2,000 / 100 under both (it never consults yarn).
THREE_JOBS = [("a", 0, 3, 1000), ("b", 0, 3, 2000), ("c", 0, 2, 100)]
COUNT = {"a": 1000.0, "b": 2000.0, "c": 100.0}
STRICT = {"fifo": {**COUNT, "c": 1100.0}, "tiresias": {**COUNT, "c": 1100.0}, "srtf": {**COUNT, "b": 2100.0}}


@pytest.mark.parametrize("policy", sorted(STRICT))
@pytest.mark.parametrize("placement", ["fewest-servers", "consolidated", "strict-consolidated"])
def test_three_jobs_show_the_difference(policy, placement):
    result = replay_table(make_table(THREE_JOBS), "2x4", policy, placement=placement, preemption_overhead_s=0.0)
    jct = dict(zip(result.jobs["job_id"], result.jobs["jct_s"], strict=True))
    assert jct == (STRICT[policy] if placement == "strict-consolidated" else COUNT)
    assert result.summary["placement"] == canonical_placement(placement)  # logged under its own name


def test_strict_fifo_blocks_at_the_head_and_srtf_lets_later_jobs_pass():
    # C (2 GPUs) cannot be placed at t = 0; D (1 GPU, 50 s) arrives behind it
    jobs = [*THREE_JOBS, ("d", 1, 1, 50)]
    fifo = replay_table(make_table(jobs), "2x4", "fifo", placement="strict-consolidated")
    srtf = replay_table(make_table(jobs), "2x4", "srtf", placement="strict-consolidated", preemption_overhead_s=0.0)
    assert dict(zip(fifo.jobs["job_id"], fifo.jobs["start_time"], strict=True))["d"] == 1000.0  # behind C
    assert dict(zip(srtf.jobs["job_id"], srtf.jobs["start_time"], strict=True))["d"] == 1.0


def test_a_policy_that_assumes_any_free_gpus_do_is_refused_under_strict():
    jobs = jobs_from_table(make_table(THREE_JOBS))
    with pytest.raises(EngineError, match="policy 'afs' assumes any free GPUs will do.*backfill, fifo, gandiva,"
                                          " gavel, gimbal-deadline, gimbal-jct, gimbal-makespan, lucid, sjf, srtf,"
                                          " ssf, tiresias"):
        Engine(jobs, ClusterState(load_cluster("2x4")), make_policy("afs"), placement="strict-consolidated")
    with pytest.raises(ValueError, match="unknown placement 'tight'.*consolidated \\(= fewest-servers\\)"):
        canonical_placement("tight")
