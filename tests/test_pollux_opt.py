"""``pollux.optimiser``'s speed paths give exactly what the plain definitions give: ``_dp_counts`` (sparse:
only a row's new lows are tried; no table when every row's lowest cost fits) the same minimum to the
last bit and the same counts (ties: fewer GPUs, rounding ties included) as trying every count; the local search's numpy pricing the same moves as its plain scan."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.sched.policies.pollux import optimiser
from schedlab.sched.policies.pollux.optimiser import _dp_counts, _dp_unconstrained, _new_lows
from schedlab.sched.policies.pollux.problem import EPS, JobSpec, Problem, candidate_shapes, spread_shapes


def dense_dp(costs: list[list[float]], capacity: int) -> tuple[list[int], float]:
    """Every count of every row (the definition)."""
    C = capacity
    idx = np.arange(C + 1)[:, None] - np.arange(C + 1)[None, :]
    valid = idx >= 0
    idx = np.clip(idx, 0, None)
    dp, choices = np.zeros(C + 1), []
    for row in costs:
        width = min(len(row), C + 1)
        m = np.where(valid[:, :width], dp[idx[:, :width]] + np.asarray(row[:width]), np.inf)
        choice = m.argmin(axis=1)
        dp = m[np.arange(C + 1), choice]
        choices.append(choice)
    out, c = [], C
    for choice in reversed(choices):
        out.append(int(choice[c]))
        c -= out[-1]
    return out[::-1], float(dp[C])


def random_row(rng: np.random.Generator, capacity: int) -> list[float]:
    """A row like pollux's: 1/EPS without GPUs; a fixed job (one useful count), an elastic range
    (falling costs), a goodput curve (falling, then rising) or ties (a grid of few values)."""
    width = int(rng.integers(1, capacity + 6))
    row = [1.0 / EPS] * width
    kind = rng.integers(4)
    if kind == 0 and width > 1:
        row[int(rng.integers(1, width))] = float(1.0 / (rng.uniform(0.1, 2) + EPS))
    elif kind == 1:
        lo = int(rng.integers(1, width)) if width > 1 else 0
        for r in range(max(lo, 1), width):
            row[r] = 1.0 / (r / max(lo, 1) * 0.9 + EPS)
    elif kind == 2:
        peak = rng.uniform(1, width)
        for r in range(1, width):
            row[r] = 1.0 / (min(r, 2 * peak - r, 0.0 + peak) / peak + 0.05 + EPS)
    else:
        for r in range(1, width):
            row[r] = float(rng.choice([1.0 / EPS, 2.0, 1.5, 1.5, 3.0]))
    return row


@pytest.mark.parametrize("seed", range(40))
def test_sparse_dp_equals_the_dense_definition(seed):
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 40))
    costs = [random_row(rng, capacity) for _ in range(int(rng.integers(1, 12)))]
    counts, value = _dp_counts(costs, capacity)
    assert (counts, value) == dense_dp(costs, capacity)
    assert sum(counts) <= capacity


@pytest.mark.parametrize("seed", range(40))
def test_dp_without_the_table_when_the_lowest_costs_fit(seed):
    rng = np.random.default_rng(100 + seed)
    capacity = int(rng.integers(20, 80))
    costs = [random_row(rng, 6) for _ in range(int(rng.integers(1, 8)))]
    if seed % 2:  # a large first cost: later rows' costs tie once rounded (1e16 + 2.5 == 1e16 + 2.0)
        costs = [[1e16]] + [[1.0 / EPS, 2.5, 2.0, 2.0] for _ in costs]
    fast = _dp_unconstrained([_new_lows(row, capacity) for row in costs], capacity)
    assert fast is not None
    assert fast == _dp_counts(costs, capacity) == dense_dp(costs, capacity)


def test_dp_table_when_the_lowest_costs_do_not_fit():
    costs = [[1000.0, 2.0, 1.0], [1000.0, 2.0, 1.0]]
    assert _dp_unconstrained([_new_lows(row, 3) for row in costs], 3) is None
    assert _dp_counts(costs, 3) == dense_dp(costs, 3) and sum(_dp_counts(costs, 3)[0]) == 3


def test_ties_go_to_fewer_gpus():
    # two jobs, 4 GPUs: giving the second job 2 or 3 GPUs costs the same; the fewer wins
    counts, value = _dp_counts([[1000.0, 1.0], [1000.0, 5.0, 2.0, 2.0]], 4)
    assert counts == [1, 2] and value == 3.0


def random_problem(seed: int, by_count: bool = False, spread: bool = False) -> Problem:
    """A random state; ``by_count``: every speed-up depends on the GPU count only (Philly's jobs);
    ``spread``: on the GPU count and on whether they span nodes only (a learned estimate), not flagged."""
    rng = np.random.default_rng(seed)
    nodes, per = int(rng.integers(2, 7)), 4
    free = [per] * nodes
    specs = []
    for _ in range(int(rng.integers(2, 14))):
        current = [0] * nodes
        for n in rng.permutation(nodes)[: int(rng.integers(0, 3))]:  # where it runs now, if it fits
            take = min(free[n], int(rng.integers(1, per + 1)))
            current[n], free[n] = take, free[n] - take
        table = {}  # a speed-up per placement shape, drawn once; some shapes tie

        def speedup(shape, table=table, gen=np.random.default_rng(int(rng.integers(1 << 30)))):
            key = sum(shape) if by_count else (len(shape) > 1, sum(shape)) if spread else shape
            if key not in table:
                spreads = min(len(shape), 2) if spread else len(shape)
                table[key] = float(gen.choice([0.0, 0.5, 1.0, 1.0, 1.5, 2.0]) * sum(shape) / spreads)
            return table[key]

        specs.append(JobSpec(int(rng.integers(1, nodes * per + 1)), tuple(current), speedup,
                             float(rng.uniform(0.2, 1.0)), by_count=by_count))
    return Problem(specs, nodes, per, int(rng.integers(1, 4)))


@pytest.mark.parametrize("by_count", [False, True])
@pytest.mark.parametrize("seed", range(60))
def test_local_search_numpy_pricing_finds_the_same_moves(seed, by_count, monkeypatch):
    # the local search prices moves with numpy from VECTOR_MIN jobs x nodes, keeping each job's best
    # one-GPU move while its allocation, the open nodes and the multi-node holders stay, and pricing a
    # by-count job's +1 row at once: both ways give one answer (a stale kept move would differ)
    monkeypatch.setattr(optimiser, "VECTOR_MIN", 10**9)
    scan = optimiser.solve(random_problem(seed, by_count))
    monkeypatch.setattr(optimiser, "VECTOR_MIN", 0)
    assert optimiser.solve(random_problem(seed, by_count)) == scan


@pytest.mark.parametrize("seed", range(40))
def test_spread_pricing_finds_what_pricing_every_shape_finds(seed):
    # a job flagged by_spread is priced on the first shape on one node and the first over several only
    # (spread_shapes): where its speed-up depends on nothing else, solve's answer is that of every shape
    flagged = random_problem(seed, spread=True)
    for job in flagged.jobs:
        job.by_spread = True
    assert optimiser.solve(flagged) == optimiser.solve(random_problem(seed, spread=True))


def test_spread_shapes_are_the_first_on_one_node_and_over_several():
    assert spread_shapes(3, 4) == ((3,), (2, 1))
    assert spread_shapes(6, 4) == candidate_shapes(6, 4)[:1] == ((4, 2),)
    assert spread_shapes(1, 4) == ((1,),)


@pytest.mark.parametrize("seed", range(10))
def test_count_row_prices_as_cost_does(seed):
    # a by-count job's +1 row: one price, but the node that makes it its current allocation (kept: no
    # restart factor); here every allocation one GPU short of the current one, and others
    problem = random_problem(seed, by_count=True)
    rng = np.random.default_rng(seed)
    for j, job in enumerate(problem.jobs):
        shorts = [job.current[:n] + (job.current[n] - 1,) + job.current[n + 1:]
                  for n in range(problem.nodes) if job.current[n]]
        for a in shorts + [tuple(int(x) for x in rng.integers(0, 3, problem.nodes))]:
            expected = [problem.cost(j, a[:n] + (a[n] + 1,) + a[n + 1:]) for n in range(problem.nodes)]
            assert optimiser._count_row(problem, j, a).tolist() == expected


@pytest.mark.parametrize("seed", range(20))
def test_takeover_bound_keeps_every_node_that_can_win(seed):
    # _takeover_nodes prunes a by-count job's node takeovers by a bound; every node whose exact delta
    # (the local search's sum) is below the threshold must stay
    problem = random_problem(seed, by_count=True)
    G, N = problem.gpus_per_node, problem.nodes
    alloc = [job.current for job in problem.jobs]
    cost = [problem.cost(j, a) for j, a in enumerate(alloc)]
    used = [sum(a[n] for a in alloc) for n in range(N)]
    holders = [[k for k, a in enumerate(alloc) if a[n]] for n in range(N)]
    evicted = optimiser._evict_costs(problem, alloc, cost, holders)
    for j, a in enumerate(alloc):
        room = problem.jobs[j].max_gpus - sum(a)
        exact = {}
        for n in range(N):
            take = min(G - a[n], room)
            if take <= 0 or take == 1 and used[n] < G:
                continue
            moves = [(j, a[:n] + (a[n] + take,) + a[n + 1:])]
            if take > G - used[n]:
                moves += [(k, alloc[k][:n] + (0,) + alloc[k][n + 1:]) for k in holders[n] if k != j]
            exact[n] = sum(problem.cost(k, b) - cost[k] for k, b in moves)
        for below in sorted(set(exact.values())) + [-1e-12]:
            kept = optimiser._takeover_nodes(problem, j, a, room, cost[j], used, evicted, below + 1e-9)
            assert {n for n, d in exact.items() if d < below + 1e-9} <= set(kept)
