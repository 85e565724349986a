"""ClusterState's one-GPU fast paths (take_from_servers, release) against its general paths on random
sequences of starts, shares and stops: the two must leave identical state."""

from __future__ import annotations

import random

import pytest
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.placement import fewest_servers


def _state(c: ClusterState) -> tuple:
    return (c.free_by_server, c.servers_with_free, c.holders, c.free_gpus, c.single_gpus, c.double_gpus,
            c.single_by_server)


class _Job:  # a stand-in holder: identity is all ClusterState looks at
    def __init__(self, name: int) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"job{self.name}"


@pytest.mark.parametrize("seed", range(8))
def test_fast_paths_match_the_general_paths(seed):
    rng = random.Random(seed)
    spec = load_cluster(rng.choice(["4x4", "8x8", "3x2"]))
    fast, general = ClusterState(spec), ClusterState(spec)
    held: dict[_Job, tuple[int, ...]] = {}  # job -> its GPUs
    fast_paths = 0
    for step in range(600):
        op = rng.random()
        if op < 0.5:  # start a job where fewest-servers places it (1 GPU most often), or on a chosen server
            demand = rng.choice([1, 1, 1, 2, 3, spec.pools[0].gpus_per_server + 1])
            placement = fewest_servers(fast, demand, rng)
            if placement is None:
                continue
            if rng.random() < 0.2 and demand == 1:
                servers = [s for s, stack in enumerate(fast.free_by_server) if stack]
                placement = [(rng.choice(servers), 1)]
            job = _Job(step)
            fast_paths += len(placement) == 1
            got = fast.take_from_servers(placement, job)
            assert general._take_general(placement, job) == got
            held[job] = got
        elif op < 0.65 and held:  # a job joins one GPU of another (two holders: release takes the general path)
            singles = [g for g in fast.single_gpu_ids()]
            if singles:
                g = rng.choice(singles)
                job = _Job(step)
                fast.share((g,), job)
                general.share((g,), job)
                held[job] = (g,)
        elif held:  # a job leaves all its GPUs, or (resizing) one of them
            job = rng.choice(list(held))
            gpus = held[job] if rng.random() < 0.7 else tuple(rng.sample(held[job], rng.randint(1, len(held[job]))))
            fast.release(job, gpus)
            general._release_general(job, gpus)
            held[job] = tuple(g for g in held[job] if g not in gpus)
            if not held[job]:
                del held[job]
        assert _state(fast) == _state(general)
    assert fast_paths > 50


def test_release_of_a_gpu_the_job_does_not_hold_fails():
    state = ClusterState(load_cluster("2x4"))
    a, b = _Job(1), _Job(2)
    (g,) = state.take_from_servers([(0, 1)], a)
    with pytest.raises(ValueError):
        state.release(b, (g,))
    with pytest.raises(ValueError, match="server 1 has 0 free GPUs, 1 asked"):
        state.take_from_servers([(1, 4)], a)
        state.take_from_servers([(1, 1)], a)
