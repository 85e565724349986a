"""Placement strategies: which free GPUs a job gets. Separate from policies and reusable by all of them.

A strategy looks only at per-server free counts (O(servers) per call) and returns ``(server, n)``
pairs, or ``None`` when the job cannot be placed. Every strategy places a job whenever enough GPUs
are free in total; they differ in which servers they pick:

- ``consolidated``: fewest servers (one server if any can hold the job, the best-fitting one;
  otherwise the servers with the most free GPUs first). Tiresias §3.1 and Castor §8 place this way.
- ``best-fit``: fill the fullest servers first (least free GPUs that still help), which keeps whole
  servers free for large jobs but may spread a job over more servers.
- ``random``: free GPUs drawn uniformly at random (seeded), the placement-agnostic baseline.
"""

from __future__ import annotations

import random
from typing import Callable

from schedlab.sched.cluster import ClusterState

Placement = list[tuple[int, int]]
Strategy = Callable[[ClusterState, int, random.Random], Placement | None]


def consolidated(cluster: ClusterState, demand: int, rng: random.Random) -> Placement | None:
    if demand > cluster.free_gpus:
        return None
    masks = cluster.servers_with_free  # per free count, a bit mask of the servers with that many free
    for n in range(demand, cluster.gpus_per_server + 1):  # best fit: fewest free GPUs, then lowest server
        mask = masks[n]
        if mask:
            return [((mask & -mask).bit_length() - 1, demand)]
    placement: Placement = []  # no server fits it: most free first, then highest server (as fill)
    for n in range(min(demand - 1, cluster.gpus_per_server), 0, -1):
        mask = masks[n]
        while mask:
            server = mask.bit_length() - 1
            mask ^= 1 << server
            take = min(n, demand)
            placement.append((server, take))
            demand -= take
            if demand == 0:
                return placement
    return placement


def best_fit(cluster: ClusterState, demand: int, rng: random.Random) -> Placement | None:
    if demand > cluster.free_gpus:
        return None
    free = sorted((len(stack), server) for server, stack in enumerate(cluster.free_by_server) if stack)
    fitting = [(n, s) for n, s in free if n >= demand]
    if fitting:
        return [(fitting[0][1], demand)]
    return fill(free, demand)


def random_placement(cluster: ClusterState, demand: int, rng: random.Random) -> Placement | None:
    if demand > cluster.free_gpus:
        return None
    pool = [server for server, stack in enumerate(cluster.free_by_server) for _ in stack]
    chosen = rng.sample(pool, demand)
    counts: dict[int, int] = {}
    for server in chosen:
        counts[server] = counts.get(server, 0) + 1
    return sorted(counts.items())


def fill(free: list[tuple[int, int]], demand: int) -> Placement:
    """Take ``demand`` GPUs from ``(free count, server)`` pairs in the order given, each server's all
    (the last one's part); the caller has checked that enough are free."""
    placement: Placement = []
    for n, server in free:
        take = min(n, demand)
        placement.append((server, take))
        demand -= take
        if demand == 0:
            break
    return placement


STRATEGIES: dict[str, Strategy] = {
    "consolidated": consolidated,
    "best-fit": best_fit,
    "random": random_placement,
}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown placement {name!r}; choose one of {', '.join(STRATEGIES)}") from None
