"""``lyra``: Lyra's job scheduler (Lyra EuroSys'23 §5; docs/explanation/lyra.md).

Two phases (§5.2). **Phase 1**, at every event: inelastic jobs and the *base* demands of elastic jobs
by SJF with skipping — the pending job with the shortest running time (an elastic job's at its
base) whose demand fits the idle GPUs plus the GPUs held by flexible workers is started; flexible
workers are scaled in to make room (never a preemption). **Phase 2**, at most every
``rescale_interval_s`` (a timer, docs/explanation/lyra.md): the GPUs left over plus all flexible GPUs
are shared among the running elastic jobs by the multiple-choice knapsack (``sched/policies/lyra/knapsack.py``): job
``j``'s item ``k`` is ``k`` more workers, weight ``k g`` GPUs, value ``T_j(base) - T_j(base + k g)``
with ``T`` the remaining run time (§6 A8); chosen workers that cannot be placed are trimmed.
Placement is best-fit decreasing by workers (``sched/policies/lyra/bfd.py``, §5.3): inelastic workers of
``min(d, 8)`` GPUs, elastic ones of ``elastic_gpus_per_worker``; flexible workers go to servers
apart from base workers where the pools allow (the flexible group).

Elastic jobs scale linearly in their range (``sched/models/scaling.py``), or with the job's
``scaling_loss`` (20 %: imperfect scaling, §7.2); goodput jobs (``tuned_jobs``: Lyra+TunedJobs,
§7.4) use their goodput model's speed-up at the goodput-optimal batch, which the job's agent
re-tunes at every allocation change. ``elastic: false`` runs elastic jobs at their base (Table 5's
loaning-only rows); ``loaning`` and ``reclaim`` choose capacity loaning when the cluster has an
inference pool (docs/explanation/lyra.md).

Heterogeneous jobs (the table's ``heterogeneous`` column; §2.1, §6, §7.1; docs/explanation/lyra.md), when
loaning: phase 1 considers them "with the lowest priority on the remaining servers after all other
jobs are scheduled" (SJF among themselves, after every other pending job). A job takes one GPU type
when the free GPUs allow (training servers first, else ``ceil(r d)`` T4s on loan: full speed), else
both at once: every free V100 up to its demand plus ``ceil(r x rest)`` T4s, at ``heterogeneous_perf``
(0.7; Ideal 1.0) x normalised GPUs / demand (``sched/core/pools.py``); only then does it scale flexible
workers in, likewise. An elastic one with its base on training servers takes its flexible workers
on on-loan servers (§6), in the on-loan knapsack with values at the mixed speed (a few T4 workers
can be worth less than none); one started on both types stays at its base. A reclaim treats their
workers as any others' (inelastic: preempted; flexible: scaled in). ``preempted_pools: training``
(the default; the paper is silent) sends a job preempted at a reclaim to training servers only, as a
homogeneous job: without a checkpoint it would otherwise restart from zero at every reclaim.

Durations read (``docs/estimates.md``): phase 1's running times (a pending job's remaining work), phase
2's values (each running elastic job's remaining work) and the reclaim's JCT-increase order (each
on-loan job's time to go), true (``knowledge: oracle``) or an estimator's (``knowledge: estimate``).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field
from schedlab.sched.estimators.params import KnowledgeParams
from schedlab.sched.policies.lyra import bfd
from schedlab.sched.policies.lyra.knapsack import concave_counts, solve, solve_concave
from schedlab.sched.policies.base import Policy
from schedlab.sched.policies.lyra.heterogeneous import LOAN, TRAINING, HeterogeneousJobs
from schedlab.sched.core.reclaim import get_strategy as get_reclaim
from schedlab.sched.models.scaling import run_time
from sortedcontainers import SortedList

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job



class LyraParams(KnowledgeParams):
    elastic: bool = Field(default=True, description="elastic scaling (phase 2); false = elastic jobs run at their base")
    loaning: bool = Field(default=True, description="borrow inference servers when the cluster has an inference pool")
    reclaim: Literal["lyra", "scf", "random"] = Field(default="lyra", description="which loaned servers to return")
    rescale_interval_s: float = Field(default=60.0, ge=0, description="phase 2 at most this often (0: every event)")
    elastic_gpus_per_worker: int = Field(default=1, ge=1, le=8, description="GPUs per elastic worker")
    inelastic_worker_gpus: int = Field(default=8, ge=1, description="an inelastic job's workers: min(d, this) GPUs")
    tuned_jobs: bool = Field(default=False, description="goodput jobs re-tune their batch at every allocation change")
    preempted_pools: Literal["training", "any"] = Field(
        default="training", description="where a job preempted at a reclaim may restart: training servers only"
        " (without a checkpoint it would restart at every reclaim; the paper is silent) or any it may use")


class Lyra(HeterogeneousJobs, Policy):
    name = "lyra"
    uses = (frozenset({"inference", "fungible"}), frozenset({"elastic"}), frozenset({"goodput"}))
    falls_back_to = "sjf"  # phase 1 alone: SJF with skipping over whole demands (§5.2)
    summary = "SJF over inelastic and base demands, then flexible workers by a multiple-choice knapsack (DP); BFD"
    paper = "Lyra (EuroSys'23) §5.2-5.3 (docs/explanation/lyra.md)"
    simplified = ("running times known exactly unless knowledge: estimate; scaling costs no time (the paper's simulator); phase 2 at"
                  " most every 60 s; a worker no server holds is spread (the baselines' placement does too); a job"
                  " preempted at a reclaim restarts on training servers only; a heterogeneous job started on"
                  " both types gets no flexible workers")
    Params = LyraParams
    default_preemption_overhead_s = 63.0  # Lyra §7.5

    def __init__(self, params: LyraParams | None = None) -> None:
        super().__init__(params)
        # (pools, base demand) -> (key, index, job), shortest first; a class leaves when it empties
        self.pending: dict[tuple, SortedList] = {}
        self.elastic_running: dict[Job, None] = {}
        self.pool_of_job: dict[Job, int] = {}  # running jobs started by this policy -> pool
        self.base_servers: dict[Job, set[int]] = {}  # elastic job -> servers of its base workers
        self.base_raw: dict[Job, int] = {}  # running elastic job -> its base in its pool's GPUs
        # heterogeneous jobs (§6): pending ones by base demand, scheduled after all others; elastic
        # ones whose base runs on training servers (flexible workers on on-loan servers when possible)
        self.hetero_pending: dict[int, SortedList] = {}
        self.split_base: set[Job] = set()
        self._pool_choices: set[tuple[int, ...]] = set()  # the pool preferences of the pending classes
        self._gain_steps: dict[tuple, list[float]] = {}  # (elastic_min, scaling_loss, items) -> MCKP gain factors
        self._engine: PolicyEngine | None = None
        self.uses_loaning = self.params.loaning  # the orchestrator lends only to a borrowing policy
        self._rescale_due = False
        self._last_rescale = -float("inf")
        self._timer_at: float | None = None
        self.solve_times: list[float] = []
        self.mckp_items_max = 0
        self.trimmed_workers = 0
        self.scale_ins = 0
        self.scale_outs = 0
        self.mixed_starts = 0  # heterogeneous jobs started on training and on-loan GPUs at once
        self._hetero_seen = False

    # ---- bookkeeping -----------------------------------------------------------------------
    def is_elastic(self, job: Job) -> bool:
        return self.params.elastic and job.elastic_max > job.elastic_min > 0

    def base(self, job: Job) -> int:
        return job.elastic_min if self.is_elastic(job) else job.requested_gpus

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        self._engine = self._engine or engine
        self._enqueue(engine, job)

    def _enqueue(self, engine: PolicyEngine, job: Job) -> None:
        key = self.remaining(engine, job)  # base-seconds: the run time at the base (elastic) or at d GPUs
        if self._is_hetero(job):
            self._hetero_seen = True
            self.hetero_pending.setdefault(self.base(job), SortedList()).add((key, job.index, job))
            self._rescale_due = True
            return
        pools = self._pools_for(job)
        self._pool_choices.add(pools)
        self.pending.setdefault((pools, self.base(job)), SortedList()).add((key, job.index, job))
        self._rescale_due = True

    def _forget(self, job: Job) -> None:
        if job in self.elastic_running:
            del self.elastic_running[job]
            self.base_servers.pop(job, None)
            del self.base_raw[job]
            self.split_base.discard(job)
        self.pool_of_job.pop(job, None)

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        self._forget(job)
        self._rescale_due = True

    def on_timer(self, engine: PolicyEngine, payload: Any) -> None:
        if payload == ("lyra-rescale", self._timer_at):
            self._timer_at = None

    def metrics(self) -> dict[str, float]:
        times = self.solve_times or [0.0]
        return {"scale_in_ops": self.scale_ins, "scale_out_ops": self.scale_outs,
                "mckp_solves": len(self.solve_times), "mckp_max_solve_s": max(times),
                "mckp_mean_solve_s": sum(times) / len(times), "mckp_max_items": self.mckp_items_max,
                "mckp_trimmed_workers": self.trimmed_workers,
                **({"mixed_starts": self.mixed_starts} if self._hetero_seen else {})}

    # ---- pools (docs/explanation/lyra.md): training servers, and on-loan servers in T4 GPUs -----
    def _r(self, engine: PolicyEngine) -> float:
        return getattr(engine.cluster, "r", 1.0)

    def _raw(self, engine: PolicyEngine, pool: int, gpus: float) -> int:
        """GPUs of ``pool`` standing for ``gpus`` training GPUs (T4s: ceil(r x gpus))."""
        return int(gpus) if pool == TRAINING else math.ceil(self._r(engine) * gpus - 1e-9)

    def _servers(self, engine: PolicyEngine, pool: int) -> list[int]:
        cluster = engine.cluster
        if pool == LOAN:
            return list(getattr(cluster, "on_loan", ()))
        return list(range(getattr(cluster, "training_servers", cluster.num_servers)))

    def _pools_for(self, job: Job) -> tuple[int, ...]:
        """Elastic jobs prefer on-loan servers (more room to scale in at reclaim), inelastic fungible
        ones training servers; non-fungible jobs run on training servers only (§5.3). A job once
        preempted at a reclaim waits for training servers (``preempted_pools``; the paper is silent):
        without a checkpoint it would restart from zero at every reclaim."""
        if not job.fungible or (job.preemptions and self.params.preempted_pools == "training"):
            return (TRAINING,)
        return (LOAN, TRAINING) if self.is_elastic(job) else (TRAINING, LOAN)

    def _is_hetero(self, job: Job) -> bool:
        """Whether ``job`` is scheduled as a heterogeneous job (§6): it may run on training and on-loan
        GPUs at once, when this policy borrows from an inference pool (and, with ``preempted_pools:
        training``, until a reclaim preempts it)."""
        if not job.heterogeneous or not self.params.loaning:
            return False
        if job.preemptions and self.params.preempted_pools == "training":
            return False
        return self._engine is not None and getattr(self._engine.cluster, "on_loan", None) is not None

    def _flex(self, engine: PolicyEngine, job: Job) -> int:
        """GPUs the job holds beyond its base (in its pool's GPUs): what scaling in may take."""
        return job.num_gpus - self.base_raw[job]

    def _flex_by_pool(self) -> list[int]:
        """Flexible GPUs of the running elastic jobs, per pool."""
        flex = [0, 0]
        pool_of, base = self.pool_of_job, self.base_raw
        for j in self.elastic_running:
            flex[pool_of[j]] += j.num_gpus - base[j]
        return flex

    def _free_in(self, cluster: Any, pool: int) -> int:
        """Free GPUs of ``pool`` (O(1): the cluster's counters)."""
        loan_free = cluster.loan_free_gpus if getattr(cluster, "on_loan", None) is not None else 0
        return loan_free if pool == LOAN else cluster.free_gpus - loan_free

    def _slack(self, job: Job) -> int:
        return self._flex(self._engine, job) if job in self.elastic_running else 0

    # ---- a pass ----------------------------------------------------------------------------
    def schedule(self, engine: PolicyEngine) -> None:
        orchestrator = getattr(engine, "orchestrator", None)
        if orchestrator is not None and orchestrator.slack != self._slack:
            orchestrator.slack = self._slack  # a job may lose its flexible workers, never its base
        self._engine = engine
        started = self.phase1(engine)
        if not self.params.elastic or not self.elastic_running:
            return
        self._rescale_due = self._rescale_due or started
        if not self._rescale_due:
            return
        interval, now, last = self.params.rescale_interval_s, engine.now, self._last_rescale
        # the second test is the timer's own sum: ``now - last`` may round below the interval at the
        # time ``last + interval`` the timer fires (131081.43160867185 - 131021.43160867186 < 60), which
        # used to set the same timer again and again at one instant, forever
        if now - last >= interval or now >= last + interval:
            self._rescale_due = False
            self._last_rescale = now
            self.phase2(engine)
        elif self._timer_at is None:
            self._timer_at = last + interval
            engine.set_timer(self._timer_at, ("lyra-rescale", self._timer_at))

    def phase1(self, engine: PolicyEngine) -> bool:
        """SJF with skipping over pending jobs' base demands; returns whether anything started.

        A start that fails without changing anything (no scale-in) fails again for every job of the
        same class and elasticity until something starts: those are skipped without trying."""
        cluster = engine.cluster
        r = self._r(engine)
        skipped: list[tuple[tuple, tuple[float, int, Job]]] = []
        failed: set[tuple] = set()
        started = False
        cap = None
        heads = {cls: queue[0] for cls, queue in self.pending.items()}  # each class's shortest job
        while heads:
            if cap is None:
                flex = self._flex_by_pool()
                cap = (self._free_in(cluster, TRAINING) + flex[TRAINING], (self._free_in(cluster, LOAN) + flex[LOAN]) / r)
                either = max(cap[TRAINING], cap[LOAN]) + 1e-9
                room = {pools: cap[pools[0]] + 1e-9 if len(pools) == 1 else either for pools in self._pool_choices}
            best = best_class = None
            for cls, head in heads.items():
                if cls[1] <= room[cls[0]] and (best is None or head < best):
                    best, best_class = head, cls
            if best is None:
                break
            queue = self.pending[best_class]
            del queue[0]
            if queue:
                heads[best_class] = queue[0]
            else:
                del heads[best_class], self.pending[best_class]
            job = best[2]
            memo = (best_class, self.is_elastic(job))
            if memo in failed:
                skipped.append((best_class, best))
                continue
            scale_ins = self.scale_ins
            if self._start(engine, job, flex):
                started = True
                failed.clear()
                cap = None
            else:
                skipped.append((best_class, best))
                if self.scale_ins != scale_ins:  # the failed start scaled jobs in: state changed
                    failed.clear()
                    cap = None
                else:
                    failed.add(memo)
        for cls, entry in skipped:
            self.pending.setdefault(cls, SortedList()).add(entry)
        if self.hetero_pending:
            started = self._phase1_hetero(engine) or started
        return started

    def _start(self, engine: PolicyEngine, job: Job, flex: list[int] | None = None) -> bool:
        flex = flex if flex is not None else self._flex_by_pool()
        return any(self._start_in(engine, job, pool, flex) for pool in self._pools_for(job))

    def _start_in(self, engine: PolicyEngine, job: Job, pool: int, flex: list[int]) -> bool:
        """Start ``job``'s base on servers of ``pool`` (BFD), scaling flexible workers there in if needed."""
        demand = self.base(job)
        cluster = engine.cluster
        per = cluster.gpus_per_server
        elastic = self.is_elastic(job)
        need = self._raw(engine, pool, demand)
        free_here = self._free_in(cluster, pool)
        if need > free_here + flex[pool]:
            return False
        if need > free_here:
            self._scale_in_for(engine, pool, need - free_here)
        servers = self._servers(engine, pool)
        free_by_server = cluster.free_by_server
        free = dict(zip(servers, map(len, [free_by_server[s] for s in servers])))
        workers = bfd.workers_of(need, min(self._raw(engine, pool, self._worker_size(job)), per))
        where = bfd.place(free, workers, self._base_tiers(engine, pool, servers), per,
                          available=self._free_in(cluster, pool))
        if where is None or not engine.start(job, sorted(where.items()), num_gpus=need):
            return False
        self.pool_of_job[job] = pool
        if elastic:
            self.elastic_running[job] = None
            self.base_raw[job] = self._raw(engine, pool, job.elastic_min)
            self.base_servers[job] = set(where)
        if self.params.tuned_jobs and job.goodput is not None:
            self._tune(engine, job)
        return True

    def _worker_size(self, job: Job) -> int:
        return self.params.elastic_gpus_per_worker if self.is_elastic(job) else self.params.inelastic_worker_gpus

    def _base_hosts(self) -> set[int]:
        return set().union(*self.base_servers.values()) if self.base_servers else set()

    def _base_tiers(self, engine: PolicyEngine, pool: int, servers: list[int]) -> list[list[int]]:
        """Base workers on on-loan servers keep apart from the flexible group (§5.3): servers that
        hold base workers or nothing first."""
        if pool == TRAINING:
            return [servers]
        hosts = self._base_hosts()
        per = engine.cluster.gpus_per_server
        free_by_server = engine.cluster.free_by_server
        first, rest = [], []
        for s in servers:
            (first if s in hosts or len(free_by_server[s]) == per else rest).append(s)
        return [first, rest]

    def _flex_tiers(self, engine: PolicyEngine, job: Job, servers: list[int] | None = None,
                    apart: list[int] | None = None) -> list[list[int]]:
        """Flexible workers: the job's own non-base servers, then (on loan) servers apart from every
        job's base workers (the flexible group, ``apart`` if known), then the rest of the pool."""
        pool = self.pool_of_job[job]
        per = engine.cluster.gpus_per_server
        servers = servers if servers is not None else self._servers(engine, pool)
        held = {g // per for g in job.gpus}
        own = sorted(held - self.base_servers.get(job, set()))
        if pool == TRAINING:
            return [own, sorted(held), servers]
        if apart is None:
            hosts = self._base_hosts()
            apart = [s for s in servers if s not in hosts]
        return [own, apart, servers]

    def _release_order(self, engine: PolicyEngine, job: Job, count: int) -> tuple[int, ...]:
        """GPUs a shrinking job gives back: those off its base servers first (§5.3)."""
        per = engine.cluster.gpus_per_server
        base = self.base_servers.get(job, set())
        ordered = sorted(job.gpus, key=lambda g: (g // per in base, -g))
        return tuple(ordered[:count])

    def _scale_in_for(self, engine: PolicyEngine, pool: int, gpus: int) -> None:
        """Release ``gpus`` flexible GPUs of ``pool``: from the jobs whose last workers are worth least."""
        g = self.params.elastic_gpus_per_worker
        per_gpu = self._r(engine) if pool == LOAN else 1.0
        base, pool_of = self.base_raw, self.pool_of_job

        def loss(job: Job) -> float:  # remaining-time increase per GPU of losing one worker
            rem = self.remaining(engine, job)
            lo = job.elastic_min
            now = lo + (job.num_gpus - base[job]) / per_gpu
            return (run_time(job, rem, max(lo, now - g)) - run_time(job, rem, now)) / g
        jobs = [j for j in self.elastic_running if pool_of[j] == pool and j.num_gpus > base[j]]
        for job in sorted(jobs, key=lambda j: (loss(j), j.index)):
            if gpus <= 0:
                break
            cut = min(gpus, self._flex(engine, job))
            self._resize(engine, job, job.num_gpus - cut)
            gpus -= cut

    def _resize(self, engine: PolicyEngine, job: Job, gpus: int,
                placement: list[tuple[int, int]] | None = None) -> bool:
        before = job.num_gpus
        if gpus == before:
            return False
        release = self._release_order(engine, job, before - gpus) if gpus < before else None
        if not engine.resize(job, gpus, placement=placement, release=release):
            return False
        if gpus > before:
            self.scale_outs += 1
        else:
            self.scale_ins += 1
        if self.params.tuned_jobs and job.goodput is not None:
            self._tune(engine, job)
        return True

    # ---- loaning: the orchestrator's hooks (sched/core/pools.py) ----------------------------------
    def choose_reclaim(self, engine: PolicyEngine, n: int) -> list[int]:
        """Which on-loan servers go back (``reclaim``: Lyra's heuristic, SCF or Random; §4, §7.1)."""
        orchestrator = engine.orchestrator
        view = orchestrator.view(engine, lambda job: self.expected_end(engine, job) - engine.now)
        return list(get_reclaim(self.params.reclaim)(view, n, orchestrator.rng))

    def on_reclaimed(self, engine: PolicyEngine, plan: Any) -> None:
        """Preempted jobs go back to the queue; shrunk ones keep their base elsewhere."""
        for job in plan.preempt:
            self._forget(job)
            self._enqueue(engine, job)
        per = engine.cluster.gpus_per_server
        for job in plan.shrink:
            if job in self.base_servers:
                self.base_servers[job] &= {g // per for g in job.gpus}
        self._rescale_due = True

    # ---- phase 2 ----------------------------------------------------------------------------
    def phase2(self, engine: PolicyEngine) -> None:
        if self.split_base:
            self._flex_pools(engine)
        for pool in (TRAINING, LOAN):
            jobs = [j for j in self.elastic_running if self.pool_of_job[j] == pool]
            if jobs:
                self._rescale_pool(engine, pool, jobs)

    def _rescale_pool(self, engine: PolicyEngine, pool: int, jobs: list[Job]) -> None:
        g = self.params.elastic_gpus_per_worker
        r = self._r(engine) if pool == LOAN else 1.0
        base = self.base_raw
        free_raw = self._free_in(engine.cluster, pool)
        capacity = int((free_raw + sum(j.num_gpus - base[j] for j in jobs)) / r + 1e-9)
        sizes = [(job.elastic_max - job.elastic_min) // g for job in jobs]
        self.mckp_items_max = max(self.mckp_items_max, sum(sizes))
        if capacity >= sum(sizes) * g:
            choice = sizes  # room for every flexible worker
        elif any(job.goodput is not None for job in jobs) or (pool == LOAN and self.split_base and self._perf(engine) < 1
                                                              and not self.split_base.isdisjoint(jobs)):
            groups = [self._items(engine, job, k) for job, k in zip(jobs, sizes)]
            t0 = time.perf_counter()
            choice = list(solve(groups, capacity).choice)
            self.solve_times.append(time.perf_counter() - t0)
        else:
            t0 = time.perf_counter()
            choice = self._concave_choice(engine, jobs, sizes, capacity // g)
            self.solve_times.append(time.perf_counter() - t0)
        targets = [(job, self._target(engine, job, pool, job.elastic_min + k * g)) for job, k in zip(jobs, choice)]
        grow = []
        for job, raw in targets:  # scale in first: it frees GPUs for the others
            if raw < job.num_gpus:
                self._resize(engine, job, raw)
            elif raw > job.num_gpus:
                grow.append(job)
        if not grow:
            return
        per = engine.cluster.gpus_per_server
        free = list(map(len, engine.cluster.free_by_server))
        servers = self._servers(engine, pool)
        hosts = self._base_hosts() if pool == LOAN else ()
        apart = [s for s in servers if s not in hosts]
        for job, k in zip(jobs, choice):
            target = job.elastic_min + k * g
            while True:
                extra = self._target(engine, job, pool, target) - job.num_gpus
                if extra <= 0:
                    break
                where = bfd.place(free, [1] * extra, self._flex_tiers(engine, job, servers, apart), per,
                                  available=self._free_in(engine.cluster, pool))
                if where is not None:
                    self._resize(engine, job, job.num_gpus + extra, sorted(where.items()))
                    break
                target -= g  # trim what cannot be placed (docs/explanation/lyra.md)
                self.trimmed_workers += 1

    def _target(self, engine: PolicyEngine, job: Job, pool: int, gpus: int) -> int:
        """GPUs held at ``gpus`` training GPUs' worth: in ``pool``'s GPUs, or for a split job its base
        (training GPUs) plus its flexible workers in ``pool``'s GPUs."""
        if job in self.split_base:
            return self.base_raw[job] + self._raw(engine, pool, gpus - job.elastic_min)
        return self._raw(engine, pool, gpus)

    def _perf(self, engine: PolicyEngine) -> float:
        return getattr(engine.cluster, "heterogeneous_perf", 1.0)

    def _concave_choice(self, engine: PolicyEngine, jobs: list[Job], sizes: list[int], units: int) -> list[int]:
        """The exact MCKP optimum for linearly (or imperfectly) scaling jobs, whose values are concave
        in the extra workers: the largest marginal savings (``knapsack.concave_counts``; on a tie at the
        cut, ``knapsack.solve_concave`` on the same gains). Item ``k`` of job ``j`` saves
        ``R_j lo_j (1 / (lo_j + a_j (k - 1) g) - 1 / (lo_j + a_j k g))``; the bracket is cached."""
        g = self.params.elastic_gpus_per_worker
        marginals = []
        for job, count in zip(jobs, sizes):
            key = (job.elastic_min, job.scaling_loss, count)
            steps = self._gain_steps.get(key)
            if steps is None:
                lo, a = float(job.elastic_min), 1.0 - job.scaling_loss
                steps = self._gain_steps[key] = [1.0 / (lo + a * (w - g)) - 1.0 / (lo + a * w)
                                                 for w in range(g, (count + 1) * g, g)]
            scale = self.remaining(engine, job) * float(job.elastic_min)
            marginals.append([scale * x for x in steps])
        counts = concave_counts(marginals, units)
        if counts is None:
            group = np.repeat(np.arange(len(jobs)), np.asarray(sizes, dtype=np.int64))
            flat = np.array([m for gains in marginals for m in gains], dtype=float)
            counts = solve_concave(flat, group, len(jobs), units).tolist()
        return counts

    def _items(self, engine: PolicyEngine, job: Job, count: int) -> tuple[np.ndarray, np.ndarray]:
        """A job's MCKP group: ``k`` more workers weigh ``k g`` GPUs and are worth the remaining
        run time they save, ``T(base) - T(base + k g)`` (§5.2, docs/explanation/lyra.md)."""
        g = self.params.elastic_gpus_per_worker
        weights = np.arange(1, count + 1) * g
        rem = self.remaining(engine, job)
        lo = job.elastic_min
        if job.goodput is None:  # T(w) = rem / speed(w); speed(lo) = 1
            mixed = job in self.split_base and self.pool_of_job[job] == LOAN  # flexible workers make it mixed
            perf = self._perf(engine) if mixed else 1.0
            return weights, rem - rem * lo / (perf * (lo + (1.0 - job.scaling_loss) * weights))
        t_base = self._time(job, rem, lo)
        return weights, np.array([t_base - self._time(job, rem, lo + w) for w in weights.tolist()])

    def _time(self, job: Job, remaining: float, gpus: int) -> float:
        """T_j(w): remaining run time on ``gpus`` GPUs (goodput jobs: their goodput speed-up)."""
        if job.goodput is None:
            return run_time(job, remaining, gpus)
        return remaining / self._goodput_speedup(job, gpus)

    def _goodput_speedup(self, job: Job, gpus: int) -> float:
        from schedlab.sched.models.goodput import packed

        model, progress = job.goodput.model, job.goodput.epoch_start
        try:
            base = model.best_batch(packed(job.elastic_min), progress)[1]
            here = model.best_batch(packed(gpus), progress)[1]
        except ValueError:
            return 1e-9
        return max(here / base, 1e-9) if base > 0 else 1e-9

    def _tune(self, engine: PolicyEngine, job: Job) -> None:
        """TunedJobs (Pollux's agent in Lyra §7.4): the goodput-optimal batch on the new placement."""
        batch = job.goodput.model.best_batch(job.goodput.placement_shape, job.goodput.epoch_start)[0]
        if batch:
            engine.set_batch(job, batch)

    def on_epoch(self, engine: PolicyEngine, job: Job) -> None:
        if self.params.tuned_jobs and job.running:
            self._tune(engine, job)


class OpportunisticParams(KnowledgeParams):
    reclaim: Literal["random", "scf", "lyra"] = Field(
        default="random", description="which servers inference takes back (it is oblivious: random)")


class Opportunistic(Lyra):
    """Table 5 row 6 (Lyra §7.1; docs/explanation/lyra.md): no loaning to training; fungible jobs queue for
    idle inference servers at lower priority than inference, and are evicted when it needs them."""

    name = "opportunistic"
    uses = (frozenset({"inference", "fungible"}),)
    falls_back_to = "sjf"  # the same SJF scheduler on the training side
    summary = "fungible jobs only on idle inference servers (evicted when inference needs them), others on training"
    paper = "Lyra (EuroSys'23) §7.1, Table 5 row 6 (docs/explanation/lyra.md)"
    simplified = ("idle inference servers = those the orchestrator would lend (same 2 % headroom); the same SJF"
                  " scheduler on each side; no elastic scaling; a job evicted once (or larger than inference"
                  " ever lends over its load series) may then run on training servers, else a long job without"
                  " checkpoint would restart forever")
    Params = OpportunisticParams

    def __init__(self, params: OpportunisticParams | None = None) -> None:
        params = params if params is not None else OpportunisticParams()
        knowledge = params.model_dump(include=set(KnowledgeParams.model_fields), exclude_unset=True)
        super().__init__(LyraParams(elastic=False, loaning=True, reclaim=params.reclaim, **knowledge))
        self.params_opportunistic = params

    def _is_hetero(self, job: Job) -> bool:
        return False  # Table 5 row 6 is the Basic scenario: no job runs on both types

    def _pools_for(self, job: Job) -> tuple[int, ...]:
        """Fungible jobs wait for inference servers, unless they need more than inference ever lends
        over its load series (then, like every other job, they run on training servers)."""
        cluster = self._engine.cluster if self._engine is not None else None
        lendable = getattr(cluster, "inference_server_ids", ())
        if not job.fungible or not lendable:
            return (TRAINING,)
        if job.preemptions:  # evicted once: may also queue for training (else a long job never ends)
            return (TRAINING, LOAN)
        most = self._engine.orchestrator.most_lent() * cluster.gpus_per_server
        return (LOAN,) if self._raw(self._engine, LOAN, job.requested_gpus) <= most else (TRAINING,)
