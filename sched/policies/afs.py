"""``afs``: AFS as Lyra implements it (Lyra EuroSys'23 §7.1; docs/explanation/lyra.md; AFS: Hwang et al.,
NSDI'21, "Elastic Resource Sharing for Distributed Deep Learning").

Every round (60 s, a timer): base demands first — running jobs keep theirs (AFS here never
preempts), queued jobs get theirs in arrival order if they fit (else they are skipped); then, one
GPU at a time, the spare GPUs go to the job with the largest throughput gain per GPU,
``rate(w + 1) - rate(w)``, with no upper cap (unbounded elasticity) while the gain is positive.
Lyra's elastic fixed-duration jobs (``elastic_min/max``, ``sched/models/scaling.py``) gain
``(rate(w + 1) - rate(w)) / remaining``, their completion-rate gain, linear beyond their range (Lyra
§7.4: "AFS assumes unbounded elasticity"); ``bounded: true`` stops them at ``elastic_max``, Lyra's own
"limited elasticity" (a sensitivity, not the paper's AFS).
A goodput job's rate is its goodput (docs/explanation/pollux.md) at its workload batch on ``w`` GPUs packed on
the fewest servers; its base demand is its workload GPU count (``base: trace``) or one GPU
(``base: one``, AFS' own start). Fixed-duration jobs are inelastic (base only). Placement: kept GPUs
stay; a growing job takes GPUs on its own servers first, then the emptiest; a new job one server if
one fits (best fit), else the emptiest servers. Every change costs the 30 s stall.

Durations read (``docs/estimates.md``): an elastic fixed-duration job's remaining work (its gain's
divisor), true or with ``knowledge: estimate`` the estimator's; goodput jobs and inelastic ones read
none (on a trace without elastic jobs estimate mode changes nothing, and the replay warns so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from schedlab.sched.estimators.params import KnowledgeParams
from schedlab.sched.policies.elastic import (
    RoundParams,
    RoundPolicy,
    apply_allocations,
    grow_by_gain,
    packed_shape,
    server_capacity,
    server_counts,
)
from schedlab.sched.models.scaling import speed

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job


class AfsParams(RoundParams, KnowledgeParams):
    base: Literal["trace", "one"] = Field(default="trace", description="base demand: workload GPUs or 1 GPU")
    bounded: bool = Field(default=False, description="Lyra's elastic jobs grow no further than elastic_max"
                          " (default: unbounded, as Lyra §7.4 says AFS is)")


class Afs(RoundPolicy):
    name = "afs"
    summary = "base demands first, then one GPU at a time to the largest throughput gain per GPU, no cap"
    paper = "AFS (NSDI'21) as Lyra (EuroSys'23) §7.1 implements it; docs/explanation/lyra.md"
    simplified = "goodput model's scaling at the workload batch; non-preemptive; 60 s rounds; placement ours"
    Params = AfsParams

    def decide(self, engine: PolicyEngine) -> None:
        cluster = engine.cluster
        per = cluster.gpus_per_server
        left = cluster.total_gpus
        count: dict[Job, int] = {}
        for job in self.active.values():
            if job.running:
                count[job] = self._base(job)
                left -= count[job]
        for job in self.active.values():
            if not job.running and self._base(job) <= left:
                count[job] = self._base(job)
                left -= count[job]
        heap = []
        for order, job in enumerate(count):
            gain = self._gain(engine, job, count[job], per)
            if gain > 0:
                heap.append((-gain, order, job))
        grow_by_gain(count, left, heap, lambda job, gpus: self._gain(engine, job, gpus, per))
        apply_allocations(engine, self._place(engine, count))

    def _base(self, job: Job) -> int:
        return 1 if self.params.base == "one" and job.goodput is not None else job.requested_gpus

    def _gain(self, engine: PolicyEngine, job: Job, w: int, per: int) -> float:
        if job.goodput is None:  # Lyra's elastic jobs: completion-rate gain per GPU (docs/explanation/lyra.md)
            if not job.elastic_max or (self.params.bounded and w >= job.elastic_max):
                return 0.0
            lo, loss = job.elastic_min, job.scaling_loss
            return (speed(lo, loss, w + 1) - speed(lo, loss, w)) / max(self.remaining(engine, job), 1e-9)
        try:
            return self._rate(job, w + 1, per) - self._rate(job, w, per)
        except ValueError:  # the batch cannot be split over that many GPUs
            return 0.0

    @staticmethod
    def _rate(job: Job, w: int, per: int) -> float:
        return job.goodput.model.goodput(packed_shape(w, per), job.goodput.global_batch, job.goodput.epoch_start)

    def _place(self, engine: PolicyEngine, count: dict[Job, int]) -> dict[Job, dict[int, int]]:
        per = engine.cluster.gpus_per_server
        free = server_capacity(engine)  # lent-out or absent servers offer nothing (pools.py)
        targets: dict[Job, dict[int, int]] = {}
        for job, want in count.items():  # running jobs keep what they keep
            if job.running:
                current = server_counts(job, per)
                keep: dict[int, int] = {}
                have = 0
                for s in sorted(current, key=lambda s: (-current[s], s)):
                    n = min(current[s], want - have)
                    if n > 0:
                        keep[s] = n
                        have += n
                targets[job] = keep
                for s, n in keep.items():
                    free[s] -= n
        for job in sorted(count, key=lambda j: (-count[j], j.index)):
            target = targets.setdefault(job, {})
            need = count[job] - sum(target.values())
            if need and not target:
                fits = [s for s in range(len(free)) if free[s] >= need]
                if fits:
                    s = min(fits, key=lambda s: (free[s], s))
                    target[s] = need
                    free[s] -= need
                    continue
            for s in sorted(range(len(free)), key=lambda s: (s not in target, -free[s], s)):
                if need == 0:
                    break
                n = min(free[s], need)
                if n:
                    target[s] = target.get(s, 0) + n
                    free[s] -= n
                    need -= n
        return targets
