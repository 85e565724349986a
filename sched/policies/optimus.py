"""``optimus``: Optimus+Oracle as in Pollux's simulator study (Optimus, EuroSys'18, Peng et al., §4;
Pollux §5.3; docs/explanation/pollux.md).

Every round (60 s, a timer): each job keeps its workload batch (TunedJobs) and the scheduler knows
its remaining iterations at that batch (the oracle: iterations to convergence after the current
epoch, from the measured data; 1 in the last epoch, as the study). Every active job gets 1 GPU in
arrival order while GPUs last; each spare GPU then goes to the job with the largest
``(T(r) - T(r + 1)) x remaining iterations`` (``T``: iteration time on ``r`` GPUs packed on 4-GPU
nodes), while that gain is positive; a job gets at most ``batch / smallest per-GPU batch`` GPUs
(ncf: 1, as the study). Jobs whose GPU count is unchanged keep their GPUs; the others are placed,
fewest GPUs first, on the emptiest servers first. Every change costs the 30 s stall.
Simplified: Optimus' own throughput and convergence models are replaced by the oracle (as in the
study); the study also predicts one-GPU times with one accumulation pass even at the smallest batch,
we use the model's iteration time.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from schedlab.sched.policies.elastic import (
    RoundParams,
    RoundPolicy,
    apply_allocations,
    grow_by_gain,
    emptiest_first,
    packed_shape,
    server_capacity,
    server_counts,
)

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job


class OptimusParams(RoundParams):
    max_gpus: dict[str, int] = Field(default={"ncf": 1}, description="application -> GPU cap (the study: ncf 1)")


class Optimus(RoundPolicy):
    name = "optimus"
    summary = "greedy GPUs by marginal iteration-time gain x remaining iterations (oracle), 60 s rounds"
    paper = "Optimus (EuroSys'18) §4; Optimus+Oracle+TunedJobs of Pollux §5.3 (docs/explanation/pollux.md)"
    simplified = "remaining iterations and iteration times known (oracle, as in Pollux's study); goodput jobs only grow"
    Params = OptimusParams

    def __init__(self, params: OptimusParams | None = None) -> None:
        super().__init__(params)
        self._remaining: dict[tuple[int, int, int], float] = {}

    def decide(self, engine: PolicyEngine) -> None:
        cluster = engine.cluster
        per = cluster.gpus_per_server
        left = cluster.total_gpus
        count: dict[Job, int] = {}
        heap: list[tuple[float, int, Job]] = []
        for order, job in enumerate(self.active.values()):
            if left == 0:
                break
            if job.goodput is None:  # a fixed-duration job runs at its own GPU count
                if job.requested_gpus <= left:
                    count[job] = job.requested_gpus
                    left -= job.requested_gpus
                continue
            count[job] = 1
            left -= 1
            gain = self._gain(job, 1, per)
            if gain > 0:
                heapq.heappush(heap, (-gain, order, job))
        grow_by_gain(count, left, heap, lambda job, gpus: self._gain(job, gpus, per))
        targets: dict[Job, dict[int, int]] = {}
        free = server_capacity(engine)  # an inference server not lent offers none (sched/core/pools.py)
        for job in count:
            if job.running and job.num_gpus == count[job]:
                targets[job] = server_counts(job, per)
                for s, n in targets[job].items():
                    free[s] -= n
        for job in sorted((j for j in count if j not in targets), key=lambda j: count[j]):
            targets[job] = emptiest_first(free, count[job])
        apply_allocations(engine, targets)

    def _cap(self, job: Job) -> int:
        model = job.goodput.model
        cap = max(1, job.goodput.global_batch // model.min_local_batch)
        return min(cap, self.params.max_gpus.get(job.model, cap))

    def _gain(self, job: Job, r: int, per: int) -> float:
        if r + 1 > self._cap(job):
            return 0.0
        model, batch = job.goodput.model, job.goodput.global_batch
        try:
            now = model.iteration_time(packed_shape(r, per), batch)
            more = model.iteration_time(packed_shape(r + 1, per), batch)
        except ValueError:  # the batch cannot be split over that many GPUs
            return 0.0
        return (now - more) * self._remaining_iterations(job)

    def _remaining_iterations(self, job: Job) -> float:
        """Iterations after the current epoch to convergence at the job's batch (1 in the last)."""
        model = job.goodput.model
        epoch = model.epoch(job.goodput.epoch_start)
        key = (id(model), job.goodput.global_batch, epoch)
        value = self._remaining.get(key)
        if value is None:
            if epoch >= model.epochs - 1:
                value = 1.0
            else:
                cumulative = model.iterations
                done = float(np.interp(job.goodput.global_batch, model.batches, cumulative[:, epoch]))
                end = float(np.interp(job.goodput.global_batch, model.batches, cumulative[:, model.epochs - 1]))
                value = end - done
            self._remaining[key] = value
        return value
