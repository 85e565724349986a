"""``tiresias``: discretized two-dimensional least-attained-service (2D-LAS), Tiresias §3.2.

A job's attained service is GPUs x time it has run. Jobs sit in K priority queues split at
``queue_thresholds`` (GPU-seconds); a running job is demoted each time its service crosses its
queue's threshold (a timer event, not a tick; re-armed in the next queue, so a job walks down every
queue: earlier, a running job was demoted once only, a bug in both readings below). Jobs are
served queue by queue, greedily while GPUs remain (a job that does not fit is skipped); running jobs
that fall outside that set are preempted (they keep their progress and pay the checkpoint-restore
overhead on restart).

Two readings (``semantics``) of the order within a queue and of starvation promotion:

- ``code`` (default): what the authors' simulator does (github.com/SymbioticLab/Tiresias,
  ``simulator/run_sim.py``, ``dlas_sim_jobs``), which every later paper comparing with Tiresias ran.
  A queue is a list: arrivals, demotions and promotions join its end; after each pass its running
  jobs are moved ahead of its pending ones (each part keeping its order), so a preempted job heads
  the pending part and a running job is never preempted by an older pending job of its own queue.
  Promotion (``promote_knob`` > 0): a pending job below the top queue goes back to the top queue's end
  once its pending time since its last promotion (counted while it has run since then) reaches
  ``promote_knob`` x its run time since then; its service counts afresh. The moves of one instant
  happen after its arrivals, in submission order.
- ``paper``: the literal reading of §3.2 (schedlab's earlier behaviour): each queue is served
  in submission order (an older waiting job preempts a younger running one of its queue); a job
  waiting longer than ``promote_knob`` x its total run time since its last preemption is promoted to
  the top queue from any queue.

With one threshold and no promotion both readings differ only in the order within a queue.
Defaults: two queues split at 3,600 GPU-seconds (the example in the simulator's README). The promote
knob (0 turns promotion off) defaults to what each reading ran: 0 with ``code`` (the simulator's
``dlas-gpu``, the schedule its README and run script use; ``dlas-gpu-8`` is knob 8), 8 with ``paper``
(schedlab's earlier choice; the paper leaves it to the operator).
The simulator's demotion and its clock tick in whole seconds; ``code`` demotes at the first whole
second at or after the crossing (the same instant for every job whose GPU count divides the threshold).
``blocking: true`` (an option of ours, off by default) makes the first job in serving order that does
not fit end the pass, as strict FIFO does; the authors' simulator and the default skip it (the Castor and SJF-BSBF papers' Tiresias is close to their FIFO, which skipping cannot explain).
Simplified: no placement-aware consolidation switch (Tiresias §4, "profile-based placement"): every
job uses the engine's placement strategy.

Mode (``mode``): ``las`` is the above; ``tuned-jobs`` is the study's Tiresias+TunedJobs
(``tiresias_tuned.py``: 60 s rounds, one threshold at 16 GPU-hours, no promotion, skip-if-not-fit,
30 s stall per allocation change); ``auto`` (default) picks ``tuned-jobs`` for goodput workloads
(``--format pollux``) and ``las`` otherwise. In ``tuned-jobs`` mode ``queue_thresholds`` and
``promote_knob`` keep the study's values unless set explicitly.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schedlab.sched.policies.base import Policy
from schedlab.sched.policies.tiresias_tuned import STUDY_THRESHOLD_GPU_S, TunedJobsMode
from schedlab.sched.policies.queues import LevelQueues

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job

PAPER_PROMOTE_KNOB = 8.0  # semantics paper's default knob: our earlier choice (the paper leaves it open)


class TiresiasParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue_thresholds: list[float] = Field(default=[3600.0], description="GPU-seconds, ascending")
    promote_knob: float | None = Field(
        default=None, ge=0, description="0: no promotion; default: 0 with semantics code, 8 with paper"
    )
    semantics: Literal["code", "paper"] = Field(
        default="code",
        description="code: the authors' simulator (queue order, promotion); paper: the literal §3.2 reading",
    )
    blocking: bool = Field(
        default=False, description="las mode: the first job in serving order that does not fit ends the pass"
        " (strict FIFO's head-of-line blocking) instead of being skipped (the authors' simulator skips)")
    mode: Literal["auto", "las", "tuned-jobs"] = Field(
        default="auto", description="tuned-jobs: Pollux study's Tiresias+TunedJobs; auto: it for goodput workloads"
    )
    round_s: float = Field(default=60.0, gt=0, description="tuned-jobs mode: round length")
    event_driven: bool = Field(default=False, description="tuned-jobs mode: also decide at arrivals/completions")


class Tiresias(Policy):
    name = "tiresias"
    summary = "discretized 2D-LAS with preemption and starvation promotion"
    paper = "Tiresias (NSDI'19) §3.2; baseline in Castor §9.1, SJF-BSBF §VI-A; mode tuned-jobs: Pollux §5.3"
    simplified = "placement uses the engine's strategy (no profile-based consolidation decision)"
    Params = TiresiasParams
    waits_when_refused = True  # chosen by counting GPUs; one the placement refuses waits for the next event

    def __init__(self, params: TiresiasParams | None = None) -> None:
        super().__init__(params)
        thresholds = self.params.queue_thresholds
        if thresholds != sorted(thresholds) or any(t <= 0 for t in thresholds):
            raise ValueError(f"tiresias: queue_thresholds must be positive and ascending, got {thresholds}")
        self.limits = [*thresholds, float("inf")]
        self.code = self.params.semantics == "code"
        knob = self.params.promote_knob
        self.knob = knob if knob is not None else (0.0 if self.code else PAPER_PROMOTE_KNOB)
        # paper: one level per queue, keyed by job index (submission order). code: two levels per queue,
        # 2q (its running part) and 2q+1 (the rest), keyed by the order of entering them (see _settle)
        self.queues = LevelQueues(2 * len(self.limits) if self.code else len(self.limits))
        self.jobs: dict[int, Job] = {}  # by key in self.queues (the job index in paper semantics)
        self.key: dict[int, int] = {}  # code: job index -> its key
        self.next_back = 0  # code: the next key at a level's end (grows)
        self.next_front = -1  # code: the next key at a level's front (shrinks)
        self.moves: list[tuple[int, str, Job]] = []  # code: demotions and promotions due at this instant
        self.overdue: list[Job] = []  # code: preempted already past their promotion time (next event)
        self.promo_run: dict[int, float] = {}  # code: run time at the last promotion (or 0)
        self.pending_s: dict[int, float] = {}  # code: pending time counted towards promotion
        self.pending_since: dict[int, float] = {}  # code: start of the pending stretch being counted
        self.service_base: dict[int, float] = {}  # service at which the job entered queue 0 / was promoted
        self.start_order: dict[int, int] = {}  # key -> count of starts when it last started (engine.running order)
        self.starts = 0
        self.dirty = False  # whether the queues changed since the last pass (else the choice stands)
        self.tuned: TunedJobsMode | None = None
        if self.params.mode == "tuned-jobs":
            self._tuned_jobs()

    # ---- Tiresias+TunedJobs (Pollux's study): a separate mode, delegated to ---------------------
    def for_goodput_jobs(self) -> None:
        if self.params.mode == "auto":
            self._tuned_jobs()

    def _tuned_jobs(self) -> None:
        if self.params.blocking:
            raise ValueError("tiresias: blocking applies to 2D-LAS (mode las), not to Tiresias+TunedJobs")
        given = self.params.model_fields_set
        self.tuned = TunedJobsMode(
            self.params.queue_thresholds if "queue_thresholds" in given else [STUDY_THRESHOLD_GPU_S],
            self.params.promote_knob if self.params.promote_knob is not None else 0.0,
            self.params.round_s,
            self.params.event_driven,
        )
        self.default_allocation_stall_s = self.tuned.default_allocation_stall_s
        self.default_preemption_overhead_s = self.tuned.default_preemption_overhead_s

    # ---- 2D-LAS ---------------------------------------------------------------------------------
    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        if self.tuned:
            return self.tuned.on_arrival(engine, job)
        index = job.index
        self.service_base[index] = 0.0
        if self.code:
            key = self.key[index] = self.next_back
            self.next_back += 1
            self.promo_run[index] = 0.0
            self.pending_s[index] = 0.0
            self.queues.add(key, job.num_gpus, 1, False)  # the end of queue 0's pending part
        else:
            key = index
            self.queues.add(key, job.num_gpus, 0, False)  # not running
        self.jobs[key] = job
        self.dirty = True

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        if self.tuned:
            return self.tuned.on_finish(engine, job)
        index = job.index
        key = self.key.pop(index) if self.code else index
        self.queues.remove(key, running=True)
        del self.jobs[key], self.service_base[index], self.start_order[key]
        if self.code:
            del self.promo_run[index], self.pending_s[index]
            self.pending_since.pop(index, None)
        self.dirty = True

    def on_timer(self, engine: PolicyEngine, payload: Any) -> None:
        if self.tuned:
            return self.tuned.on_timer(engine, payload)
        action, job, version = payload
        if engine.version_of(job) != version or job.end_time == job.end_time:  # stale, or finished (end_time not NaN)
            return
        if self.code:  # applied at the pass, after this instant's arrivals (as the simulator does)
            self.moves.append((job.index, action, job))
            self.dirty = True
        elif action == "demote" and job.gpus:  # running
            level = self.queues.level[job.index] + 1
            self._move(job, level)
            if self.limits[level] != math.inf:  # the last queue has no demotion
                self._arm_demotion(engine, job, self.limits[level])
        elif action == "promote" and not job.gpus:
            self.service_base[job.index] = engine.attained_service(job)
            self._move(job, 0)

    def schedule(self, engine: PolicyEngine) -> None:
        """Serve the queues greedily (queue by queue, in each queue's order) while GPUs remain; preempt
        the running jobs left out (in the order they started), then start the chosen ones (serving order)."""
        if self.tuned:
            return self.tuned.schedule(engine)
        if not self.dirty:
            return  # same queues, same choice: it is already running
        self.dirty = False
        if self.code and (self.moves or self.overdue):
            self._apply_moves(engine)
        jobs, start_order = self.jobs, self.start_order
        start, stop = self.queues.switch(engine.cluster.total_gpus, self.params.blocking)  # marks them too
        if stop:
            stop.sort(key=start_order.__getitem__)
            knob, preempt, now = self.knob, engine.preempt, engine.now
            for key in stop:
                job = jobs[key]
                preempt(job)
                if knob > 0:
                    if self.code:
                        self._arm_promotion(engine, job, key)
                    else:
                        engine.set_timer(now + knob * job.run_time, ("promote", job, engine.version_of(job)))
        if start:
            level, limits, starts, inf, code = self.queues.level, self.limits, self.starts, math.inf, self.code
            pending_since, pending_s, now = self.pending_since, self.pending_s, engine.now
            for key in start:
                job = jobs[key]
                if not engine.start(job):  # a strict placement refused it: it waits for the next pass
                    self._refused(key, job)
                    continue
                starts += 1
                start_order[key] = starts
                if code:
                    since = pending_since.pop(job.index, None)
                    if since is not None:
                        pending_s[job.index] += now - since
                    limit = limits[level[key] >> 1]
                else:
                    limit = limits[level[key]]
                if limit != inf:  # the last queue has no demotion
                    self._arm_demotion(engine, job, limit)
            self.starts = starts
        if self.code:  # also without starts or stops: a job demoted while running joins its running part
            self._settle()

    def _refused(self, key: int, job: Job) -> None:
        """A chosen job the placement strategy could not place (free GPUs too fragmented for
        ``strict-consolidated``): back to waiting in its level, and the next pass chooses again. The
        choice counts GPUs, as the Tiresias simulator's ``dlas-gpu`` does (it never consults its
        placement scheme), so the GPUs counted for the job stay idle until then."""
        level = self.queues.level[key]
        self.queues.remove(key, running=True)
        self.queues.add(key, job.num_gpus, level, False)
        self.dirty = True

    # ---- code semantics: each queue's order ------------------------------------------------------
    def _settle(self) -> None:
        """After a pass, move each queue's running jobs ahead of its pending ones, each part in its
        order (the simulator's re-sort of its queue lists): the preempted jobs of the running part go
        to the front of the pending part, the running jobs of the pending part (just started, or
        demoted while running) to the end of the running part."""
        levels = self.queues.levels
        for q in range(0, len(levels), 2):
            ran, rest = levels[q], levels[q + 1]
            if ran.waiting:
                keys = list(ran.waiting)
                for key in reversed(keys):  # the last gets the front first: the part keeps its order
                    self._rekey(key, self.next_front, q + 1, False)
                    self.next_front -= 1
            if rest.running:
                for key in list(rest.running):
                    self._rekey(key, self.next_back, q, True)
                    self.next_back += 1

    def _rekey(self, key: int, new: int, level: int, running: bool) -> None:
        queues = self.queues
        gpus = queues.gpus[key]
        queues.remove(key, running)
        queues.add(new, gpus, level, running)
        job = self.jobs.pop(key)
        self.jobs[new] = job
        self.key[job.index] = new
        order = self.start_order.pop(key, None)
        if running:
            self.start_order[new] = order

    def _apply_moves(self, engine: PolicyEngine) -> None:
        """This instant's demotions and promotions (and promotions overdue since the last one), in
        submission order, each to the end of its new queue's pending part (a running job moves to the
        running part at the pass's end)."""
        moves = self.moves
        moves += [(job.index, "promote", job) for job in self.overdue if job.index in self.key]
        self.overdue = []
        moves.sort(key=lambda move: move[0])
        level = self.queues.level
        for index, action, job in moves:
            key = self.key.get(index)
            if key is None:  # finished at this instant
                continue
            if action == "demote":
                if not job.gpus:
                    continue
                queue = (level[key] >> 1) + 1
                self._rekey(key, self.next_back, 2 * queue + 1, True)
                self.next_back += 1
                if self.limits[queue] != math.inf:
                    self._arm_demotion(engine, job, self.limits[queue])
            elif not job.gpus and level[key] > 1:  # promote a pending job below the top queue
                self._rekey(key, self.next_back, 1, False)
                self.next_back += 1
                self.service_base[index] = engine.attained_service(job)
                self.promo_run[index] = job.run_time
                self.pending_s[index] = 0.0
                self.pending_since.pop(index, None)  # counted again once it has run since
        self.moves = []

    def _arm_promotion(self, engine: PolicyEngine, job: Job, key: int) -> None:
        """A just-preempted job: when its pending time since its last promotion (counted while it has
        run since) reaches ``promote_knob`` x its run time since then, it goes back to the top queue."""
        index = job.index
        ran = job.run_time - self.promo_run[index]
        if ran <= 0.0:
            return
        self.pending_since[index] = engine.now
        if self.queues.level[key] <= 1:  # in the top queue: no promotion (the pending time still counts)
            return
        due = self.knob * ran - self.pending_s[index]
        if due > 0.0:
            engine.set_timer(engine.now + due, ("promote", job, engine.version_of(job)))
        else:  # the simulator checks pending jobs at every event: promoted at the next one
            self.overdue.append(job)

    # ---- both ------------------------------------------------------------------------------------
    def _arm_demotion(self, engine: PolicyEngine, job: Job, limit: float) -> None:
        """A timer for when the running job's service in its queue reaches ``limit``."""
        left = limit - (engine.attained_service(job) - self.service_base[job.index])
        wait = (left if left > 0.0 else 0.0) / job.num_gpus  # noqa: FURB136 (max(0, left) without the call)
        if self.code:  # the simulator's clock ticks in whole seconds: the first tick at or after the crossing
            wait = math.ceil(wait - 1e-9)
        engine.set_timer(engine.now + wait, ("demote", job, engine.version_of(job)))

    def _move(self, job: Job, level: int) -> None:
        """Paper semantics: to ``level``, in submission order there."""
        running = bool(job.gpus)
        self.queues.remove(job.index, running)
        self.queues.add(job.index, job.num_gpus, level, running)
        self.dirty = True
