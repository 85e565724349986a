"""Pools whose capacity changes over time: inference servers lent to training and reclaimed (Lyra §3-§4).

API (stable; docs/explanation/lyra.md)
---------------------------------
``PooledCluster(spec, options)`` — a :class:`ClusterState` over the training pool *and* the inference
pool, one GPU id space (training servers first). Each server is ``TRAINING``, ``INFERENCE`` (not
available: its free stack is empty, so no placement strategy sees it) or ``ON_LOAN``. ``free_gpus``,
``free_by_server`` and ``total_gpus`` count only servers available to training (training + on loan),
so every policy and placement works unchanged, and with nothing lent a replay is bit-identical.
For policies: ``on_loan`` (insertion-ordered dict of servers), ``is_on_loan(s)``, ``pool_of(s)``,
``training_servers`` (ids ``0..training_servers-1``), ``inference_server_ids``, ``idle_inference()``,
``training_free_gpus``, ``loan_free_gpus``, ``jobs_on_server(s) -> {job: GPUs}``, ``servers_of(job)``,
``busy_gpus(s)``, ``loan_gpus(demand)`` (T4 GPUs standing for ``demand`` V100s: ``ceil(r·demand)``),
``normalised_gpus(job)`` (V100 + T4 / r) and :func:`place_on` (``fewest-servers`` placement restricted
to given servers). ``lend(servers)`` / ``take_back(servers)`` change capacity; ``take_back`` refuses a
server that still holds a job ("inference is not affected" is an invariant).

``Orchestrator(load, options, seed)`` — passed to ``Engine(orchestrator=...)``: a ``_CAPACITY`` timer
event at the first arrival and then every ``period_s`` (300 s, §7.1) on the grid ``k·period_s``. At a
tick, before that instant's arrivals: ``need = ceil(û·N_I)`` servers for inference (``û`` from the
predictor), ``H = ceil(headroom·N_I)``, target on loan ``L = max(0, N_I − H − need)`` (docs/explanation/lyra.md);
lend idle inference servers up to ``L`` or reclaim the excess; then the policy schedules as for any
event. Only a policy with ``uses_loaning = True`` (class attribute) is lent anything; another policy
gets one tick (it opens the integrals) and replays exactly as without pools. ``target(t)`` is what
the next tick will aim for; ``reclaims`` (``ReclaimRecord`` per reclaim), ``timeline``,
``loan_ops``, ``servers_lent`` and :func:`pool_summary` are the figures. Wiring: ``replay(...,
inference=LoanOptions(load=...))``, CLI ``--inference-load``, experiment key ``inference:``.

Reclaiming: the servers come from ``policy.choose_reclaim(engine, n) -> list[int]`` when the policy
defines it, else from the ``reclaim`` strategy (``sched/core/reclaim.py``) on :meth:`Orchestrator.view`.
The orchestrator applies :func:`~schedlab.sched.core.reclaim.plan_for`: elastic jobs whose loss there fits
their slack (``num_gpus − elastic_min``; :attr:`Orchestrator.slack` may be replaced) shrink via
``engine.resize``, the others are preempted (progress lost unless the job checkpoints: the job's
``checkpoint`` column, else ``options.lose_progress``, the paper's no-checkpoint default) and pay
the engine's preemption overhead (63 s) on restart. The engine then takes the servers back, and calls
``policy.on_reclaimed(engine, plan)`` (required: re-queue ``plan.preempt``, note ``plan.shrink``).

Speed on other GPU types (§5.2; ours, docs/explanation/lyra.md): ``Engine.job_speed`` is set to
:meth:`PooledCluster.speed` unless given: on training GPUs 1; all on T4 ``min(1, σ·n_T4/d)`` for an
inelastic job of demand ``d`` (defaults ``r = 3``, ``σ = 1/3``: ``ceil(3d)`` T4 GPUs run at 1, so
"loaning itself does not affect job running time", §7.3), ``r·σ`` (capped at 1) for an elastic one;
on both types at once (a heterogeneous job, §6) ``heterogeneous_perf`` (0.7, §7.1; 1.0 in Ideal) x its
normalised GPUs (V100s + T4s / r) over its demand, capped at 1 (for an elastic job the scaling below
takes the normalised GPUs; docs/explanation/lyra.md). ``PooledCluster.scaling`` (a ``job -> factor`` callable,
e.g. linear elastic scaling) multiplies in when set; without pools, ``Engine(job_speed=...)`` takes
such a callable directly. The factor is applied at ``start`` and ``resize`` (``job.speed_factor``).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator

from schedlab.sched.core.cluster import ClusterSpec, ClusterState
from schedlab.sched.models.inference import InferenceLoad
from schedlab.sched.core.placement import fill
from schedlab.sched.core.protocol import Capability, EngineError
from schedlab.sched.core.reclaim import (
    STRATEGIES,
    ReclaimPlan,
    ReclaimView,
    get_strategy,
    plan_for,
)
from schedlab.sched.strict import UserModel

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import CapabilityHost as Engine
    from schedlab.sched.core.job import Job

TRAINING, INFERENCE, ON_LOAN = 0, 1, 2


class LoanOptions(UserModel):
    """How inference servers are lent and reclaimed (CLI ``--inference-*``, experiment key ``inference:``)."""

    model_config = ConfigDict(allow_inf_nan=False)
    load: str = Field(description="PATH (time,utilization CSV), PATH[:MODEL] (ServeGen) or constant:U")
    predictor: Literal["oracle", "last"] = "oracle"
    headroom: float = Field(default=0.02, ge=0, lt=1, description="fraction of inference servers never lent (§7.1)")
    period_s: float = Field(default=300.0, gt=0, description="orchestrator period (§7.1: 5 minutes)")
    reclaim: str = Field(default="lyra", description=f"reclaim strategy: {', '.join(STRATEGIES)}")
    gpu_equivalence: float = Field(default=3.0, gt=0, description="r: T4 GPUs standing for one V100 (§7.5)")
    inference_speed: float = Field(default=1 / 3, gt=0, description="σ: per-GPU speed of a T4 relative to a V100")
    heterogeneous_perf: float = Field(default=0.7, gt=0, le=1, description="speed of a job on both types at once,"
                                      " per normalised GPU of its demand (§7.1: at most 70 %; 1.0 = Ideal)")
    lose_progress: bool = Field(default=True, description="preempted jobs without a checkpoint column restart from zero")

    @field_validator("reclaim")
    @classmethod
    def _reclaim(cls, value: str) -> str:
        get_strategy(value)
        return value


class PoolError(RuntimeError):
    pass


class PooledCluster(ClusterState):
    """The training pool plus the inference pool; see the module doc."""

    def __init__(self, spec: ClusterSpec, options: LoanOptions | None = None) -> None:
        super().__init__(spec)
        inference = spec.lending_pool()  # ClusterError: none, or another server size
        options = options or LoanOptions(load="constant:1")
        self.r = options.gpu_equivalence
        self.sigma = options.inference_speed
        self.heterogeneous_perf = options.heterogeneous_perf
        self.training_servers = self.num_servers
        self.first_inference_gpu = self.total_gpus
        self.inference_server_ids = range(self.num_servers, self.num_servers + inference.servers)
        self.num_servers += inference.servers
        self.free_by_server += [[] for _ in self.inference_server_ids]
        self.holders += [[] for _ in range(inference.servers * self.gpus_per_server)]
        self.single_by_server += [0] * inference.servers
        self.state = [TRAINING] * self.training_servers + [INFERENCE] * inference.servers
        self.on_loan: dict[int, None] = {}
        self.training_gpu_type = self.pool.gpu_type
        self.inference_gpu_type = inference.gpu_type
        self.scaling: Callable[[Any], float] | None = None
        self.clock: Callable[[], float] = lambda: 0.0
        self.loan_busy = 0  # GPUs held on on-loan servers
        self._last = math.nan
        self.capacity_gpu_s = 0.0  # ∫ GPUs available to training dt
        self.loan_busy_gpu_s = 0.0  # ∫ busy on-loan GPUs dt
        self.loaned_gpu_s = 0.0  # ∫ on-loan GPUs dt
        self.loan_busy_timeline: list[tuple[float, int]] = []  # (time, busy on-loan GPUs) at changes

    # ---- views -------------------------------------------------------------------------------
    def pool_of(self, server: int) -> str:
        return "training" if server < self.training_servers else "inference"

    def is_on_loan(self, server: int) -> bool:
        return self.state[server] == ON_LOAN

    def idle_inference(self) -> list[int]:
        """Inference servers not lent (all of them are idle from training's point of view)."""
        return [s for s in self.inference_server_ids if self.state[s] == INFERENCE]

    @property
    def training_free_gpus(self) -> int:
        return self.free_gpus - self.loan_free_gpus

    @property
    def loan_free_gpus(self) -> int:
        """Free GPUs on on-loan servers: all of theirs but the held ones (``loan_busy``), O(1)."""
        return len(self.on_loan) * self.gpus_per_server - self.loan_busy

    def busy_gpus(self, server: int) -> int:
        return self.gpus_per_server - len(self.free_by_server[server]) if self.state[server] != INFERENCE else 0

    def jobs_on_server(self, server: int) -> dict[Any, int]:
        jobs: dict[Any, int] = {}
        per = self.gpus_per_server
        if len(self.free_by_server[server]) == per:  # all free: nobody there
            return jobs
        for g in range(server * per, (server + 1) * per):
            for job in self.holders[g]:
                jobs[job] = jobs.get(job, 0) + 1
        return jobs

    def servers_of(self, job) -> dict[int, int]:
        counts: dict[int, int] = {}
        for g in job.gpus:
            counts[g // self.gpus_per_server] = counts.get(g // self.gpus_per_server, 0) + 1
        return counts

    def loan_gpus(self, demand: int) -> int:
        """T4 GPUs that stand for ``demand`` training GPUs (``ceil(r·demand)``, §5.2)."""
        return math.ceil(self.r * demand - 1e-9)

    def _t4(self, gpus) -> int:
        """How many of ``gpus`` are inference GPUs (0 at once for a job on training GPUs only)."""
        first = self.first_inference_gpu
        if not gpus or max(gpus) < first:
            return 0
        return sum(1 for g in gpus if g >= first)

    def normalised_gpus(self, job) -> float:
        """The job's GPUs in training-GPU units: V100s + T4s / r."""
        t4 = self._t4(job.gpus)
        return len(job.gpus) - t4 + t4 / self.r

    def speed(self, job) -> float:
        """The job's speed factor on its GPUs (the engine's ``job_speed``; module doc)."""
        t4 = self._t4(job.gpus)
        if t4 == 0:
            factor = 1.0
        elif t4 < len(job.gpus):  # both types at once (a heterogeneous job): perf x normalised / demand
            factor = self.heterogeneous_perf
            if self.scaling is None or not job.elastic_max:  # elastic: the scaling below counts them
                factor *= min(1.0, (len(job.gpus) - t4 + t4 / self.r) / job.requested_gpus)
        elif job.elastic_min:
            factor = min(1.0, self.r * self.sigma)
        else:
            factor = min(1.0, self.sigma * t4 / job.requested_gpus)
        return factor * self.scaling(job) if self.scaling is not None else factor

    # ---- capacity changes ---------------------------------------------------------------------
    def lend(self, servers) -> None:
        """Inference servers join training (empty)."""
        self._integrate()
        per = self.gpus_per_server
        for s in servers:
            if self.state[s] != INFERENCE:
                raise PoolError(f"server {s} is not an idle inference server (state {self.state[s]})")
            self.state[s] = ON_LOAN
            self.on_loan[s] = None
            self.set_free(s, list(range((s + 1) * per - 1, s * per - 1, -1)))
            self.free_gpus += per
            self.total_gpus += per

    def take_back(self, servers) -> None:
        """On-loan servers go back to inference; refused if any still holds a job."""
        per = self.gpus_per_server
        for s in servers:
            if self.state[s] != ON_LOAN:
                raise PoolError(f"server {s} is not on loan")
            if len(self.free_by_server[s]) != per:
                jobs = sorted(getattr(j, "job_id", str(j)) for j in self.jobs_on_server(s))
                raise PoolError(f"server {s} still holds job(s) {jobs}: inference is not affected, so it cannot"
                                " be returned before they leave")
        self._integrate()
        for s in servers:
            self.state[s] = INFERENCE
            del self.on_loan[s]
            self.set_free(s, [])
            self.free_gpus -= per
            self.total_gpus -= per

    # ---- GPU bookkeeping (tracks on-loan busy GPUs; the training-only path is the base class's) -
    def take_from_servers(self, counts, job):
        loaned = sum(n for s, n in counts if self.state[s] == ON_LOAN)
        taken = super().take_from_servers(counts, job)
        if loaned:
            self._integrate()
            self.loan_busy += loaned
            self.loan_busy_timeline.append((self._last, self.loan_busy))
            job.ran_on_loan = True
        return taken

    def release(self, job, gpus) -> None:
        freed = 0
        if self._t4(gpus):
            freed = sum(1 for g in gpus if g >= self.first_inference_gpu and len(self.holders[g]) == 1)
        super().release(job, gpus)
        if freed:
            self._integrate()
            self.loan_busy -= freed
            self.loan_busy_timeline.append((self._last, self.loan_busy))

    def _integrate(self) -> None:
        now = self.clock()
        if not math.isnan(self._last):
            dt = now - self._last
            self.capacity_gpu_s += dt * self.total_gpus
            self.loan_busy_gpu_s += dt * self.loan_busy
            self.loaned_gpu_s += dt * len(self.on_loan) * self.gpus_per_server
        self._last = now


def place_on(cluster: ClusterState, servers, demand: int) -> list[tuple[int, int]] | None:
    """``fewest-servers`` placement of ``demand`` GPUs on ``servers`` only (fewest servers; best fit)."""
    counts = [(len(cluster.free_by_server[s]), s) for s in servers if cluster.free_by_server[s]]
    if sum(n for n, _ in counts) < demand:
        return None
    fitting = [(n, s) for n, s in counts if n >= demand]
    if fitting:
        return [(min(fitting)[1], demand)]
    return fill(sorted(counts, key=lambda ns: (-ns[0], ns[1])), demand)


@dataclass
class ReclaimRecord:
    time: float
    servers: int  # N_R
    preempted: int
    shrunk: int
    running_on_loan: int  # jobs holding on-loan GPUs before the reclaim
    collateral_gpus: int
    flex_servers: int  # returned servers that held jobs, all of which only shrank (the flexible group)
    solve_s: float
    idle_servers: int = 0  # returned servers that held no job


@dataclass
class Orchestrator(Capability):
    """Lyra's resource orchestrator (§3): executes the inference scheduler's loan/reclaim decisions.

    The engine's ``"pools"`` capability (``sched/core/protocol.py``): the engine calls :meth:`attach`
    when built, then :meth:`tick`, :meth:`keep_ticking` and :meth:`next_tick` at its capacity events and
    :meth:`finish` at the end. A reclaim shrinks and preempts jobs through the host's ``resize`` and
    ``preempt`` (the capacity, not the policy, forces them), then tells the policy (``on_reclaimed``)."""

    role: ClassVar[str] = "pools"

    load: InferenceLoad
    options: LoanOptions
    seed: int = 0
    loan_ops: int = 0
    servers_lent: int = 0
    reclaims: list[ReclaimRecord] = field(default_factory=list)
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (time, servers on loan) at changes
    shortfall_server_s: float = 0.0
    slack: Callable[[Any], int] = field(
        default=lambda job: max(0, job.num_gpus - job.elastic_min) if job.elastic_min else 0)

    def __post_init__(self) -> None:
        self.period_s = self.options.period_s
        self.strategy = get_strategy(self.options.reclaim)
        self.rng = random.Random(self.seed)
        self._idle_ticks = 0
        self._max_idle_ticks = math.ceil(self.load.span / self.period_s) + 1
        self.cluster: PooledCluster | None = None
        self._view: ReclaimView | None = None  # the view of the reclaim under way (built once)
        self._most_lent: int | None = None  # most_lent(), once attached

    def attach(self, engine: Engine) -> None:
        if not isinstance(engine.cluster, PooledCluster):
            raise PoolError("an orchestrator needs a PooledCluster (a training and an inference pool)")
        self.cluster = engine.cluster
        self.cluster.clock = lambda: engine.now
        self.n_inference = len(self.cluster.inference_server_ids)
        self.headroom = math.ceil(self.options.headroom * self.n_inference - 1e-9)
        self.lending = bool(getattr(engine.policy, "uses_loaning", False))
        if self.lending and not callable(getattr(engine.policy, "on_reclaimed", None)):
            raise PoolError(f"policy {engine.policy.name} borrows inference servers but has no"
                            " on_reclaimed(engine, plan) to re-queue the jobs a reclaim preempts")
        if engine.job_speed is None and self.lending:
            engine.job_speed = self.cluster.speed

    def next_tick(self, now: float) -> float:
        return (math.floor(now / self.period_s + 1e-9) + 1) * self.period_s

    def target(self, t: float) -> int:
        """Servers to have on loan from ``t`` to the next tick (docs/explanation/lyra.md)."""
        u = self.load.predict(self.options.predictor, t, self.next_tick(t) - t)
        need = math.ceil(u * self.n_inference - 1e-9)
        return max(0, self.n_inference - self.headroom - need) if self.lending else 0

    def most_lent(self) -> int:
        """The most servers this orchestrator ever has on loan: the largest :meth:`target` of the ticks
        of one load period (the series repeats; exact when its span is a whole number of periods, as
        the shipped ``diurnal:`` and ``constant:`` sources and ServeGen's 10-minute bins are). A
        borrower whose job needs more waits forever (the trough of ``diurnal:0.42:0.95`` on 19 servers
        keeps 9, so a 32-GPU job at r = 3 can never borrow its 96 T4 GPUs)."""
        if self._most_lent is None:
            ticks = math.ceil(self.load.span / self.period_s - 1e-9)
            self._most_lent = max(self.target(k * self.period_s) for k in range(ticks))
        return self._most_lent

    def tick(self, engine: Engine) -> bool:
        """Lend or reclaim to this period's target; whether the capacity changed."""
        cluster = self.cluster
        t = engine.now
        cluster._integrate()  # the first tick opens the integrals
        if not self.lending:
            return False
        goal, loaned = self.target(t), len(cluster.on_loan)
        if goal > loaned:
            cluster.lend(cluster.idle_inference()[: goal - loaned])
            self.loan_ops += 1
            self.servers_lent += goal - loaned
        elif goal < loaned:
            self.reclaim(engine, loaned - goal)
        if not self.timeline or self.timeline[-1][1] != len(cluster.on_loan):
            self.timeline.append((t, len(cluster.on_loan)))
        if self.options.predictor != "oracle":
            available = self.n_inference - len(cluster.on_loan)
            self.shortfall_server_s += sum(
                (b - a) * max(0, math.ceil(u * self.n_inference - 1e-9) - available)
                for a, b, u in self.load.segments(t, self.next_tick(t)))
        return goal != loaned

    def keep_ticking(self, engine: Engine, arrivals_left: bool) -> bool:
        """Whether to push the next tick: stop after a whole load period with nothing running and
        nothing to arrive (a job that never fits then ends the replay with the engine's error). A policy
        that does not borrow needs no tick after the first: the capacity never changes."""
        if not self.lending:
            return False
        if arrivals_left or engine.running:
            self._idle_ticks = 0
            return True
        self._idle_ticks += 1
        return self._idle_ticks <= self._max_idle_ticks

    def view(self, engine: Engine, time_left: Callable[[Job], float] | None = None) -> ReclaimView:
        """The read-only view a reclaim strategy decides on (jobs are the engine's Job objects; during
        a reclaim, those it was decided on); ``time_left(job)``: each job's time to go (default: to the
        engine's expected end; a policy passes its own, which may be an estimate, docs/estimates.md)."""
        view = self._view if self._view is not None else self._jobs_view()
        left = time_left if time_left is not None else (lambda j: engine.expected_end(j) - engine.now)
        return replace(view, time_left={j: left(j) for j in view.job_servers})

    def _jobs_view(self) -> ReclaimView:
        """Who holds GPUs on the on-loan servers, where else they run, what they may lose (no time to go)."""
        cluster = self.cluster
        server_jobs = {s: cluster.jobs_on_server(s) for s in cluster.on_loan}
        jobs = {j for held in server_jobs.values() for j in held}
        return ReclaimView(
            on_loan=tuple(cluster.on_loan),
            server_jobs=server_jobs,
            job_servers={j: cluster.servers_of(j) for j in jobs},
            slack={j: self.slack(j) for j in jobs},
            gpus_per_server=cluster.gpus_per_server,
        )

    def reclaim(self, engine: Engine, n: int) -> ReclaimPlan:
        """Return ``n`` on-loan servers: choose them, shrink or preempt their jobs, take them back."""
        policy = engine.policy
        started = time.perf_counter()
        view = self._view = self._jobs_view()
        choose = getattr(policy, "choose_reclaim", None)
        try:
            servers = list(choose(engine, n)) if choose is not None else self.strategy(self.view(engine), n, self.rng)
        finally:
            self._view = None
        solve_s = time.perf_counter() - started
        if len(set(servers)) != n or any(s not in self.cluster.on_loan for s in servers):
            raise EngineError(f"reclaim of {n} servers chose {servers}: needs {n} distinct on-loan servers")
        plan = plan_for(view, servers)
        per = self.cluster.gpus_per_server
        returned = set(servers)
        for job in plan.shrink:
            gone = tuple(g for g in job.gpus if g // per in returned)
            engine.resize(job, job.num_gpus - len(gone), release=gone)
        for job in plan.preempt:
            lose = self.options.lose_progress if job.checkpoint is None else not job.checkpoint
            engine.preempt(job, lose_progress=lose)
        try:
            self.cluster.take_back(servers)
        except PoolError as err:
            raise EngineError(f"policy {policy.name}: {err}") from None
        preempted = set(plan.preempt)
        idle = sum(1 for s in servers if not view.server_jobs[s])
        flex = sum(1 for s in servers if view.server_jobs[s] and preempted.isdisjoint(view.server_jobs[s]))
        self.reclaims.append(ReclaimRecord(engine.now, n, len(plan.preempt), len(plan.shrink),
                                           len({j for held in view.server_jobs.values() for j in held}),
                                           plan.collateral_gpus, flex, solve_s, idle))
        hook = getattr(policy, "on_reclaimed", None)
        if hook is not None:
            hook(engine, plan)
        return plan

    def finish(self, engine: Engine) -> Orchestrator:
        """Close the integrals at the last completion (the replay's makespan window)."""
        end = engine.last_end()
        clock = self.cluster.clock
        self.cluster.clock = lambda: end
        self.cluster._integrate()
        self.cluster.clock = clock
        return self


def pool_summary(result: Any, table) -> dict[str, float]:
    """Lyra's figures for a replay with pools (docs/explanation/lyra.md), from its
    job table (:func:`~schedlab.sched.results.metrics.job_table`, which has the pool columns)."""
    orch: Orchestrator = result.pools
    cluster = orch.cluster
    start, end = result.first_submit, result.last_end
    makespan = end - start
    per = cluster.gpus_per_server
    training_gpus = cluster.training_servers * per
    inference_gpus = orch.n_inference * per
    busy = result.busy_gpu_seconds
    inference_busy = orch.load.integral(start, end) * inference_gpus if makespan > 0 else 0.0
    records = orch.reclaims
    running = [r for r in records if r.running_on_loan]
    n_jobs = max(len(table), 1)
    preemptions = sum(table["preemptions"].tolist())

    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else math.nan

    return {
        "gpu_util": ratio(busy, cluster.capacity_gpu_s),
        "preemption_ratio": preemptions / n_jobs,
        "preemptions_lost_progress": sum(table["preemptions_lost"].tolist()),
        "lost_work_s": sum(table["lost_work_s"].tolist()),  # in job order, as summed before
        "training_usage": ratio(busy - cluster.loan_busy_gpu_s, training_gpus * makespan),
        "onloan_usage": ratio(cluster.loan_busy_gpu_s, cluster.loaned_gpu_s),
        "overall_usage_raw": ratio(busy + float(inference_busy), (training_gpus + inference_gpus) * makespan),
        "overall_usage_norm": ratio(busy - cluster.loan_busy_gpu_s + (cluster.loan_busy_gpu_s + float(inference_busy)) / cluster.r,
                                    (training_gpus + inference_gpus / cluster.r) * makespan),
        "avg_servers_on_loan": ratio(cluster.loaned_gpu_s / per, makespan),
        "jobs_ran_on_loan": sum(table["ran_on_loan"].tolist()),
        "loan_ops": orch.loan_ops,
        "servers_lent": orch.servers_lent,
        "reclaim_ops": len(records),
        "servers_reclaimed": sum(r.servers for r in records),
        "reclaim_preemptions": sum(r.preempted for r in records),
        "reclaim_shrinks": sum(r.shrunk for r in records),
        # §7.3: "% preempted jobs among running jobs" (on on-loan servers, per reclaim, averaged)
        "reclaim_preempted_fraction": ratio(sum(r.preempted / r.running_on_loan for r in running), len(running)),
        # A7: GPUs vacated beyond the demand, over the demand, averaged over reclaims
        "collateral_damage": ratio(sum(r.collateral_gpus / (per * r.servers) for r in records), len(records)),
        # §7.2: share of the reclaim demand met by the flexible group (scale-in only), and by idle servers
        "flex_group_reclaim_share": ratio(sum(r.flex_servers for r in records), sum(r.servers for r in records)),
        "idle_reclaim_share": ratio(sum(r.idle_servers for r in records), sum(r.servers for r in records)),
        "reclaim_max_solve_s": max((r.solve_s for r in records), default=0.0),
        "reclaim_mean_solve_s": ratio(sum(r.solve_s for r in records), len(records)),
        "inference_shortfall_server_s": orch.shortfall_server_s,
    }


def utilization_with_capacity(utilization, orch: Orchestrator):
    """``utilization.parquet`` of a replay with pools: ``busy_gpus`` plus ``servers_on_loan``,
    ``onloan_busy_gpus`` (the busy GPUs on on-loan servers, T4 counts: part of ``busy_gpus``) and
    ``capacity_gpus`` (GPUs available to training) at every change of any."""
    import pandas as pd

    loans = pd.DataFrame(orch.timeline, columns=["time", "servers_on_loan"])
    busy = pd.DataFrame(orch.cluster.loan_busy_timeline, columns=["time", "onloan_busy_gpus"])
    merged = pd.concat([utilization, loans, busy]).groupby("time", sort=True).last().ffill()
    merged = merged.fillna(0).astype({"busy_gpus": "int64", "servers_on_loan": "int64",
                                      "onloan_busy_gpus": "int64"}).reset_index()
    cluster = orch.cluster
    merged["capacity_gpus"] = (cluster.training_servers + merged["servers_on_loan"]) * cluster.gpus_per_server
    return merged
