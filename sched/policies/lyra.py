"""``lyra``: Lyra's job scheduler (Lyra EuroSys'23 §5; specs/lyra.md §2).

Two phases (§5.2). **Phase 1**, at every event: inelastic jobs and the *base* demands of elastic jobs
by SJF with skipping — the pending job with the shortest running time (an elastic job's at its
base) whose demand fits the idle GPUs plus the GPUs held by flexible workers is started; flexible
workers are scaled in to make room (never a preemption). **Phase 2**, at most every
``rescale_interval_s`` (a timer, specs/lyra.md §6 A1): the GPUs left over plus all flexible GPUs
are shared among the running elastic jobs by the multiple-choice knapsack (``sched/mckp.py``): job
``j``'s item ``k`` is ``k`` more workers, weight ``k g`` GPUs, value ``T_j(base) - T_j(base + k g)``
with ``T`` the remaining run time (§6 A8); chosen workers that cannot be placed are trimmed.
Placement is best-fit decreasing by workers (``sched/bfd.py``, §5.3): inelastic workers of
``min(d, 8)`` GPUs, elastic ones of ``elastic_gpus_per_worker``; flexible workers go to servers
apart from base workers where the pools allow (the flexible group).

Elastic jobs scale linearly in their range (``sched/scaling.py``), or with the job's
``scaling_loss`` (20 %: imperfect scaling, §7.2); goodput jobs (``tuned_jobs``: Lyra+TunedJobs,
§7.4) use their goodput model's speed-up at the goodput-optimal batch, which the job's agent
re-tunes at every allocation change. ``elastic: false`` runs elastic jobs at their base (Table 5's
loaning-only rows); ``loaning`` and ``reclaim`` choose capacity loaning when the cluster has an
inference pool (specs/lyra.md §1).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from schedlab.sched import bfd
from schedlab.sched.mckp import solve, solve_concave
from schedlab.sched.policies.base import Policy
from schedlab.sched.scaling import run_time
from sortedcontainers import SortedList

if TYPE_CHECKING:
    from schedlab.sched.engine import Engine
    from schedlab.sched.job import Job


class LyraParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    elastic: bool = Field(default=True, description="elastic scaling (phase 2); false = elastic jobs run at their base")
    loaning: bool = Field(default=True, description="borrow inference servers when the cluster has an inference pool")
    reclaim: Literal["lyra", "scf", "random"] = Field(default="lyra", description="which loaned servers to return")
    rescale_interval_s: float = Field(default=60.0, ge=0, description="phase 2 at most this often (0: every event)")
    elastic_gpus_per_worker: int = Field(default=1, ge=1, le=8, description="GPUs per elastic worker")
    inelastic_worker_gpus: int = Field(default=8, ge=1, description="an inelastic job's workers: min(d, this) GPUs")
    tuned_jobs: bool = Field(default=False, description="goodput jobs re-tune their batch at every allocation change")


class Lyra(Policy):
    name = "lyra"
    summary = "SJF over inelastic and base demands, then flexible workers by a multiple-choice knapsack (DP); BFD"
    paper = "Lyra (EuroSys'23) §5.2-5.3 (specs/lyra.md §2)"
    simplified = ("running times known exactly (oracle); scaling costs no time (the paper's simulator); phase 2 at"
                  " most every 60 s; a worker no server holds is spread (the baselines' placement does too)")
    Params = LyraParams
    default_preemption_overhead_s = 63.0  # Lyra §7.5

    def __init__(self, params: LyraParams | None = None) -> None:
        super().__init__(params)
        self.pending: dict[int, SortedList] = {}  # base demand -> (key, index, job), shortest first
        self.elastic_running: dict[Job, None] = {}
        self.flex_gpus = 0  # GPUs held by flexible workers, all jobs
        self._rescale_due = False
        self._last_rescale = -float("inf")
        self._timer_at: float | None = None
        self.solve_times: list[float] = []
        self.mckp_items_max = 0
        self.trimmed_workers = 0
        self.scale_ins = 0
        self.scale_outs = 0

    # ---- bookkeeping -----------------------------------------------------------------------
    def is_elastic(self, job: Job) -> bool:
        return self.params.elastic and job.elastic_max > job.elastic_min > 0

    def base(self, job: Job) -> int:
        return job.elastic_min if self.is_elastic(job) else job.requested_gpus

    def on_arrival(self, engine: Engine, job: Job) -> None:
        self._enqueue(job)

    def _enqueue(self, job: Job) -> None:
        key = job.remaining  # base-seconds: the run time at the base (elastic) or at d GPUs
        self.pending.setdefault(self.base(job), SortedList()).add((key, job.index, job))
        self._rescale_due = True

    def on_finish(self, engine: Engine, job: Job) -> None:
        if job in self.elastic_running:
            del self.elastic_running[job]
            self.flex_gpus -= job.num_gpus - job.elastic_min
        self._rescale_due = True

    def on_timer(self, engine: Engine, payload: Any) -> None:
        if payload == ("lyra-rescale", self._timer_at):
            self._timer_at = None

    def metrics(self) -> dict[str, float]:
        times = self.solve_times or [0.0]
        return {"scale_in_ops": self.scale_ins, "scale_out_ops": self.scale_outs,
                "mckp_solves": len(self.solve_times), "mckp_max_solve_s": max(times),
                "mckp_mean_solve_s": sum(times) / len(times), "mckp_max_items": self.mckp_items_max,
                "mckp_trimmed_workers": self.trimmed_workers}

    # ---- a pass ----------------------------------------------------------------------------
    def schedule(self, engine: Engine) -> None:
        started = self.phase1(engine)
        if not self.params.elastic or not self.elastic_running:
            return
        self._rescale_due = self._rescale_due or started
        if not self._rescale_due:
            return
        interval = self.params.rescale_interval_s
        if engine.now - self._last_rescale >= interval:
            self._rescale_due = False
            self._last_rescale = engine.now
            self.phase2(engine)
        elif self._timer_at is None:
            self._timer_at = self._last_rescale + interval
            engine.set_timer(self._timer_at, ("lyra-rescale", self._timer_at))

    def phase1(self, engine: Engine) -> bool:
        """SJF with skipping over pending jobs' base demands; returns whether anything started."""
        cluster = engine.cluster
        skipped: list[tuple[float, int, Job]] = []
        started = False
        while True:
            avail = cluster.free_gpus + self.flex_gpus
            best = None
            for demand, queue in self.pending.items():
                if demand <= avail and queue and (best is None or queue[0] < best):
                    best = queue[0]
            if best is None:
                break
            job = best[2]
            self.pending[self.base(job)].remove(best)
            if self._start(engine, job):
                started = True
            else:
                skipped.append(best)
        for entry in skipped:
            self.pending[self.base(entry[2])].add(entry)
        return started

    def _start(self, engine: Engine, job: Job) -> bool:
        demand = self.base(job)
        if demand > engine.cluster.free_gpus:
            self._scale_in_for(engine, demand - engine.cluster.free_gpus)
        per = engine.cluster.gpus_per_server
        free = [len(stack) for stack in engine.cluster.free_by_server]
        size = self.params.elastic_gpus_per_worker if self.is_elastic(job) else self.params.inelastic_worker_gpus
        where = bfd.place(free, bfd.workers_of(demand, min(size, per)), self._tiers(engine, job, flexible=False), per)
        if where is None:
            return False
        if not engine.start(job, sorted(where.items()), num_gpus=demand):
            return False
        if self.is_elastic(job):
            self.elastic_running[job] = None
        if self.params.tuned_jobs and job.goodput is not None:
            self._tune(engine, job)
        return True

    def _tiers(self, engine: Engine, job: Job, flexible: bool) -> list[list[int]]:
        """Servers in preference order for a job's base (or flexible) workers (§5.3)."""
        return [list(range(engine.cluster.num_servers))]

    def _scale_in_for(self, engine: Engine, gpus: int) -> None:
        """Release ``gpus`` flexible GPUs: from the jobs whose last workers are worth least first."""
        def loss(job: Job) -> float:  # remaining-time increase per GPU of losing one worker
            g = self.params.elastic_gpus_per_worker
            rem = engine.remaining(job)
            return (run_time(job, rem, job.num_gpus - g) - run_time(job, rem, job.num_gpus)) / g
        for job in sorted((j for j in self.elastic_running if j.num_gpus > j.elastic_min), key=lambda j: (loss(j), j.index)):
            if gpus <= 0:
                break
            cut = min(gpus, job.num_gpus - job.elastic_min)
            self._resize(engine, job, job.num_gpus - cut)
            gpus -= cut

    def _resize(self, engine: Engine, job: Job, gpus: int, placement: list[tuple[int, int]] | None = None) -> bool:
        before = job.num_gpus
        if gpus == before or not engine.resize(job, gpus, placement=placement):
            return False
        self.flex_gpus += gpus - before
        if gpus > before:
            self.scale_outs += 1
        else:
            self.scale_ins += 1
        if self.params.tuned_jobs and job.goodput is not None:
            self._tune(engine, job)
        return True

    # ---- phase 2 ----------------------------------------------------------------------------
    def phase2(self, engine: Engine) -> None:
        g = self.params.elastic_gpus_per_worker
        jobs = list(self.elastic_running)
        capacity = engine.cluster.free_gpus + self.flex_gpus
        sizes = [(job.elastic_max - job.elastic_min) // g for job in jobs]
        self.mckp_items_max = max(self.mckp_items_max, sum(sizes))
        if capacity >= sum(sizes) * g:
            choice = sizes  # room for every flexible worker
        elif any(job.goodput is not None for job in jobs):
            groups = [self._items(engine, job, k) for job, k in zip(jobs, sizes)]
            t0 = time.perf_counter()
            choice = list(solve(groups, capacity).choice)
            self.solve_times.append(time.perf_counter() - t0)
        else:
            t0 = time.perf_counter()
            choice = self._concave_choice(engine, jobs, sizes, capacity // g).tolist()
            self.solve_times.append(time.perf_counter() - t0)
        targets = {job: job.elastic_min + k * g for job, k in zip(jobs, choice)}
        for job, target in targets.items():  # scale in first: it frees GPUs for the others
            if target < job.num_gpus:
                self._resize(engine, job, target)
        per = engine.cluster.gpus_per_server
        free = [len(stack) for stack in engine.cluster.free_by_server]
        for job, target in targets.items():
            extra = target - job.num_gpus
            while extra > 0:
                where = bfd.place(free, [g] * (extra // g), self._own_first(engine, job), per)
                if where is not None:
                    self._resize(engine, job, target, sorted(where.items()))
                    break
                extra -= g  # trim what cannot be placed (specs/lyra.md §2.4)
                target -= g
                self.trimmed_workers += 1

    def _concave_choice(self, engine: Engine, jobs: list[Job], sizes: list[int], units: int) -> np.ndarray:
        """The exact MCKP optimum for linearly (or imperfectly) scaling jobs, whose values are concave
        in the extra workers: the largest marginal savings (``mckp.solve_concave``), vectorised."""
        g = self.params.elastic_gpus_per_worker
        counts = np.asarray(sizes)
        group = np.repeat(np.arange(len(jobs)), counts)
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        w = (np.arange(len(group)) - starts + 1) * g  # extra GPUs of each item
        rem = np.array([engine.remaining(job) for job in jobs])[group]
        lo = np.array([job.elastic_min for job in jobs], dtype=float)[group]
        a = np.array([1.0 - job.scaling_loss for job in jobs])[group]
        marginals = rem * lo * (1.0 / (lo + a * (w - g)) - 1.0 / (lo + a * w))
        return solve_concave(marginals, group, len(jobs), units)

    def _items(self, engine: Engine, job: Job, count: int) -> tuple[np.ndarray, np.ndarray]:
        """A job's MCKP group: ``k`` more workers weigh ``k g`` GPUs and are worth the remaining
        run time they save, ``T(base) - T(base + k g)`` (§5.2, specs/lyra.md §6 A8)."""
        g = self.params.elastic_gpus_per_worker
        weights = np.arange(1, count + 1) * g
        rem = engine.remaining(job)
        lo = job.elastic_min
        if job.goodput is None:  # T(w) = rem / speed(w); speed(lo) = 1
            return weights, rem - rem * lo / (lo + (1.0 - job.scaling_loss) * weights)
        t_base = self._time(job, rem, lo)
        return weights, np.array([t_base - self._time(job, rem, lo + w) for w in weights.tolist()])

    def _own_first(self, engine: Engine, job: Job) -> list[list[int]]:
        per = engine.cluster.gpus_per_server
        own = sorted({gpu // per for gpu in job.gpus})
        tiers = self._tiers(engine, job, flexible=True)
        return [own] + [[s for s in tier if s not in own] for tier in tiers]

    def _time(self, job: Job, remaining: float, gpus: int) -> float:
        """T_j(w): remaining run time on ``gpus`` GPUs (goodput jobs: their goodput speed-up)."""
        if job.goodput is None:
            return run_time(job, remaining, gpus)
        return remaining / self._goodput_speedup(job, gpus)

    def _goodput_speedup(self, job: Job, gpus: int) -> float:
        from schedlab.sched.goodput import packed

        model, progress = job.goodput, job.epoch_start
        try:
            base = model.best_batch(packed(job.elastic_min), progress)[1]
            here = model.best_batch(packed(gpus), progress)[1]
        except ValueError:
            return 1e-9
        return max(here / base, 1e-9) if base > 0 else 1e-9

    def _tune(self, engine: Engine, job: Job) -> None:
        """TunedJobs (Pollux's agent in Lyra §7.4): the goodput-optimal batch on the new placement."""
        batch = job.goodput.best_batch(job.placement_shape, job.epoch_start)[0]
        if batch:
            engine.set_batch(job, batch)

    def on_epoch(self, engine: Engine, job: Job) -> None:
        if self.params.tuned_jobs and job.running:
            self._tune(engine, job)
