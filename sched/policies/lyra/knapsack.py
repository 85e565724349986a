"""The multiple-choice knapsack (MCKP) of Lyra's elastic scaling (Lyra EuroSys'23 §5.2, Fig. 6;
docs/explanation/lyra.md).

One group per elastic job; item ``k`` of a group = "give the job ``k`` more workers" with a weight
(GPUs) and a value (its JCT reduction). At most one item per group; total weight at most the
capacity; maximise the total value. Solved exactly by dynamic programming over the capacity,
``O(items x capacity)``: one numpy row operation per item, so the paper's largest instance (354
items, 245 GPUs) takes about a millisecond (``schedlab.benchmarks.lyra_speed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Item = tuple[int, float]  # (weight in GPUs, value)


@dataclass(frozen=True)
class Solution:
    choice: tuple[int, ...]  # per group: 0 = no item, k = the group's k-th item (1-based)
    value: float
    weight: int


def solve(groups: Sequence[Sequence[Item]] | Sequence[tuple[np.ndarray, np.ndarray]], capacity: int) -> Solution:
    """The best choice of at most one item per group with total weight <= ``capacity``.

    A group is a list of ``(weight, value)`` items or a pair of arrays ``(weights, values)``. Items
    with a non-positive weight are refused (they would make every extra worker free); items heavier
    than the capacity or with a value <= 0 are never chosen. Ties keep no item, then the earliest."""
    if capacity < 0:
        raise ValueError(f"MCKP capacity must be >= 0, got {capacity}")
    capacity = int(capacity)
    cols = np.arange(capacity + 1)
    best = np.zeros(capacity + 1)  # best[c]: the best value with total weight <= c
    picks = np.zeros((len(groups), capacity + 1), dtype=np.int32)
    arrays = []
    for g, group in enumerate(groups):
        if isinstance(group, tuple) and len(group) == 2 and isinstance(group[0], np.ndarray):
            weights, values = np.asarray(group[0], dtype=np.int64), np.asarray(group[1], dtype=float)
        else:
            weights = np.array([w for w, _ in group], dtype=np.int64)
            values = np.array([v for _, v in group], dtype=float)
        if (weights <= 0).any():
            k = int(np.flatnonzero(weights <= 0)[0]) + 1
            raise ValueError(f"MCKP group {g} item {k}: weight must be >= 1, got {weights[k - 1]}")
        arrays.append(weights)
        usable = np.flatnonzero((weights <= capacity) & (values > 0))
        if not len(usable):
            continue
        w, v = weights[usable], values[usable]
        src = cols[None, :] - w[:, None]  # candidate[k, c] = best[c - w_k] + v_k
        candidate = np.where(src >= 0, best[np.maximum(src, 0)] + v[:, None], -np.inf)
        top = candidate.argmax(axis=0)
        value = candidate[top, cols]
        better = value > best
        if better.any():
            picks[g] = np.where(better, usable[top] + 1, 0)
            best = np.where(better, value, best)
    choice = [0] * len(groups)
    c = capacity
    weight_used = 0
    for g in range(len(groups) - 1, -1, -1):
        k = int(picks[g, c])
        choice[g] = k
        if k:
            w = int(arrays[g][k - 1])
            c -= w
            weight_used += w
    return Solution(tuple(choice), float(best[capacity]), weight_used)


def solve_concave(marginals: np.ndarray, group: np.ndarray, groups: int, units: int) -> np.ndarray:
    """Items per group when every group's values are concave in its item index and item ``k``
    weighs ``k`` units (Lyra with linear or imperfect scaling: a worker's time saving shrinks as the
    job grows). Then taking the ``units`` largest positive marginal gains is an exact MCKP
    optimum (the greedy is optimal for separable concave knapsacks) and every group's pick is a
    prefix. ``marginals[i]`` is the gain of item ``k`` over ``k - 1`` of group ``group[i]``, strictly
    decreasing within a group, items of a group in order. Returns the count per group."""
    positive = np.flatnonzero(marginals > 0)
    if units <= 0 or not len(positive):
        return np.zeros(groups, dtype=np.int64)
    if len(positive) > units:
        top = np.argpartition(-marginals[positive], units - 1)[:units]
        positive = positive[top]
    return np.bincount(group[positive], minlength=groups)


def concave_counts(marginals: Sequence[Sequence[float]], units: int) -> list[int] | None:
    """:func:`solve_concave` on plain lists, one list of gains per group: how many of each group's
    items are among the ``units`` largest positive gains. A Lyra phase 2 has ~100 items, where
    numpy's per-call overhead dominates. Returns None when the ``units``-th and the next largest
    gains are equal: which of them is taken is then :func:`solve_concave`'s (numpy's partition)."""
    if units <= 0:
        return [0] * len(marginals)
    positive = [m for gains in marginals for m in gains if m > 0]
    if len(positive) <= units:
        return [len([m for m in gains if m > 0]) for gains in marginals]
    positive.sort(reverse=True)
    cut = positive[units - 1]
    if positive[units] == cut:
        return None
    return [len([m for m in gains if m >= cut]) for gains in marginals]

