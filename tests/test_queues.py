"""LevelQueues (Tiresias' discretized queues) against the greedy choice written out plainly, with and
without its job-by-job walk for few GPUs left (sched/policies/queues.py). Keys grow both ways (Tiresias' code
semantics puts preempted jobs back at the front of their queue with ever smaller keys)."""

from __future__ import annotations

import random
from bisect import bisect_right
from itertools import accumulate

import pytest
from schedlab.sched.policies.queues import LevelQueues, _Sums


def _greedy(jobs: dict[int, list], levels: int, capacity: int) -> tuple[list[int], list[int]]:
    """The definition: level by level, by index, every job that fits in the GPUs left is chosen."""
    start, stop = [], []
    for level in range(levels):
        for index in sorted(i for i, (lv, _, _) in jobs.items() if lv == level):
            _, gpus, running = jobs[index]
            if gpus <= capacity:
                capacity -= gpus
                if not running:
                    start.append(index)
            elif running:
                stop.append(index)
    return start, stop


def _state(queues: LevelQueues) -> list:
    return [(lv.waiting, lv.running, {g: ix for g, ix in lv.by_demand.items() if ix}) for lv in queues.levels]


@pytest.mark.parametrize("seed", range(12))
def test_switch_is_the_greedy_choice_with_and_without_the_walk(seed):
    rng = random.Random(seed)
    levels = rng.choice([1, 2, 3])
    capacity = rng.choice([4, 16, 64])
    ways = [LevelQueues(levels) for _ in range(3)]
    ways[0].walk_below = 0  # always the tree descent
    ways[2].walk_below = capacity + 1  # always job by job
    jobs: dict[int, list] = {}  # index -> [level, gpus, running]
    next_index, next_low = 0, 0
    for _ in range(400):
        op = rng.random()
        if op < 0.35 or not jobs:  # arrivals, sometimes far ahead or far below (the tree grows either way)
            if rng.random() < 0.3:
                next_low -= rng.choice([1, 1, 2, 50, 700])
                key = next_low
            else:
                next_index += rng.choice([1, 1, 2, 50, 700])
                key = next_index
            gpus = rng.choice([1, 1, 1, 2, 4, 8, capacity])
            level = rng.randrange(levels)
            jobs[key] = [level, gpus, False]
            for q in ways:
                q.add(key, gpus, level, False)
        elif op < 0.5:  # a job ends (running) or leaves
            index = rng.choice(list(jobs))
            _, _, running = jobs.pop(index)
            for q in ways:
                q.remove(index, running)
        elif op < 0.65:  # demotion or promotion
            index = rng.choice(list(jobs))
            level, gpus, running = jobs[index]
            jobs[index][0] = rng.randrange(levels)
            for q in ways:
                q.remove(index, running)
                q.add(index, gpus, jobs[index][0], running)
        else:
            cap = rng.choice([capacity, capacity, rng.randrange(capacity + 1)])
            expected = _greedy(jobs, levels, cap)
            for q in ways:
                assert q.switch(cap) == expected
            for index in expected[0]:
                jobs[index][2] = True
            for index in expected[1]:
                jobs[index][2] = False
            assert _state(ways[0]) == _state(ways[1]) == _state(ways[2])
    assert next_index > 1024 and next_low < -1024  # the prefix-sum trees grew both ways


def test_a_job_needs_a_gpu():
    with pytest.raises(ValueError, match="job 3 needs 0 GPUs"):
        LevelQueues(2).add(3, 0, 0, False)


@pytest.mark.parametrize("seed", range(4))
def test_prefix_sums_grow_and_answer_like_plain_sums(seed):
    rng = random.Random(seed)
    sums, plain = _Sums(), [0] * 20_000
    for _ in range(200):
        slot = rng.choice([rng.randrange(1024), rng.randrange(20_000)])  # growth by one doubling or several
        delta = rng.randrange(1, 9)
        sums.add(slot, delta)
        plain[slot] += delta
        before = [0, *accumulate(plain)]  # before[k]: the sum of slots 0..k-1
        k = rng.randrange(20_000)
        assert sums.prefix(k) == before[k]
        budget = rng.randrange(before[-1] + 2)
        pos = bisect_right(before, budget) - 1  # the largest with before[pos] <= budget
        if pos == len(plain):  # all fit: the tree's slots past the plain ones are empty too
            pos = sums.size
        assert sums.reach(budget) == (pos, budget - before[min(pos, len(plain))])


@pytest.mark.parametrize("seed", range(4))
def test_prefix_sums_over_negative_slots_answer_like_plain_sums(seed):
    rng = random.Random(seed)
    sums, plain = _Sums(), {}  # slot -> value
    for _ in range(200):
        slot = rng.choice([rng.randrange(-1024, 1024), rng.randrange(-20_000, 20_000)])
        delta = rng.randrange(1, 9)
        sums.add(slot, delta)
        plain[slot] = plain.get(slot, 0) + delta
        assert sums.low <= min(plain) and max(plain) < sums.end
        k = rng.randrange(-20_000, 20_000)
        assert sums.prefix(k) == sum(v for s, v in plain.items() if s < k)
        assert not sums.low <= k < sums.end or sums.value(k) == plain.get(k, 0)
        budget = rng.randrange(sum(plain.values()) + 2)
        expected, total = (sums.end, budget - sum(plain.values())), 0
        for s in sorted(plain):  # the first slot whose value does not fit
            if total + plain[s] > budget:
                expected = (s, budget - total)
                break
            total += plain[s]
        assert sums.reach(budget) == expected
