"""Pollux's allocation problem (Pollux OSDI'21 §4.2; docs/explanation/pollux.md): its jobs, objective and
constraints; the placements a job is priced at; ``exhaustive``, the best state by enumeration (tests).

A state gives every job GPUs per node. A job's speed-up is its goodput on its allocation over its
goodput on a fair share; it is scaled by the study's dominant-share factor (``scale``) and, if the
allocation changes, by the restart factor ``max(age - 30 restarts, 0) / (age + 30)``. The objective is
the power mean with p = -1 (harmonic mean) of ``speed-up + 1e-3`` over all jobs, i.e. the number of
jobs over ``sum(1 / (speed-up + 1e-3))``; a job without GPUs contributes 1 / 1e-3. Constraints:
node capacity, a job's GPU cap, at most ``max_nodes_per_job`` nodes per job and at most one
multi-node job per node.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

EPS = 1e-3  # the study's additive term inside the power mean
Alloc = list[tuple[int, ...]]


@dataclass
class JobSpec:
    max_gpus: int
    current: tuple[int, ...]  # GPUs per node now (length = nodes)
    speedup: Callable[[tuple[int, ...]], float]  # placement shape (largest first) -> speed-up
    restart_factor: float = 1.0  # multiplies the speed-up when the allocation changes
    by_count: bool = False  # the speed-up depends on the GPU count only (not on the placement's shape)
    by_spread: bool = False  # the speed-up depends on the GPU count and on whether they span nodes only (a learned
    #                          estimate: its throughput model tells one node from several, not how many)


@dataclass
class Problem:
    jobs: list[JobSpec]
    nodes: int
    gpus_per_node: int
    max_nodes_per_job: int = 16
    scale: float = 1.0
    _memo: dict = field(default_factory=dict, repr=False)
    _count_memo: dict = field(default_factory=dict, repr=False)  # by-count jobs: (j, GPUs, or -1: current) -> cost
    _gain_rows: dict = field(default_factory=dict, repr=False)  # (j, counts) -> cost of +1 GPU per node
    _move_rows: dict = field(default_factory=dict, repr=False)  # (j, counts) -> node -> costs of -1 there (+1 elsewhere)
    _no_gain: set = field(default_factory=set, repr=False)  # (j, counts) of by-count jobs no one-GPU move helps
    _current_costs: list[float] | None = field(default=None, repr=False)

    def speed(self, j: int, shape: tuple[int, ...]) -> float:
        key = (j, shape, None)
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = self.jobs[j].speedup(shape) * self.scale
        return value

    def cost(self, j: int, counts: tuple[int, ...]) -> float:
        """1 / (speed-up + 1e-3) of job ``j`` on ``counts`` (GPUs per node). A by-count job's price is
        kept per GPU count (moved) and for its current allocation: every shape of a count prices alike."""
        job = self.jobs[j]
        if job.by_count:
            key = (j, -1) if counts == job.current else (j, sum(counts))
            value = self._count_memo.get(key)
            if value is None:
                value = self._count_memo[key] = self._price(j, counts)
            return value
        key = (j, counts)
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = self._price(j, counts)
        return value

    def _price(self, j: int, counts: tuple[int, ...]) -> float:
        """``cost`` computed (not kept)."""
        shape = tuple(sorted((c for c in counts if c), reverse=True))
        if not shape:
            return 1.0 / EPS
        s = self.speed(j, shape)
        if counts != self.jobs[j].current:
            s *= self.jobs[j].restart_factor
        return 1.0 / (s + EPS)

    def current_costs(self) -> list[float]:
        """``cost`` of every job on its current allocation (kept: the jobs do not change)."""
        if self._current_costs is None:
            self._current_costs = [self.cost(j, job.current) for j, job in enumerate(self.jobs)]
        return self._current_costs

    def moved_cost(self, j: int, shape: tuple[int, ...]) -> float:
        """``cost`` of job ``j`` moved to placement ``shape`` (largest first; restart factor applied)."""
        return 1.0 / (self.speed(j, shape) * self.jobs[j].restart_factor + EPS)

    def value(self, alloc: Alloc) -> float:
        """The objective: harmonic mean of (speed-up + 1e-3) over jobs (higher is better)."""
        if not self.jobs:
            return 0.0
        return len(self.jobs) / sum(self.cost(j, counts) for j, counts in enumerate(alloc))

    def feasible(self, alloc: Alloc) -> bool:
        used = [0] * self.nodes
        multi = [0] * self.nodes
        for j, counts in enumerate(alloc):
            held = nonzero(counts)
            if sum(counts) > self.jobs[j].max_gpus or len(held) > self.max_nodes_per_job:
                return False
            for n, c in held:
                used[n] += c
                multi[n] += len(held) > 1
        return all(u <= self.gpus_per_node for u in used) and all(m <= 1 for m in multi)


@lru_cache(maxsize=None)
def candidate_shapes(r: int, per_node: int, max_nodes: int = 16) -> tuple[tuple[int, ...], ...]:
    """Placements a moving job of ``r`` GPUs is priced at: every placement on the fewest nodes or
    one more (every spread for ``r <= per_node``), then the balanced placement on each larger
    number of nodes up to ``max_nodes`` (the measured data is not always fastest on the fewest
    nodes: bert runs 8 GPUs faster as 2+2+2+2 than as 4+4)."""
    k = -(-r // per_node)
    spreads = range(k, r + 1) if r <= per_node else range(k, min(k + 1, r) + 1)
    shapes = [shape for n in spreads if n <= max_nodes for shape in min_node_shapes(r, per_node, n)]
    for n in range(spreads[-1] + 1, min(r, max_nodes) + 1):
        q, rest = divmod(r, n)
        shapes.append((q + 1,) * rest + (q,) * (n - rest))
    return tuple(shapes)


@lru_cache(maxsize=None)
def spread_shapes(r: int, per_node: int, max_nodes: int = 16) -> tuple[tuple[int, ...], ...]:
    """``candidate_shapes`` keeping the first placement on one node and the first over several: those a
    job whose speed-up depends on its GPU count and on whether they span nodes only (``JobSpec.by_spread``)
    prices differently."""
    firsts: dict[bool, tuple[int, ...]] = {}
    for shape in candidate_shapes(r, per_node, max_nodes):
        firsts.setdefault(len(shape) > 1, shape)
    return tuple(firsts.values())  # (in candidate_shapes' order: one node before several)


@lru_cache(maxsize=None)
def min_node_shapes(r: int, per_node: int, nodes: int = 0) -> tuple[tuple[int, ...], ...]:
    """Every placement of ``r`` GPUs on ``nodes`` nodes (default: the fewest), parts <= per_node,
    largest part first."""
    k = nodes or -(-r // per_node)

    def parts(total: int, count: int, cap: int):
        if count == 0:
            if total == 0:
                yield ()
            return
        for first in range(min(cap, total - (count - 1)), 0, -1):
            if first * count < total:
                break
            for rest in parts(total - first, count - 1, first):
                yield (first, *rest)

    return tuple(parts(r, k, per_node))


@lru_cache(maxsize=1 << 16)
def nonzero(counts: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """(node, GPUs) for the nodes ``counts`` uses."""
    return tuple((n, c) for n, c in enumerate(counts) if c)


def exhaustive(problem: Problem) -> Alloc:
    """The best state by enumeration (tiny problems only: tests)."""
    G, N = problem.gpus_per_node, problem.nodes
    per_job = []
    for job in problem.jobs:
        rows = [c for c in itertools.product(range(G + 1), repeat=N)
                if sum(c) <= job.max_gpus and sum(1 for x in c if x) <= problem.max_nodes_per_job]
        per_job.append(rows)
    best_value, best = -1.0, None
    for alloc in itertools.product(*per_job):
        alloc = list(alloc)
        if problem.feasible(alloc):
            v = problem.value(alloc)
            if v > best_value + 1e-15:
                best_value, best = v, alloc
    return best
