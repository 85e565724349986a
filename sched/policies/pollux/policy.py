"""``pollux``: goodput-optimal allocations and batch sizes (Pollux, OSDI'21, Qiao et al., §4; the
simulator study of §5.3 as docs/explanation/pollux.md states it).

Every round (60 s, a timer) the scheduler maximises the harmonic mean over active jobs of their
speed-ups: goodput on the allocation (at its goodput-optimal batch, among 50 geometrically spaced
sizes) over goodput on a fair share of ceil(GPUs / jobs) GPUs; a job whose allocation changes has
its speed-up scaled by ``max(age - 30 restarts, 0) / (age + 30)``. A job may get at most
min(2 x the most GPUs it has held, all GPUs, max batch / min per-GPU batch) GPUs (1 at first), at most
16 nodes, and a node holds at most one multi-node job. Each job runs at the goodput-optimal batch for
its placement and epoch, re-chosen at every reallocation and epoch boundary (Pollux's agent, §4.1).
As in the study's simulator, ncf jobs keep batch 32768 on one GPU (``fixed_batch``/``max_gpus``).

What the scheduler knows (``knowledge``): ``learned`` (default, as the study) prices allocations and
chooses batches with each job's own estimate, fitted online to what the job has run
(``learned.py``: goodput by nodes and GPU count, the fair share on one node, the cap from the
GPUs a job has reported running on, the batch re-chosen every round); ``oracle`` uses every job's
true goodput from its first round (schedlab's earlier rule). Progress always follows the true goodput.

A job with a duration and no goodput model (Philly's jobs in the Lyra and Castor set-ups) has the
speed-up the study's simulator gives such a job, linear: its GPUs over the fair share's (AdaptDL's
allocator: its GPUs), at its own GPU count only, or for Lyra's elastic job its range [d, 2d] at Lyra's
scaling (d x ``scaling.speed`` over the fair share). Every reallocation is a checkpoint-restart (the
study's 30 s stall, the restart factor above): a preempted or moved job keeps its progress whatever
the trace's ``checkpoint`` (Lyra's jobs without checkpoint lose it only to Lyra's own preemptions).

Solver (``solver``): ``search`` (ours, ``optimiser.solve``: exact DP over GPU counts, packing and
local search) or ``ga`` (a genetic algorithm like the study's, ``genetic.py``; slow).
Simplified: no cluster autoscaling; no interference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Literal

from pydantic import Field

from schedlab.sched.policies.elastic import (
    RoundParams,
    RoundPolicy,
    apply_allocations,
    packed_shape,
    server_capacity,
    server_counts,
)
from schedlab.sched.policies.pollux.learned import LearnedGoodput
from schedlab.sched.policies.pollux.optimiser import solve
from schedlab.sched.policies.pollux.problem import JobSpec, Problem, nonzero
from schedlab.sched.models.scaling import speed

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job


class PolluxParams(RoundParams):
    solver: Literal["search", "ga"] = "search"
    ga_population: int = Field(default=100, ge=2)
    ga_generations: int = Field(default=100, ge=1)
    restart_delay_s: float = Field(default=30.0, ge=0, description="restart penalty's delay (the study: 30 s)")
    max_nodes_per_job: int = Field(default=16, ge=1, description="servers a job may span (also held within the"
                                   " goodput data's measured nodes)")
    fixed_batch: dict[str, int] = Field(default={"ncf": 32768}, description="application -> fixed global batch")
    max_gpus: dict[str, int] = Field(default={"ncf": 1}, description="application -> GPU cap")
    knowledge: Literal["learned", "oracle"] = Field(
        default="learned", description="learned: each job's goodput estimated online from what it ran (the"
        " study); oracle: the true goodput from the first round")
    seed: int = 0


class Pollux(RoundPolicy):
    name = "pollux"
    summary = "goodput-optimal GPUs and batch per job, harmonic mean of speed-ups re-optimised every 60 s"
    paper = "Pollux (OSDI'21) §4.1-4.2, simulator study §5.3 (docs/explanation/pollux.md)"
    simplified = (
        "exact DP + local search instead of the GA (solver: ga available); no autoscaling; fixed-duration jobs"
        " scale linearly at their own GPU count (Lyra's elastic jobs: in their range); knowledge: oracle gives"
        " the scheduler the true goodput"
    )
    Params = PolluxParams
    relative_cost = 20.0  # the quickstart: ~30 s a replay where a queue policy takes ~1.5 s

    def __init__(self, params: PolluxParams | None = None) -> None:
        super().__init__(params)
        self.max_held: dict[Job, int] = {}
        self.allocations: dict[Job, int] = {}  # non-empty allocation changes so far
        self.objective_values: list[float] = []
        self.recorded: list[Problem] | None = None  # benchmarks: keep every round's problem
        self._ga = None
        self._goodput: dict = {}  # (model, epoch, shape) -> goodput at the best batch
        self._servers: list[int] = []  # problem node -> server id (set by ``problem``)
        self.learned = LearnedGoodput() if self.params.knowledge == "learned" else None

    def metrics(self) -> dict[str, float]:
        values = self.objective_values or [0.0]
        return {"pollux_rounds": len(self.objective_values), "pollux_mean_objective": sum(values) / len(values)}

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        super().on_finish(engine, job)
        self.max_held.pop(job, None)
        self.allocations.pop(job, None)
        if self.learned is not None:
            self.learned.forget(job)

    def on_epoch(self, engine: PolicyEngine, job: Job) -> None:
        if self.learned is not None:
            self.learned.observe(engine, job, epoch_ended=True)
            self._rechoose_batch(engine, job)
        elif job.running and job.model not in self.params.fixed_batch:
            batch = job.goodput.model.best_batch(job.goodput.placement_shape, job.goodput.epoch_start)[0]
            if batch:
                engine.set_batch(job, batch)

    def _rechoose_batch(self, engine: PolicyEngine, job: Job) -> None:
        """Learned mode: a running job's batch from its estimate (the study's agent, after each step)."""
        if job.running and job.model not in self.params.fixed_batch:
            engine.set_batch(job, self.learned.batch(job, job.goodput.placement_shape))

    # ---- a round -------------------------------------------------------------------------------
    def problem(self, engine: PolicyEngine) -> tuple[Problem, list[Job]]:
        cluster = engine.cluster
        per, total = cluster.gpus_per_server, cluster.total_gpus
        # the problem's nodes: servers that offer GPUs (an inference server not lent offers none)
        self._servers = [s for s, c in enumerate(server_capacity(engine)) if c]
        index = {s: i for i, s in enumerate(self._servers)}
        nodes = len(self._servers)
        jobs = list(self.active.values())
        fair = packed_shape(-(-total // max(1, len(jobs))), per)
        specs = []
        idle = (0,) * nodes
        for job in jobs:
            if job.gpus:
                held = [0] * nodes
                for s, n in server_counts(job, per).items():
                    held[index[s]] = n
                current = tuple(held)
            else:
                current = idle
            specs.append(JobSpec(self._cap(job, total), current, self._speedup(job, fair), self._factor(engine, job),
                                 by_count=job.goodput is None,
                                 by_spread=self.learned is not None and job.goodput is not None))
        spread = min([self.params.max_nodes_per_job] + [j.goodput.model.max_servers(per) for j in jobs if j.goodput])
        problem = Problem(specs, nodes, per, spread, scale=nodes / total)
        return problem, jobs

    def decide(self, engine: PolicyEngine) -> None:
        if not self.active:
            return
        if self.learned is not None:
            for job in self.active.values():
                if job.goodput is not None:
                    self.learned.observe(engine, job)
                    self._rechoose_batch(engine, job)
        problem, jobs = self.problem(engine)
        if self.recorded is not None:
            self.recorded.append(problem)
        alloc = self._solve(problem, jobs)
        self.objective_values.append(problem.value(alloc))
        servers = self._servers
        targets = {job: {servers[i]: n for i, n in nonzero(counts)} for job, counts in zip(jobs, alloc)}
        batch_for = self._batch_for if any(j.goodput for j in jobs) else None
        for job in apply_allocations(engine, targets, batch_for, keep_progress=True):
            if job.running:
                self.allocations[job] = self.allocations.get(job, 0) + 1
                self.max_held[job] = max(self.max_held.get(job, 0), job.num_gpus)

    def _batch_for(self, job: Job, target: dict[int, int]) -> int:
        """The batch a job runs at on its new GPUs: fixed, or goodput-optimal for placement and epoch."""
        fixed = self.params.fixed_batch.get(job.model) if job.model else None
        if fixed is not None or job.goodput is None:
            return fixed or job.goodput.global_batch
        if self.learned is not None:
            return self.learned.batch(job, tuple(sorted(target.values(), reverse=True)))
        batch = job.goodput.model.best_batch(tuple(sorted(target.values(), reverse=True)), job.goodput.epoch_start)[0]
        return batch or job.goodput.global_batch

    def _solve(self, problem: Problem, jobs: list[Job]):
        if self.params.solver == "search":
            return solve(problem)
        if self._ga is None:
            from schedlab.sched.policies.pollux.genetic import GeneticSolver

            self._ga = GeneticSolver(self.params.ga_population, self.params.ga_generations, self.params.seed)
        return self._ga.solve(problem, jobs)  # warm-started from the last round's population

    # ---- a job's terms -------------------------------------------------------------------------
    def _cap(self, job: Job, total: int) -> int:
        if job.goodput is None:
            return job.elastic_max or job.requested_gpus
        model = job.goodput.model
        held = self.learned.max_reported(job) if self.learned is not None else self.max_held.get(job, 0)
        cap = min(max(2 * held, 1), total, model.max_batch // model.min_local_batch,
                  model.max_gpus)
        return min(cap, self.params.max_gpus.get(job.model, cap))

    @staticmethod
    def _duration_speedup(job: Job, fair_gpus: int) -> Callable[[tuple[int, ...]], float]:
        """A fixed-duration job's speed-up: its throughput in one-GPU units over the fair share's GPUs,
        the speed-up the study's simulator gives a job without a goodput model (r / fair replicas;
        AdaptDL's allocator: r). Inelastic: only at its own GPU count. Lyra's elastic job: within its
        range, d x Lyra's speed (``scaling.speed``: linear up to d, ``1 - scaling_loss`` per GPU above)."""
        if job.elastic_max:  # Lyra's elastic job: its range (docs/explanation/lyra.md)
            lo, hi, loss = job.elastic_min, job.elastic_max, job.scaling_loss
            return lambda shape: lo * speed(lo, loss, sum(shape)) / fair_gpus if lo <= sum(shape) <= hi else 0.0
        want = job.requested_gpus
        return lambda shape: want / fair_gpus if sum(shape) == want else 0.0

    def _factor(self, engine: PolicyEngine, job: Job) -> float:
        age = engine.now - job.submit_time
        restarts = max(self.allocations.get(job, 0) - 1, 0)
        delay = self.params.restart_delay_s
        return max(age - restarts * delay, 0.0) / (age + delay) if age + delay > 0 else 0.0

    def _speedup(self, job: Job, fair: tuple[int, ...]):
        if job.goodput is None:
            return self._duration_speedup(job, sum(fair))
        if self.learned is not None:
            return self.learned.speedup(job, sum(fair))
        model, progress = job.goodput.model, job.goodput.epoch_start
        if sum(fair) > model.max_gpus:  # a fair share beyond the measured range: its largest measured size
            fair = packed_shape(model.max_gpus, fair[0])
        base = 0.0
        while fair and base <= 0.0:
            base = model.best_batch(fair, progress)[1]
            fair = packed_shape(sum(fair) - 1, fair[0]) if sum(fair) > 1 else ()
        if base <= 0.0:
            return lambda shape: 0.0

        memo = self._goodput
        epoch = model.epoch(progress)

        def speedup(shape: tuple[int, ...]) -> float:
            key = (model, epoch, shape)
            value = memo.get(key)
            if value is None:
                try:
                    value = model.best_batch(shape, progress)[1]
                except ValueError:  # a placement the data cannot interpolate
                    value = 0.0
                memo[key] = value
            return value / base

        return speedup
