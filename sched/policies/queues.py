"""Waiting-job queues shared by the policies.

``DemandQueue`` buckets waiting jobs by GPU demand, one heap per distinct demand. "The best job that
fits in ``free`` GPUs" is then a look at a handful of bucket heads (traces have few distinct GPU
counts), not a scan of the queue: this is what keeps a scheduling pass O(decisions), not O(queue).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from typing import Callable

from schedlab.sched.core.job import Job

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
        if bucket is None:  # a new GPU count (rare): keep the buckets in ascending order of counts
            bucket = self._buckets[job.num_gpus] = []
            self._buckets = dict(sorted(self._buckets.items()))
        heapq.heappush(bucket, (self.key(job), job.index, job))
        self._size += 1

    def peek(self, free: int | None = None, skip: frozenset[int] | set[int] = frozenset()) -> Job | None:
        """The best job (lowest key, then trace order) needing at most ``free`` GPUs (any, if None) and
        a GPU count not in ``skip``."""
        best = None
        if free is None:
            free = self._size and max(self._buckets)  # every bucket qualifies
        # Same choice as comparing every bucket's (key, index): the buckets are in ascending GPU count,
        # so the loop stops at the first too large; whole entries compare as their (key, index) would,
        # since indexes are unique (the job is never reached) and no slices are built.
        for demand, bucket in self._buckets.items():
            if demand > free:
                break
            if bucket and (best is None or bucket[0] < best) and demand not in skip:
                best = bucket[0]
        return None if best is None else best[2]

    def heads(self):
        """``(key, job)`` of each non-empty bucket's head (the best job needing that many GPUs)."""
        for bucket in self._buckets.values():
            if bucket:
                yield bucket[0][0], bucket[0][2]

    def pop(self, job: Job) -> None:
        """Remove ``job``, which must be the head of its bucket (as returned by ``peek``)."""
        entry = heapq.heappop(self._buckets[job.num_gpus])
        assert entry[2] is job, "DemandQueue.pop: job is not the head of its bucket"
        self._size -= 1


class _Sums:
    """A Fenwick tree of non-negative integer values at integer slots ``low..low+size-1`` (size a power
    of two that doubles as slots are needed, on either side): prefix sums and "how far does this budget
    reach" in O(log size). ``low`` is 0 until a negative slot is used (keys that grow downwards, e.g.
    Tiresias' jobs put back at the front of a queue)."""

    def __init__(self) -> None:
        self.size = 1024
        self.low = 0
        self.end = self.size  # low + size: one past the last slot
        self.values = [0] * self.size  # value of slot s at s - low
        self.tree = [0] * (self.size + 1)

    def add(self, slot: int, delta: int) -> None:
        i = slot - self.low
        if i < 0 or i >= self.size:
            self._grow(slot)
            i = slot - self.low
        self.values[i] += delta
        tree, size = self.tree, self.size
        i += 1
        while i <= size:
            tree[i] += delta
            i += i & -i

    def prefix(self, slot: int) -> int:
        """Sum of the values at slots ``low..slot-1``."""
        tree = self.tree
        i = min(slot - self.low, self.size)
        total = 0
        while i > 0:
            total += tree[i]
            i &= i - 1
        return total

    def value(self, slot: int) -> int:
        return self.values[slot - self.low]

    def reach(self, budget: int) -> tuple[int, int]:
        """``(pos, left)``: the largest ``pos`` whose prefix sum is at most ``budget``, and ``budget``
        minus that sum. The value at ``pos`` (if ``pos < end``) is the first that does not fit."""
        tree, size = self.tree, self.size
        if tree[size] <= budget:  # everything fits (tree[size] is the total)
            return self.end, budget - tree[size]
        pos, step = 0, size >> 1
        while step:  # pos + step < size from here on
            nxt = pos + step
            value = tree[nxt]  # read once (the same value both uses would read)
            if value <= budget:
                pos = nxt
                budget -= value
            step >>= 1
        return pos + self.low, budget

    def _grow(self, slot: int) -> None:
        """Double the slots until ``slot`` is one. Growing upwards, the new half's slots are empty, so
        of its tree nodes only the last (the new root, covering every slot) is not 0: it holds the
        total. Growing downwards shifts every slot, so the tree is rebuilt (O(size), once per doubling)."""
        size, tree = self.size, self.tree
        if slot >= self.low:  # above
            total = tree[size]
            while self.low + size <= slot:
                tree += [0] * (size - 1)
                tree.append(total)
                size *= 2
            self.values.extend([0] * (size - self.size))
        else:  # below: prepend empty slots, then rebuild the tree from the values
            low = self.low
            while slot < low:
                low -= size
                size *= 2
            self.values[:0] = [0] * (self.low - low)
            self.low = low
            tree = self.tree = [0, *self.values]
            for i in range(1, size + 1):  # the linear-time construction
                j = i + (i & -i)
                if j <= size:
                    tree[j] += tree[i]
        self.size = size
        self.end = self.low + size


class _Level:
    """The jobs in one priority queue of :class:`LevelQueues`, by trace index."""

    def __init__(self) -> None:
        self.demand = _Sums()  # GPUs of the job at each index (0 where none)
        self.by_demand: dict[int, list[int]] = {}  # GPU count (ascending) -> sorted indexes
        self.waiting: list[int] = []  # sorted indexes of jobs not running
        self.running: list[int] = []  # sorted indexes of running jobs

    def next_fitting(self, start: int, free: int) -> int | None:
        """The first index >= ``start`` of a job needing at most ``free`` GPUs."""
        best = None
        for gpus, indexes in self.by_demand.items():  # ascending GPU counts (see LevelQueues.add)
            if gpus > free:
                break
            if indexes:
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
    O(chosen jobs). A job's GPU count must not change while it is queued here.

    Once fewer than ``walk_below`` GPUs are left, the pass goes job by job (``next_fitting`` alone):
    the same choice, without the two tree walks per skipped job that matter when few jobs can fit
    (tests/test_queues.py compares the two ways)."""

    walk_below = 8

    def __init__(self, levels: int) -> None:
        self.levels = [_Level() for _ in range(levels)]
        self.gpus: dict[int, int] = {}  # index -> GPU count, as entered
        self.level: dict[int, int] = {}  # index -> level

    def __contains__(self, index: int) -> bool:
        return index in self.level

    def add(self, index: int, gpus: int, level: int, running: bool) -> None:
        if gpus < 1:
            raise ValueError(f"LevelQueues: job {index} needs {gpus} GPUs; at least 1 is required")
        lv = self.levels[level]
        self.gpus[index] = gpus
        self.level[index] = level
        lv.demand.add(index, gpus)
        bucket = lv.by_demand.get(gpus)
        if bucket is None:  # a new GPU count (rare): keep the dict in ascending order of counts
            bucket = lv.by_demand[gpus] = []
            lv.by_demand = dict(sorted(lv.by_demand.items()))
        insort(bucket, index)
        insort(lv.running if running else lv.waiting, index)

    def remove(self, index: int, running: bool) -> None:
        lv = self.levels[self.level.pop(index)]
        gpus = self.gpus.pop(index)
        lv.demand.add(index, -gpus)
        _discard(lv.by_demand[gpus], index)
        _discard(lv.running if running else lv.waiting, index)

    def switch(self, capacity: int, blocking: bool = False) -> tuple[list[int], list[int]]:
        """Make the greedy choice for ``capacity`` GPUs the running set. Returns ``(start, stop)``: the
        waiting jobs it chose, in serving order, and the running jobs it left out (level by level, by
        index); both are already marked running / waiting here, the caller starts and preempts them.
        ``blocking``: the first job (in serving order) that does not fit ends the choice, as strict FIFO
        does, instead of being skipped.

        Level by level, ``reach`` finds how far the GPUs left go in index order, ``next_fitting`` the
        next job that fits after one that does not; the chosen spans ``[lo, hi)`` are compared with the
        level's sorted waiting and running lists by bisection, so a pass costs O((skips + changes) x
        log n), not O(chosen jobs)."""
        start: list[int] = []
        stop: list[int] = []
        for lv in self.levels:
            waiting, running = lv.waiting, lv.running
            if not waiting and not running:
                continue
            if capacity == 0:  # the levels before took every GPU: this level's running jobs all stop
                if running:
                    stop += running
                    waiting += running
                    waiting.sort()  # two sorted runs: one merge
                    running.clear()
                continue
            sums, walk = lv.demand, self.walk_below
            total = sums.tree[sums.size]  # the level's demand (the tree's root)
            low = sums.low
            if total <= capacity:  # all of it fits (the same as one reach to the end): its waiting jobs start
                capacity -= total
                start += waiting
                for index in waiting:
                    insort(running, index)
                waiting.clear()
                continue
            first_start, first_stop = len(start), len(stop)
            chosen_waiting: list[tuple[int, int]] = []  # slices of ``waiting`` that start
            left_running: list[tuple[int, int]] = []  # slices of ``running`` that stop
            at = base = 0  # ``at``: position in ``running`` after the last chosen job
            lo = low if capacity >= walk or blocking else lv.next_fitting(low, capacity)  # the next job chosen
            while lo is not None:
                if capacity >= walk or blocking:  # jobs lo..hi-1 are chosen: how far the GPUs reach, in one descent
                    hi, capacity = sums.reach(base + capacity)
                    if hi > lo:
                        a = bisect_left(waiting, lo)
                        b = bisect_left(waiting, hi, a)
                        if b > a:
                            chosen_waiting.append((a, b))
                            start += waiting[a:b]
                        a = bisect_left(running, lo, at)
                        if a > at:
                            left_running.append((at, a))
                            stop += running[at:a]
                        at = bisect_left(running, hi, a)
                    if blocking and hi < sums.end:  # job hi does not fit: nothing after it starts
                        capacity = 0
                    if hi >= sums.end or capacity == 0:
                        break
                    lo = lv.next_fitting(hi + 1, capacity)  # job hi does not fit
                    if lo is not None and capacity >= walk:
                        base = sums.prefix(lo)
                else:  # few GPUs left: job lo alone, the next fitting one after it found directly
                    a = bisect_left(running, lo, at)
                    if a > at:
                        left_running.append((at, a))
                        stop += running[at:a]
                    if a < len(running) and running[a] == lo:  # it runs on
                        at = a + 1
                    else:  # it starts
                        at = a
                        a = bisect_left(waiting, lo)
                        chosen_waiting.append((a, a + 1))
                        start.append(lo)
                    capacity -= sums.values[lo - low]
                    if capacity == 0:
                        break
                    lo = lv.next_fitting(lo + 1, capacity)
            if at < len(running):
                left_running.append((at, len(running)))
                stop += running[at:]
            # move the jobs between the two lists: cut the slices (last first, so positions hold), insert
            for a, b in reversed(chosen_waiting):
                del waiting[a:b]
            for a, b in reversed(left_running):
                del running[a:b]
            for index in start[first_start:]:
                insort(running, index)
            for index in stop[first_stop:]:
                insort(waiting, index)
        return start, stop


def _discard(indexes: list[int], index: int) -> None:
    i = bisect_left(indexes, index)
    if i == len(indexes) or indexes[i] != index:
        raise KeyError(index)
    del indexes[i]
