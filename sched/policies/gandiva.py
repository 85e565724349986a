"""``gandiva``: Gandiva's packing with introspective unpacking (Xiao et al., OSDI'18, "Gandiva:
Introspective Cluster Scheduling for Deep Learning"), as Gavel re-implemented it
(stanford-futuredata/gavel, ``scheduler/policies/gandiva.py``).

Rules and where they come from (Gandiva's quotes as reproduced in Gavel's notes on Gandiva; the
paper's section numbers could not be checked here, so the rules cite the mechanisms by name):

1. **Queue**: jobs start in arrival order on free GPUs (the engine's ``fewest-servers`` placement;
   Gandiva's reactive mode places jobs as they arrive); a job that does not fit (or that a strict
   placement refuses although enough GPUs are free) does not block smaller ones.
2. **Packing only under overload** (Gandiva: "Packing is considered only during overload"; Gavel packs
   only when requested workers exceed the cluster): a queued job that does not fit on the free GPUs
   is packed onto the GPUs of one running job that is alone on them and asks for the *same number of
   GPUs* (Gavel pairs only equal scale factors; Gimbal §7.2: the original Gandiva "does not support
   the job packing with different GPU numbers"; Castor §1-2 and SJF-BSBF say it shares single-GPU jobs
   only: ``max_pack_gpus=1``), if both fit in one GPU's memory (Gandiva: packing only "when the
   combined memory utilization ... do not exceed the overall memory of the GPU").
   Among partners the one with the smallest memory footprint is tried first, the earliest-submitted
   on a tie: our stand-in for Gandiva's "lowest GPU utilization" GPU.
3. **Introspection** (Gandiva's introspective mode): after ``profile_s`` seconds packed, it reads both
   jobs' measured slowdown (``job.pace``, ξ) and keeps the pair only if its total normalized throughput
   1/ξ_a + 1/ξ_b is at least ``min_packed_throughput`` = 1.0, i.e. better than time-slicing the two
   ("Packing is deemed successful when the total throughput of packed jobs is greater than
   time-slicing"; Gavel drops combinations whose normalized throughput is < 1.0). Otherwise it
   unpacks: the job packed last goes back to the queue (keeping its progress) and that workload pair
   is not packed again ("If packing is unsuccessful, we undo the packing and try the next" GPU).

Constants: ``min_packed_throughput`` = 1.0 from Gandiva / Gavel as above; ``profile_s`` = 60 s is
our choice (one minute of mini-batches to measure a rate; not a constant we could verify in the
paper). Unpacking pays the engine's checkpoint-restore overhead (63 s, Lyra §7.5): Gandiva's own
suspend-resume is cheaper, but we could not verify its figure here; pass ``preemption_overhead_s``
to replay to change it.

Simplified (also in ``simplified``): no time-slicing (suspend-resume round robin) of over-subscribed
jobs, no migration for defragmentation, no grow-shrink; the affinity-based server choice is the
engine's placement strategy; GPU utilization is not modelled (memory footprint stands in for it);
a failed workload pair is remembered for every later job (its ξ is a property of the pair);
a pair is profiled once, when it is packed.

Gimbal's baseline and relaxation (Gimbal §7.1-7.2, spec ``gimbal.md`` A13; off by default):
``order="edf"`` serves the queue earliest deadline first (jobs without a deadline last, arrival order
on ties) and keeps running late jobs -- the paper only says Gandiva was "extended to support the
deadline-aware feature"; EDF is ours. ``unequal=True`` lets a queued job join the job set of one larger
running job (see ``packing.py``); introspection then checks the member against its J_max. Under
Gimbal (an engine that answers ``calibrating(job)``) the check waits until the set's search has ended,
so it reads calibrated paces (docs/explanation/gimbal.md).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schedlab.sched.core.job import Job
from schedlab.sched.policies.packing import PackingPolicy, workload

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine


class GandivaParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    profile_s: float = Field(default=60.0, gt=0, description="seconds packed before the introspective check")
    min_packed_throughput: float = Field(
        default=1.0, gt=0, description="unpack when 1/ξ_a + 1/ξ_b of a packed pair is below this (Gandiva)"
    )
    max_pack_gpus: int | None = Field(default=None, ge=1, description="largest packed job; None: any size")
    order: Literal["fifo", "edf"] = Field(
        default="fifo", description="queue order: arrival (Gandiva) or earliest deadline first (Gimbal §7.1, ours)"
    )
    unequal: bool = Field(default=False, description="Gimbal §5.1: also pack into job sets around larger jobs")
    max_jobset: int = Field(default=5, ge=2, description="most jobs per unequal job set (Gimbal §7.4: M <= 5)")


class Gandiva(PackingPolicy):
    name = "gandiva"
    summary = "FIFO; under overload packs same-GPU-count jobs, unpacks pairs whose measured slowdown is too high"
    paper = "Gandiva (OSDI'18) packing + introspection, as re-implemented in Gavel (OSDI'20)"
    simplified = "no time-slicing, migration or grow-shrink; memory stands in for GPU utilization"
    Params = GandivaParams
    waits_when_refused = True  # _start_free: a refused job waits (and may then be packed) and blocks no one

    def __init__(self, params: GandivaParams | None = None) -> None:
        order = self.deadline_order if (params is not None and params.order == "edf") else self.arrival_order
        super().__init__(params, order, self.arrival_order)
        self.bad: set[tuple] = set()  # workload pairs that failed the introspective check
        self._compatible: dict[tuple, bool] = {}
        self._memory: dict[tuple, float] = {}
        self.unpacks = 0

    @staticmethod
    def arrival_order(job: Job) -> float:
        return job.index

    @staticmethod
    def deadline_order(job: Job) -> float:
        """EDF key: the absolute deadline (no deadline: last); the queue breaks ties by arrival."""
        deadline = job.deadline
        return deadline if deadline is not None and not math.isnan(deadline) else math.inf

    def schedule(self, engine: PolicyEngine) -> None:
        self._start_free(engine)
        if self.waiting.token:  # whatever still waits does not fit: the cluster is overloaded, pack
            self._pack(engine, self.params.max_pack_gpus or engine.cluster.total_gpus)
        self.dirty.clear()

    def on_packed(self, engine: PolicyEngine, job: Job, partner: Job) -> None:
        engine.set_timer(engine.now + self.params.profile_s, (job, partner))

    def on_timer(self, engine: PolicyEngine, payload: Any) -> None:
        """Introspection: keep the pair if its measured normalized throughput beats time-slicing."""
        job, partner = payload
        member = self.host.get(job) is partner  # unequal: job is a member of partner's set
        if not member and self.pair.get(job) is not partner:
            return  # the pair ended before its check (one of them finished)
        calibrating = getattr(engine, "calibrating", None)  # Gimbal's engine proxy: a search is running
        if calibrating is not None and (calibrating(job) or calibrating(partner)):
            engine.set_timer(engine.now + self.params.profile_s, payload)  # read the calibrated paces later
            return
        if 1.0 / job.pace + 1.0 / partner.pace >= self.params.min_packed_throughput:
            return
        a, b = workload(job), workload(partner)
        self.bad.update(((a, b), (b, a)))
        engine.preempt(job)
        self.unpacks += 1
        if member:
            self._enqueue(job)
            self._leave_set(job, partner)
        else:
            del self.pair[job], self.pair[partner]
            self._enqueue(job)
            self._alone(partner)

    def choose(self, engine: PolicyEngine, entry: tuple, wl: tuple, targets: list) -> int | None:
        """The compatible class head with the smallest memory footprint, earliest-submitted on a tie."""
        job = entry[3]
        best, best_key = None, None
        for i, (target_entry, twl) in enumerate(targets):
            partner = target_entry[3]
            key = (self._memory_of(engine, partner, twl), partner.index)
            if (best is None or key < best_key) and self.fits(engine, job, wl, partner, twl):
                best, best_key = i, key
        return best

    def _memory_of(self, engine: PolicyEngine, job: Job, wl: tuple) -> float:
        if (memory := self._memory.get(wl)) is None:
            memory = self._memory[wl] = engine.sharing.memory_gib(job)
        return memory

    def fits(self, engine: PolicyEngine, job: Job, wl: tuple, partner: Job, pwl: tuple) -> bool:
        """Memory fits (``engine.can_share``; a pair the ξ source says cannot co-run, ξ = inf, counts
        as not fitting) and the pair has not failed introspection."""
        if (key := (wl, pwl)) in self.bad:
            return False
        if (ok := self._compatible.get(key)) is None:
            if engine.sharing is None:
                raise RuntimeError("gandiva needs a sharing model (replay builds one)")
            ok = self._compatible[key] = engine.can_share(job, partner)
        return ok
