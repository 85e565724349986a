"""Waiting-job queues shared by the policies.

``DemandQueue`` buckets waiting jobs by GPU demand, one heap per distinct demand. "The best job that
fits in ``free`` GPUs" is then a look at a handful of bucket heads (traces have few distinct GPU
counts), not a scan of the queue: this is what keeps a scheduling pass O(decisions), not O(queue).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import Callable

from schedlab.sched.job import Job

Key = Callable[[Job], float]


class DemandQueue:
    def __init__(self, key: Key) -> None:
        self.key = key
        self._buckets: dict[int, list[tuple[float, int, Job]]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, job: Job) -> None:
        bucket = self._buckets.get(job.num_gpus)
        if bucket is None:
            bucket = self._buckets[job.num_gpus] = []
        heapq.heappush(bucket, (self.key(job), job.index, job))
        self._size += 1

    def peek(self, free: int | None = None) -> Job | None:
        """The best job (lowest key, then trace order) needing at most ``free`` GPUs (any, if None)."""
        best = None
        for demand, bucket in self._buckets.items():
            if bucket and (free is None or demand <= free) and (best is None or bucket[0][:2] < best[:2]):
                best = bucket[0]
        return None if best is None else best[2]

    def pop(self, job: Job) -> None:
        """Remove ``job``, which must be the head of its bucket (as returned by ``peek``)."""
        entry = heapq.heappop(self._buckets[job.num_gpus])
        assert entry[2] is job, "DemandQueue.pop: job is not the head of its bucket"
        self._size -= 1


class _Sums:
    """A Fenwick tree of non-negative integer values at slots 0..size-1 (size a power of two that
    doubles as slots are needed): prefix sums and "how far does this budget reach" in O(log size)."""

    def __init__(self) -> None:
        self.size = 1024
        self.values = [0] * self.size
        self.tree = [0] * (self.size + 1)

    def add(self, slot: int, delta: int) -> None:
        if slot >= self.size:
            self._grow(slot)
        self.values[slot] += delta
        tree, size = self.tree, self.size
        i = slot + 1
        while i <= size:
            tree[i] += delta
            i += i & -i

    def prefix(self, slot: int) -> int:
        """Sum of the values at slots ``0..slot-1``."""
        tree = self.tree
        i = min(slot, self.size)
        total = 0
        while i:
            total += tree[i]
            i &= i - 1
        return total

    def reach(self, budget: int) -> tuple[int, int]:
        """``(pos, left)``: the largest ``pos`` whose prefix sum is at most ``budget``, and ``budget``
        minus that sum. The value at ``pos`` (if ``pos < size``) is the first that does not fit."""
        tree, size = self.tree, self.size
        if tree[size] <= budget:  # everything fits (tree[size] is the total)
            return size, budget - tree[size]
        pos, step = 0, size >> 1
        while step:  # pos + step < size from here on
            nxt = pos + step
            if tree[nxt] <= budget:
                pos = nxt
                budget -= tree[nxt]
            step >>= 1
        return pos, budget

    def _grow(self, slot: int) -> None:
        size = self.size
        while size <= slot:
            size *= 2
        self.values.extend([0] * (size - self.size))
        self.size = size
        tree = [0] * (size + 1)
        for i, value in enumerate(self.values, 1):  # O(size) linear build
            tree[i] += value
            parent = i + (i & -i)
            if parent <= size:
                tree[parent] += tree[i]
        self.tree = tree


class _Level:
    """The jobs in one priority queue of :class:`LevelQueues`, by trace index."""

    def __init__(self) -> None:
        self.demand = _Sums()  # GPUs of the job at each index (0 where none)
        self.by_demand: dict[int, list[int]] = {}  # GPU count -> sorted indexes
        self.waiting: list[int] = []  # sorted indexes of jobs not running
        self.running: list[int] = []  # sorted indexes of running jobs

    def next_fitting(self, start: int, free: int) -> int | None:
        """The first index >= ``start`` of a job needing at most ``free`` GPUs."""
        best = None
        for gpus, indexes in self.by_demand.items():
            if gpus <= free and indexes:
                i = bisect_left(indexes, start)
                if i < len(indexes) and (best is None or indexes[i] < best):
                    best = indexes[i]
        return best


class LevelQueues:
    """Multi-level queues served greedily: level by level, by trace index within a level, every job
    that fits in the GPUs still unclaimed is chosen (Tiresias §3.2's discretized queues).

    The greedy choice is computed without walking the chosen jobs: a prefix-sum tree per level finds
    how far a budget of GPUs reaches, and per-GPU-count index lists find the next job that fits after
    one that does not. A pass therefore costs O((skips + changes) x log n), where the plain walk cost
    O(chosen jobs). A job's GPU count must not change while it is queued here."""

    def __init__(self, levels: int) -> None:
        self.levels = [_Level() for _ in range(levels)]
        self.gpus: dict[int, int] = {}  # index -> GPU count, as entered
        self.level: dict[int, int] = {}  # index -> level

    def __contains__(self, index: int) -> bool:
        return index in self.level

    def add(self, index: int, gpus: int, level: int, running: bool) -> None:
        lv = self.levels[level]
        self.gpus[index] = gpus
        self.level[index] = level
        lv.demand.add(index, gpus)
        bucket = lv.by_demand.get(gpus)
        if bucket is None:
            bucket = lv.by_demand[gpus] = []
        insort(bucket, index)
        insort(lv.running if running else lv.waiting, index)

    def remove(self, index: int, running: bool) -> None:
        lv = self.levels[self.level.pop(index)]
        gpus = self.gpus.pop(index)
        lv.demand.add(index, -gpus)
        _discard(lv.by_demand[gpus], index)
        _discard(lv.running if running else lv.waiting, index)

    def set_running(self, index: int, running: bool) -> None:
        lv = self.levels[self.level[index]]
        if running:
            old, new = lv.waiting, lv.running
        else:
            old, new = lv.running, lv.waiting
        i = bisect_left(old, index)
        if i == len(old) or old[i] != index:
            raise KeyError(index)
        del old[i]
        insort(new, index)

    def choose(self, capacity: int) -> list[tuple[int, int, int]]:
        """The greedy choice for ``capacity`` GPUs, as ``(level, lo, hi)``: the jobs of ``level`` with
        ``lo <= index < hi``, in serving order."""
        chosen: list[tuple[int, int, int]] = []
        for number, lv in enumerate(self.levels):
            if not lv.waiting and not lv.running:
                continue
            sums = lv.demand
            lo, base = 0, 0
            while True:
                hi, capacity = sums.reach(base + capacity)
                if hi > lo:
                    chosen.append((number, lo, hi))
                if hi >= sums.size or capacity == 0:
                    break
                lo = lv.next_fitting(hi + 1, capacity)
                if lo is None:
                    break
                base = sums.prefix(lo)
            if capacity == 0:
                break
        return chosen

    def changes(self, chosen: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
        """``(start, stop)``: waiting jobs in ``chosen`` (serving order) and running jobs outside it."""
        start: list[int] = []
        stop: list[int] = []
        spans: list[list[tuple[int, int]]] = [[] for _ in self.levels]
        for number, lo, hi in chosen:
            spans[number].append((lo, hi))
            waiting = self.levels[number].waiting
            start.extend(waiting[bisect_left(waiting, lo):bisect_left(waiting, hi)])
        for lv, level_spans in zip(self.levels, spans):
            running = lv.running
            if not running:
                continue
            at = 0
            for lo, hi in level_spans:
                stop.extend(running[bisect_left(running, at):bisect_left(running, lo)])
                at = hi
            stop.extend(running[bisect_left(running, at):])
        return start, stop


def _discard(indexes: list[int], index: int) -> None:
    i = bisect_left(indexes, index)
    if i == len(indexes) or indexes[i] != index:
        raise KeyError(index)
    del indexes[i]
