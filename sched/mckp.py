"""The multiple-choice knapsack (MCKP) of Lyra's elastic scaling (Lyra EuroSys'23 §5.2, Fig. 6;
specs/lyra.md §2.4).

One group per elastic job; item ``k`` of a group = "give the job ``k`` more workers" with a weight
(GPUs) and a value (its JCT reduction). At most one item per group; total weight at most the
capacity; maximise the total value. Solved exactly by dynamic programming over the capacity,
``O(items x capacity)``: one numpy row operation per item, so the paper's largest instance (354
items, 245 GPUs) takes about a millisecond (``benchmarks/lyra_speed.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

Item = tuple[int, float]  # (weight in GPUs, value)


@dataclass(frozen=True)
class Solution:
    choice: tuple[int, ...]  # per group: 0 = no item, k = the group's k-th item (1-based)
    value: float
    weight: int


def solve(groups: Sequence[Sequence[Item]], capacity: int) -> Solution:
    """The best choice of at most one item per group with total weight <= ``capacity``.

    Items with a non-positive weight are refused (they would make every extra worker free); items
    heavier than the capacity or with a value <= 0 are never chosen. Ties keep fewer/earlier items."""
    if capacity < 0:
        raise ValueError(f"MCKP capacity must be >= 0, got {capacity}")
    capacity = int(capacity)
    best = np.zeros(capacity + 1)  # best[c]: the best value with total weight <= c
    picks = np.zeros((len(groups), capacity + 1), dtype=np.int32)
    for g, items in enumerate(groups):
        new = best.copy()
        pick = picks[g]
        for k, (weight, value) in enumerate(items, start=1):
            if weight <= 0:
                raise ValueError(f"MCKP group {g} item {k}: weight must be >= 1, got {weight}")
            if weight > capacity or value <= 0:
                continue
            candidate = best[: capacity + 1 - weight] + value
            better = candidate > new[weight:]
            if better.any():
                new[weight:] = np.where(better, candidate, new[weight:])
                pick[weight:][better] = k
        best = new
    choice = [0] * len(groups)
    c = capacity
    weight_used = 0
    for g in range(len(groups) - 1, -1, -1):
        k = int(picks[g, c])
        choice[g] = k
        if k:
            w = int(groups[g][k - 1][0])
            c -= w
            weight_used += w
    return Solution(tuple(choice), float(best[capacity]), weight_used)
