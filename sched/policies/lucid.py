"""``lucid``: Lucid's non-intrusive "indolent" packing (Hu et al., ASPLOS'23, "Lucid: A Non-intrusive,
Scalable and Interpretable Scheduler for Deep Learning Training Jobs").

The rules, cited by mechanism name (the paper's section numbers could not be checked here), as in its
artifact (github S-Lab-System-Group/Lucid, ``simulation/policy/lucid.py``, ``analyzer/analyzer.py``):

1. **Priority from the workload estimate** (Lucid's Workload Estimate Model + time-aware scheduling):
   a job's priority value is its estimated duration x its GPU count; the queue is served lowest value
   first, and a job that cannot start does not block the ones behind it.
2. **Sharing score** (Lucid's Packing Analyze Model): each workload gets a score in {0, 1, 2} from
   its profile: its average normalized speed when co-located (solo time / co-located time = 1/ξ)
   is < 0.85 -> 2, < 0.95 -> 1, otherwise 0 (the artifact's labelling rule).
3. **Affine-pair packing**: a queued job may be packed beside one running job that (a) runs alone,
   (b) asks for the *same number of GPUs* (it then takes exactly that job's GPUs), (c) fits with it
   in one GPU's memory, (d) whose score plus the job's is <= 2, and (e) whose priority value is at
   least half the job's (the "time-aware" pair picker). Only single-server jobs are packed (the
   artifact packs ``gpu_num <= 8`` on 8-GPU nodes; Castor §9.1: Lucid "neglects GPU sharing for DDL
   jobs"). As in the artifact a job tries a partner first, free GPUs second. It never preempts.

Simplified (also in ``simplified``): the workload estimate is the trace's true duration (no GA²M
model) unless ``knowledge: estimate`` (then an estimator's, ``docs/estimates.md``; the duration is the
only one Lucid reads: its priority value); the score comes from the replay's ξ source against every catalog workload (no decision tree
on DCGM metrics); Prescient Adaptive Sharing (no packing while the Throughput Predict Model foresees a
quiet cluster) and the profiler/auto-scaling are left out; the partner is the earliest-started
eligible class head. ``artifact_pass: true`` runs Lucid's simulator's pass instead: every waiting job
in priority order tries the first eligible running job in start order, then free GPUs; it agrees with
the simulator job for job (``schedlab.studies.conformance.lucid``). It is not the default because it
has no form for Gimbal's job sets (``unequal``), which Gimbal's relaxed Lucid builds on the class-head
pass: with it as the baseline's default, Gimbal's ablation would change two rules in one step. Lucid's simulator
places with its ``consolidate`` placer: schedlab's ``--placement strict-best-fit`` (the default
``fewest-servers`` may spread a job that fits one server over several when no single server holds
it); a job the placement refuses waits and blocks no one. With a constant ξ >= 1.18 (``analytic``'s
1.5) every workload scores 2 and Lucid never packs: that is its rule, not a bug.

Gimbal's relaxed Lucid (Gimbal §7.2, spec ``gimbal.md`` A12; off by default): ``max_pair_score=3``
(more aggressive; the paper does not give its threshold), ``max_pack_gpus`` = the cluster's GPUs
(multi-server jobs packed too) and ``unequal=True`` (a smaller job may join the job set of one larger
running job, on GPUs that job holds alone, fewest servers first; rule 3(b) above then reads "at most
the same number of GPUs"). The same time-aware, score and memory rules pick the host.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import TYPE_CHECKING

from pydantic import Field

from schedlab.sched.core.job import Job
from schedlab.sched.estimators.params import KnowledgeParams
from schedlab.sched.policies.packing import PackingPolicy, workload

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine


class LucidParams(KnowledgeParams):
    score_speeds: tuple[float, float] = Field(default=(0.85, 0.95), description="mean 1/ξ below: score 2 / 1")
    max_pair_score: int = Field(default=2, ge=0, description="a pair packs if its scores sum to at most this")
    priority_ratio: float = Field(default=2.0, gt=0, description="job priority <= ratio x partner priority")
    max_pack_gpus: int | None = Field(default=None, ge=1, description="largest packed job; None: one server")
    pack_when_free: bool = Field(default=True, description="try a partner before free GPUs (artifact order)")
    unequal: bool = Field(default=False, description="Gimbal §5.1: also pack into job sets around larger jobs")
    max_jobset: int = Field(default=5, ge=2, description="most jobs per unequal job set (Gimbal §7.4: M <= 5)")
    artifact_pass: bool = Field(default=False, description="Lucid's simulator's pass: every waiting job in order"
                                " tries the first eligible running job in start order, then free GPUs")


class Lucid(PackingPolicy):
    name = "lucid"
    uses = (frozenset({"xi"}),)
    falls_back_to = "ssf"  # no pair packs: priority = estimated GPU time, no blocking
    summary = "priority = estimated GPU time; packs same-GPU-count single-server jobs with low sharing scores"
    paper = "Lucid (ASPLOS'23): indolent packing, Packing Analyze Model, time-aware order; Castor §9.1 baseline"
    simplified = ("oracle durations unless knowledge: estimate; sharing score from the ξ source, not a DCGM decision"
                  " tree; no adaptive sharing")
    Params = LucidParams
    waits_when_refused = True  # a job its placement refuses waits and blocks no one, as in Lucid's simulator

    def __init__(self, params: LucidParams | None = None) -> None:
        super().__init__(params, self.priority, lambda job: -self.priority(job))  # targets: longest first
        low, high = self.params.score_speeds
        if not 0 < low <= high:
            raise ValueError(f"lucid: score_speeds must satisfy 0 < low <= high, got {self.params.score_speeds}")
        if self.params.artifact_pass and (self.params.unequal or not self.params.pack_when_free):
            raise ValueError("lucid: artifact_pass packs equal pairs partner-first; it takes neither unequal: true"
                             " nor pack_when_free: false")
        self._score: dict[tuple, int] = {}
        self._compatible: dict[tuple, bool] = {}
        self._probes: list[Job] | None = None
        self._started: dict[Job, int] = {}  # artifact pass: running job -> its start's sequence number
        self._starts = 0

    def priority(self, job: Job) -> float:
        """Lucid's priority value: estimated duration x GPUs (lower runs first)."""
        return self.duration(job) * job.num_gpus

    def schedule(self, engine: PolicyEngine) -> None:
        max_pack = self.params.max_pack_gpus or engine.cluster.gpus_per_server
        if self.params.artifact_pass:
            self._artifact_pass(engine, max_pack)
            return
        if self.params.pack_when_free:
            self._pack(engine, max_pack, cover=False)  # unequal rule (b) only for jobs free GPUs cannot take
        self._start_free(engine)
        self._pack(engine, max_pack)

    def _artifact_pass(self, engine: PolicyEngine, max_pack: int) -> None:
        """Lucid's simulator's pass (``simulation/policy/lucid.py`` ``simulate``, step 4): every waiting
        job, lowest priority value first (then trace order), packs beside the first running job, in
        start order, that runs alone, has its GPU count, fits in memory, keeps the pair's scores within
        ``max_pair_score`` and has at least 1/``priority_ratio`` of its priority value; else it starts on
        free GPUs if the placement takes it; else it waits and blocks no one.

        Walked class by class (GPU count, workload) in merged key order, which gives the simulator's
        job order and outcome: within a pass free GPUs only shrink, a refused GPU count stays refused,
        and a class's partners (the alone jobs of its GPU count) only grow by starts of that count on
        free GPUs. So once a job can neither pack nor start while its GPU count can no longer start on
        free GPUs, every later job of its class (no better priority, hence no looser partner limit)
        fails too, and the class is done for the pass: O(starts + classes) heap steps, not O(waiting)."""
        ratio, started, queue = self.params.priority_ratio, self._started, self.waiting
        partners: dict[int, list[Job]] = {}  # GPU count -> alone jobs in start order
        for job in sorted(self.alone.token, key=started.__getitem__):
            partners.setdefault(job.num_gpus, []).append(job)
        heads = queue.class_heads()
        heapify(heads)
        no_free: set[int] = set()  # GPU counts that cannot start on free GPUs for the rest of the pass
        while heads:
            entry, heap = heappop(heads)
            job, gpus, partner = entry[3], entry[3].num_gpus, None
            if gpus <= max_pack and (alone := partners.get(gpus)):
                wl, limit = workload(job), self.priority(job) / ratio
                partner = next((j for j in alone if self.priority(j) >= limit
                                and self.fits(engine, job, wl, j, workload(j))), None)
            if partner is not None:
                engine.start(job, share_gpus=partner.gpus)
                queue.remove(job)
                self.alone.remove(partner)
                alone.remove(partner)
                self.pair[job], self.pair[partner] = partner, job
                self.packs += 1
            elif gpus not in no_free and gpus <= engine.cluster.free_gpus and engine.start(job):
                queue.remove(job)
                self._alone(job)
                partners.setdefault(gpus, []).append(job)
            else:
                no_free.add(gpus)
                continue  # the class is done for this pass
            self._starts += 1
            started[job] = self._starts
            if (nxt := queue.next_in(heap)) is not None:
                heappush(heads, (nxt, heap))
        self.dirty.clear()

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        self._started.pop(job, None)
        super().on_finish(engine, job)

    def choose(self, engine: PolicyEngine, entry: tuple, wl: tuple, targets: list) -> int | None:
        """Time-aware affine pair: same GPU count (by construction), priority within ``priority_ratio``,
        scores and memory compatible; the earliest-started such class head."""
        job, limit = entry[3], entry[0] / self.params.priority_ratio
        best, best_key = None, None
        for i, (head, twl) in enumerate(targets):
            target = head[3]
            key = (target.last_start, target.index)
            if -head[0] >= limit and (best is None or key < best_key) and self.fits(engine, job, wl, target, twl):
                best, best_key = i, key
        return best

    def fits(self, engine: PolicyEngine, job: Job, wl: tuple, target: Job, twl: tuple) -> bool:
        if (ok := self._compatible.get(key := (wl, twl))) is None:
            ok = self._compatible[key] = (
                self.score(engine, job) + self.score(engine, target) <= self.params.max_pair_score
                and engine.can_share(job, target)
            )
        return ok

    def score(self, engine: PolicyEngine, job: Job) -> int:
        """Lucid's sharing score of the job's workload: its mean speed 1/ξ beside every catalog workload."""
        if (score := self._score.get(wl := workload(job))) is None:
            if (sharing := engine.sharing) is None:
                raise RuntimeError("lucid needs a sharing model (replay builds one)")
            if self._probes is None:  # the profile's partners: every annotatable catalog workload and batch size
                catalog = sharing.catalog
                self._probes = [
                    Job(f"probe:{m}:{b}", 0.0, 1, 1.0, model=m, batch_size=float(b))
                    for m in catalog.annotated_models for b in catalog.workload(m).batch_sizes
                ]
            speed = sum(1.0 / sharing.ratio(job, probe, "timeslice")[0] for probe in self._probes) / len(self._probes)
            low, high = self.params.score_speeds
            score = self._score[wl] = 2 if speed < low else 1 if speed < high else 0
        return score
