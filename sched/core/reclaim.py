"""Reclaiming strategies: which on-loan servers to give back to inference (Lyra §4, docs/explanation/lyra.md).

Separate from policies and reusable, like ``placement.py``. A strategy is a pure function
``strategy(view, n, rng) -> list[server]`` over a read-only :class:`ReclaimView`; what happens to the
jobs on the chosen servers follows from the view alone (:func:`plan_for`): a job whose GPUs there
exceed its *slack* (GPUs it may lose and keep running: allocation minus ``elastic_min`` for an elastic
job, 0 for an inelastic one) is preempted, "removing it from all its servers"; the others are scaled
in (their flexible workers there are killed, no job-level preemption). Jobs are opaque keys here, so
the paper's Table 1 / Fig. 5 is a unit test without an engine.

- ``lyra``: step 0 idle servers, then the *flexible group* (servers whose jobs can all shrink), fewest
  busy GPUs first, then least JCT increase; step 1 (one server left) the one preempting fewest jobs;
  step 2 (more) greedy on the server's preemption cost ``Σ 1/S_j`` over the jobs it would preempt
  (``S_j`` = servers job ``j`` occupies), updating costs after each pick; ties by collateral damage
  (GPUs the preemptions free on servers not returned), busy GPUs, server id. ``cost`` selects
  Table 1's rejected alternatives (``job_count``, ``gpu_fraction``) for comparison.
- ``scf``: Smallest job Count First, the ``n`` servers hosting the fewest jobs at once (§7.1).
- ``random``: ``n`` on-loan servers uniformly at random (seeded; ``idle_first`` takes idle ones first).
- ``optimal``: exhaustive minimum of preempted jobs (then collateral); for tests and analysis only.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

Key = Hashable


@dataclass(frozen=True)
class ReclaimView:
    """What a strategy sees: on-loan servers, who holds GPUs there, where those jobs run.

    ``server_jobs[s]`` maps each on-loan server to ``{job: GPUs it holds there}`` (empty when idle);
    ``job_servers[j]`` maps each such job to ``{server: GPUs}`` over all its servers (training too);
    ``slack[j]`` is how many GPUs ``j`` may lose without being preempted; ``time_left[j]`` (optional)
    its remaining run time at the current allocation, for the flexible group's JCT-increase order."""

    on_loan: tuple[int, ...]
    server_jobs: dict[int, dict[Key, int]]
    job_servers: dict[Key, dict[int, int]]
    slack: dict[Key, int] = field(default_factory=dict)
    gpus_per_server: int = 8
    time_left: dict[Key, float] = field(default_factory=dict)

    def busy(self, server: int) -> int:
        return sum(self.server_jobs[server].values())


@dataclass(frozen=True)
class ReclaimPlan:
    servers: tuple[int, ...]  # the servers returned to inference
    preempt: tuple[Key, ...]  # jobs stopped (all their workers)
    shrink: tuple[Key, ...]  # elastic jobs that lose their workers on ``servers`` only
    collateral_gpus: int  # GPUs the preemptions free on servers not returned


def plan_for(view: ReclaimView, servers: list[int] | tuple[int, ...]) -> ReclaimPlan:
    """The consequences of returning ``servers``: which jobs are preempted, which only shrink."""
    chosen = set(servers)
    lost: dict[Key, int] = {}
    for s in servers:
        for job, n in view.server_jobs[s].items():
            lost[job] = lost.get(job, 0) + n
    preempt = tuple(j for j, n in lost.items() if n > view.slack.get(j, 0))
    shrink = tuple(j for j, n in lost.items() if n <= view.slack.get(j, 0))
    collateral = sum(n for j in preempt for s, n in view.job_servers[j].items() if s not in chosen)
    return ReclaimPlan(tuple(servers), preempt, shrink, collateral)


def lyra(view: ReclaimView, n: int, rng: random.Random | None = None, cost: str = "server_fraction") -> list[int]:
    """Lyra's heuristic (§4): elastic first, then greedy on the server-fraction cost."""
    _check(view, n)
    if cost not in COSTS:
        raise ValueError(f"unknown reclaim cost {cost!r}; choose one of {', '.join(COSTS)}")
    chosen: list[int] = [s for s in view.on_loan if not view.server_jobs[s]][:n]
    slack = dict(view.slack)
    if len(chosen) < n:
        chosen += _flexible_group(view, slack, n - len(chosen), set(chosen))
    left = n - len(chosen)
    if left == 1 and cost == "server_fraction":
        state = _Greedy(view, slack, set(chosen), cost)
        chosen.append(min((state.key(s, by_count=True), s) for s in state.candidates())[1])
    elif left > 0:
        chosen += _Greedy(view, slack, set(chosen), cost).run(left)
    return chosen


def _flexible_group(view: ReclaimView, slack: dict[Key, int], n: int, taken: set[int]) -> list[int]:
    """Servers whose every job can lose its GPUs there and keep running (step 0 b), in order."""
    def increase(s: int) -> float:  # JCT increase if the jobs on s lose those workers (linear scaling)
        total = 0.0
        for job, k in view.server_jobs[s].items():
            alloc = sum(view.job_servers[job].values())
            total += view.time_left.get(job, 0.0) * k / max(alloc - k, 1)
        return total

    order = sorted((s for s in view.on_loan if s not in taken and view.server_jobs[s]
                    and all(slack.get(j, 0) >= k for j, k in view.server_jobs[s].items())),
                   key=lambda s: (view.busy(s), increase(s), s))
    picked: list[int] = []
    for s in order:
        if len(picked) == n:
            break
        jobs = view.server_jobs[s]
        if all(slack.get(j, 0) >= k for j, k in jobs.items()):  # slack shrinks as servers are taken
            for j, k in jobs.items():
                slack[j] -= k
            picked.append(s)
    return picked


class _Greedy:
    """Step 2: pick the cheapest server, preempt its jobs everywhere, update the touched servers."""

    def __init__(self, view: ReclaimView, slack: dict[Key, int], chosen: set[int], cost: str) -> None:
        self.view = view
        self.slack = slack
        self.chosen = chosen
        self.cost = cost
        self.gone: set[Key] = set()  # jobs preempted so far
        # jobs already shrunk on chosen servers do not hold those GPUs any more
        self.held = {j: {s: k for s, k in servers.items() if s not in chosen} for j, servers in view.job_servers.items()}
        self.held_total = {j: sum(servers.values()) for j, servers in self.held.items()}
        self.inverse = {j: 1.0 / len(servers) for j, servers in view.job_servers.items()}

    def candidates(self):
        return (s for s in self.view.on_loan if s not in self.chosen)

    def key(self, s: int, by_count: bool = False) -> tuple:
        """(cost, collateral GPUs, busy GPUs) of returning ``s`` next."""
        gone, slack, held_total = self.gone, self.slack, self.held_total
        value, collateral, busy, jobs = 0.0, 0, 0, 0
        per = self.view.gpus_per_server
        for j, k in self.view.server_jobs[s].items():
            if j in gone:
                continue
            busy += k
            jobs += 1
            if k > slack.get(j, 0):  # j would be preempted
                collateral += held_total[j] - self.held[j].get(s, 0)
                if by_count:
                    value += 1.0
                elif self.cost == "server_fraction":
                    value += self.inverse[j]
            if self.cost == "gpu_fraction" and not by_count:
                value += k / per
        if self.cost == "job_count" and not by_count:
            value = float(jobs)
        return (round(value, 9), collateral, busy)

    def run(self, n: int) -> list[int]:
        version = dict.fromkeys(self.view.on_loan, 0)
        heap = [(*self.key(s), s, 0) for s in self.candidates()]
        heapq.heapify(heap)
        picked: list[int] = []
        while len(picked) < n:
            *_, s, v = heapq.heappop(heap)
            if s in self.chosen or v != version[s]:
                continue
            picked.append(s)
            self.chosen.add(s)
            touched: set[int] = set()
            for j, k in self.view.server_jobs[s].items():
                if j in self.gone:
                    continue
                if k > self.slack.get(j, 0):
                    self.gone.add(j)
                else:
                    self.slack[j] -= k
                self.held_total[j] -= self.held[j].pop(s, 0)
                touched.update(self.held[j])
            for t in touched:
                if t not in self.chosen and t in version:
                    version[t] += 1
                    heapq.heappush(heap, (*self.key(t), t, version[t]))
        return picked


def scf(view: ReclaimView, n: int, rng: random.Random | None = None) -> list[int]:
    """Smallest job Count First: the ``n`` servers hosting the fewest jobs (ties: fewer busy GPUs, id)."""
    _check(view, n)
    return sorted(view.on_loan, key=lambda s: (len(view.server_jobs[s]), view.busy(s), s))[:n]


def random_servers(view: ReclaimView, n: int, rng: random.Random, idle_first: bool = False) -> list[int]:
    """``n`` on-loan servers drawn uniformly at random (the inference scheduler is oblivious)."""
    _check(view, n)
    if not idle_first:
        return rng.sample(list(view.on_loan), n)
    idle = [s for s in view.on_loan if not view.server_jobs[s]][:n]
    rest = [s for s in view.on_loan if view.server_jobs[s]]
    return idle + rng.sample(rest, n - len(idle))


def optimal(view: ReclaimView, n: int, rng: random.Random | None = None, limit: int = 2_000_000) -> list[int]:
    """Fewest preempted jobs (then least collateral, then lowest ids) over every ``n``-subset."""
    _check(view, n)
    if math.comb(len(view.on_loan), n) > limit:
        raise ValueError(f"optimal reclaim: C({len(view.on_loan)}, {n}) subsets exceed the limit {limit}")
    best = min(itertools.combinations(sorted(view.on_loan), n),
               key=lambda c: (len((p := plan_for(view, c)).preempt), p.collateral_gpus, c))
    return list(best)


def _check(view: ReclaimView, n: int) -> None:
    if not 0 <= n <= len(view.on_loan):
        raise ValueError(f"cannot reclaim {n} servers: {len(view.on_loan)} are on loan")


Strategy = Callable[[ReclaimView, int, random.Random], list[int]]
COSTS = ("server_fraction", "job_count", "gpu_fraction")
STRATEGIES: dict[str, Strategy] = {
    "lyra": lyra,
    "scf": scf,
    "random": random_servers,
    "random-idle-first": lambda view, n, rng: random_servers(view, n, rng, idle_first=True),
    "optimal": optimal,
}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown reclaim strategy {name!r}; choose one of {', '.join(STRATEGIES)}") from None
