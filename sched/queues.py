"""Waiting-job queues shared by the policies.

``DemandQueue`` buckets waiting jobs by GPU demand, one heap per distinct demand. "The best job that
fits in ``free`` GPUs" is then a look at a handful of bucket heads (traces have few distinct GPU
counts), not a scan of the queue: this is what keeps a scheduling pass O(decisions), not O(queue).
"""

from __future__ import annotations

import heapq
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
