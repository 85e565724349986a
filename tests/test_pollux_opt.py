"""``pollux_opt._dp_counts`` (sparse: only a row's new lows are tried) gives exactly what trying every
GPU count gives: the same minimum to the last bit and the same counts (ties: fewer GPUs)."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.sched.policies.pollux_opt import EPS, _dp_counts


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


def test_ties_go_to_fewer_gpus():
    # two jobs, 4 GPUs: giving the second job 2 or 3 GPUs costs the same; the fewer wins
    counts, value = _dp_counts([[1000.0, 1.0], [1000.0, 5.0, 2.0, 2.0]], 4)
    assert counts == [1, 2] and value == 3.0
