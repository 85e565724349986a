"""Placement strategies: which free GPUs a job gets. Separate from policies and reusable by all of them.

A strategy looks only at per-server free counts (O(servers) per call) and returns ``(server, n)``
pairs, or ``None`` when the job cannot be placed; the policy decides what a refused job does (waits,
blocks the queue, or lets later jobs pass). Two families:

Placed whenever enough GPUs are free in total (the Tiresias simulator's ``count`` scheme, which only
counts GPUs, gives the same schedules); they differ in which servers they pick:

- ``fewest-servers`` (old name ``consolidated``, still accepted): one server if any can hold the job
  (the best-fitting one, then the lowest); otherwise the servers with the most free GPUs first, which
  spreads the job over as few servers as the free GPUs allow. Castor §5.2.2 and SJF-BSBF §V-B2 (their
  Alg. 1 lines 6-7) place this way: once enough GPUs are free, free GPUs as consolidated as possible.
- ``best-fit``: fill the fullest servers first (least free GPUs that still help), which keeps whole
  servers free for large jobs but may spread a job over more servers.
- ``random``: free GPUs drawn uniformly at random (seeded), the placement-agnostic baseline.

Refused although enough GPUs are free (fragmentation makes a job wait):

- ``strict-consolidated``: the Tiresias simulator's ``yarn`` scheme (959f9b0, ``simulator/switch.py``
  ``ms_yarn_alloc_res``; its per-switch, CPU and memory checks do not bind on one switch of 4-GPU
  nodes): a job of at most one server's GPUs runs on one server, the lowest-numbered with enough free
  GPUs; a larger job gets ``demand // gpus_per_server`` whole free servers (the lowest-numbered) and,
  for the rest, the lowest-numbered other server with enough free GPUs: the fewest servers a job can
  span, which Gimbal §5.1 asks for ("each job placed on the theoretically smallest number of nodes").
- ``strict-best-fit``: Lucid's ``consolidate`` placer (github S-Lab-System-Group/Lucid 63685a3,
  ``simulation/policy/placer/consolidate.py``, its simulator's default): the same spans, but a job of
  at most one server's GPUs runs on the fullest server that holds it (then the lowest-numbered), and
  a larger job's rest goes to the server with the most free GPUs (another whole one if any is left).
"""

from __future__ import annotations

import random
from typing import Callable

from schedlab.sched.core.cluster import ClusterState

Placement = list[tuple[int, int]]
Strategy = Callable[[ClusterState, int, random.Random], Placement | None]


def fewest_servers(cluster: ClusterState, demand: int, rng: random.Random) -> Placement | None:
    """One best-fitting server, else the most-free servers first; ``None`` only when too few GPUs are free."""
    if demand > cluster.free_gpus:
        return None
    masks = cluster.servers_with_free  # per free count, a bit mask of the servers with that many free
    for n in range(demand, cluster.gpus_per_server + 1):  # best fit: fewest free GPUs, then lowest server
        mask = masks[n]
        if mask:
            return [(_lowest(mask), demand)]
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


def _lowest(mask: int) -> int:
    return (mask & -mask).bit_length() - 1


def _whole_servers(masks: list[int], count: int, per_server: int) -> tuple[Placement, int] | None:
    """The ``count`` lowest-numbered wholly free servers, and the mask of the whole free servers left;
    ``None`` when fewer are free (the strict strategies' multi-server rule)."""
    spare, placement = masks[per_server], []
    for _ in range(count):
        if not spare:
            return None
        server = _lowest(spare)
        spare ^= 1 << server
        placement.append((server, per_server))
    return placement, spare


def strict_consolidated(cluster: ClusterState, demand: int, rng: random.Random) -> Placement | None:
    """The fewest servers a job can span, or ``None`` (see the module docstring; Tiresias' ``yarn``)."""
    if demand > cluster.free_gpus:
        return None
    per_server, masks = cluster.gpus_per_server, cluster.servers_with_free
    whole, rest = divmod(demand, per_server)
    if (taken := _whole_servers(masks, whole, per_server)) is None:
        return None
    placement, spare = taken
    if rest:
        fitting = spare
        for n in range(rest, per_server):
            fitting |= masks[n]
        if not fitting:
            return None
        placement.append((_lowest(fitting), rest))
    return placement




def strict_best_fit(cluster: ClusterState, demand: int, rng: random.Random) -> Placement | None:
    """Lucid's ``consolidate``: one best-fitting server, or whole free servers plus the most-free one
    for the rest; ``None`` when that is impossible (see the module docstring)."""
    if demand > cluster.free_gpus:
        return None
    per_server, masks = cluster.gpus_per_server, cluster.servers_with_free
    if demand <= per_server:
        fitting = next((mask for mask in masks[demand:] if mask), 0)
        return [(_lowest(fitting), demand)] if fitting else None
    whole, rest = divmod(demand, per_server)
    if (taken := _whole_servers(masks, whole, per_server)) is None:
        return None
    placement, spare = taken
    if rest:
        if not spare:  # no whole server left: the partly free one with the most free GPUs, if enough
            top = next((n for n in range(per_server - 1, 0, -1) if masks[n]), 0)
            if top < rest:
                return None
            spare = masks[top]
        placement.append((_lowest(spare), rest))
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
    "fewest-servers": fewest_servers,
    "strict-consolidated": strict_consolidated,
    "strict-best-fit": strict_best_fit,
    "best-fit": best_fit,
    "random": random_placement,
}


#: old names still accepted -> the strategy they name (``consolidated`` placed whenever enough GPUs
#: were free anywhere, which is ``fewest-servers``, not strict consolidation)
ALIASES: dict[str, str] = {"consolidated": "fewest-servers"}
DEFAULT = "fewest-servers"
#: strategies that may refuse a job although enough GPUs are free: only policies whose
#: ``waits_when_refused`` is set run under them
REFUSE_WITH_FREE_GPUS = frozenset({"strict-consolidated", "strict-best-fit"})


def canonical_placement(name: str) -> str:
    """The strategy's own name for ``name`` (an alias resolved); a clear error for an unknown one."""
    name = ALIASES.get(name, name)
    if name not in STRATEGIES:
        choices = [*STRATEGIES, *(f"{old} (= {new})" for old, new in ALIASES.items())]
        raise ValueError(f"unknown placement {name!r}; choose one of {', '.join(choices)}")
    return name


def get_strategy(name: str) -> Strategy:
    return STRATEGIES[canonical_placement(name)]


_waiting_policies: Callable[[], list[str]] = list


def register_waiting_policies(names: Callable[[], list[str]]) -> None:
    """The policy registry (``sched/policies/__init__.py``) tells :func:`check_policy` which policies
    wait when refused (its message names them), so that placement never imports the policies."""
    global _waiting_policies  # noqa: PLW0603 (one registry, set once at import)
    _waiting_policies = names


def check_policy(placement: str, policy: str, waits_when_refused: bool) -> None:
    """A clear error for a policy that assumes any free GPUs will do under a strategy that may refuse."""
    name = canonical_placement(placement)
    if name in REFUSE_WITH_FREE_GPUS and not waits_when_refused:
        able = _waiting_policies()
        raise ValueError(f"placement {name!r} may refuse a job although enough GPUs are free, and policy"
                         f" {policy!r} assumes any free GPUs will do; with {name!r} use one of {', '.join(able)}")
