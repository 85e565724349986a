"""Heterogeneous jobs under ``lyra`` (Lyra EuroSys'23 §2.1, §6, §7.1; docs/explanation/lyra.md).

A mixin of :class:`~schedlab.sched.policies.lyra.Lyra` (its pools, BFD starts and scale-in): phase 1
considers heterogeneous jobs after every other pending job and starts them on one GPU type if the
free GPUs allow, else on training and on-loan GPUs at once (see ``lyra/policy.py``'s module doc).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from schedlab.sched.policies.lyra import bfd

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job

TRAINING, LOAN = 0, 1  # Lyra's pools: training servers, on-loan inference servers


class HeterogeneousJobs:
    """Phase 1 for heterogeneous jobs; the state (``hetero_pending``, ``split_base``,
    ``mixed_starts``) lives on the Lyra policy."""

    def _phase1_hetero(self, engine: PolicyEngine) -> bool:
        """Heterogeneous jobs, SJF among themselves, "with the lowest priority on the remaining servers
        after all other jobs are scheduled" (§6). A start of base ``b`` that fails with nothing changed
        fails for every larger base too (placement may split workers): those are skipped."""
        cluster = engine.cluster
        r = self._r(engine)
        queues = self.hetero_pending
        started = False
        limit = math.inf
        while queues:
            flex = self._flex_by_pool()
            room = (self._free_in(cluster, TRAINING) + flex[TRAINING]
                    + (self._free_in(cluster, LOAN) + flex[LOAN]) / r + 1e-9)
            best = None
            for base, queue in queues.items():
                if base <= room and base < limit and (best is None or queue[0] < best[1]):
                    best = (base, queue[0])
            if best is None:
                break
            base, (_, _, job) = best
            scale_ins = self.scale_ins
            if self._start_hetero(engine, job, flex):
                queue = queues[base]
                del queue[0]
                if not queue:
                    del queues[base]
                started = True
            elif self.scale_ins == scale_ins:
                limit = base
        return started

    def _start_hetero(self, engine: PolicyEngine, job: Job, flex: list[int]) -> bool:
        """One GPU type if the free GPUs allow (training first: an elastic job's base goes to training
        servers, §6), else both at once; only then by scaling flexible workers in, likewise."""
        cluster = engine.cluster
        for pool in (TRAINING, LOAN):
            fits = self._raw(engine, pool, self.base(job)) <= self._free_in(cluster, pool)
            if fits and self._start_in(engine, job, pool, [0, 0]):
                self._split(engine, job)
                return True
        if self._start_mixed(engine, job, [0, 0]):
            return True
        for pool in (TRAINING, LOAN):
            if self._start_in(engine, job, pool, flex):
                self._split(engine, job)
                return True
        return self._start_mixed(engine, job, flex)

    def _split(self, engine: PolicyEngine, job: Job) -> None:
        """An elastic heterogeneous job with its base on training servers takes its flexible workers
        on on-loan servers (§6: "flexible demands on inference servers whenever possible"): its
        flexible pool is LOAN, re-chosen by :meth:`_flex_pools` whenever it has no flexible workers."""
        if job in self.elastic_running and self.pool_of_job[job] == TRAINING:
            self.pool_of_job[job] = LOAN
            self.split_base.add(job)

    def _flex_pools(self, engine: PolicyEngine) -> None:
        """Where the next flexible workers of a split job without any go (§6: "on inference servers
        whenever possible"): on-loan servers when they have a free worker's worth, else training
        servers when those have free GPUs (else on loan, where the knapsack may scale others in)."""
        cluster = engine.cluster
        loan_room = self._free_in(cluster, LOAN) >= self._raw(engine, LOAN, self.params.elastic_gpus_per_worker)
        pool = LOAN if loan_room or not self._free_in(cluster, TRAINING) else TRAINING
        for job in self.split_base:
            if job.num_gpus == self.base_raw[job]:
                self.pool_of_job[job] = pool

    def _start_mixed(self, engine: PolicyEngine, job: Job, flex: list[int]) -> bool:
        """Start ``job``'s base on both types: every training GPU it can get (up to its demand), the
        rest as ``ceil(r x rest)`` T4 GPUs on on-loan servers. It runs at ``heterogeneous_perf`` x its
        normalised GPUs / demand (sched/core/pools.py). Elastic jobs started so stay at their base."""
        cluster = engine.cluster
        per = cluster.gpus_per_server
        demand = self.base(job)
        free_t, free_l = self._free_in(cluster, TRAINING), self._free_in(cluster, LOAN)
        v100 = min(demand, free_t + flex[TRAINING])
        t4 = self._raw(engine, LOAN, demand - v100)
        if v100 <= 0 or t4 <= 0 or t4 > free_l + flex[LOAN]:
            return False
        if v100 > free_t:
            self._scale_in_for(engine, TRAINING, v100 - free_t)
        if t4 > free_l:
            self._scale_in_for(engine, LOAN, t4 - free_l)
        size = self._worker_size(job)
        free_by_server = cluster.free_by_server
        where: dict[int, int] = {}
        for pool, need in ((TRAINING, v100), (LOAN, t4)):
            servers = self._servers(engine, pool)
            free = {s: len(free_by_server[s]) for s in servers}
            workers = bfd.workers_of(need, min(self._raw(engine, pool, size), per))
            part = bfd.place(free, workers, self._base_tiers(engine, pool, servers), per,
                             available=self._free_in(cluster, pool))
            if part is None:
                return False
            where.update(part)
        if not engine.start(job, sorted(where.items()), num_gpus=v100 + t4):
            return False
        self.pool_of_job[job] = TRAINING
        self.mixed_starts += 1
        if self.params.tuned_jobs and job.goodput is not None:
            self._tune(engine, job)
        return True
