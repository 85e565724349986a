"""``gavel``: round-based scheduling from an LP allocation over job combinations (Gavel, OSDI'20,
Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads").

On a homogeneous cluster Gavel's heterogeneity reduces to *combinations*: a job alone, or a pair of
jobs with the same GPU count space-sharing the same GPUs (§3.1). The allocation ``X[c]`` (fraction of
time per combination) is the optimum of a linear program (``gavel/lp.py``): ``max_min_fairness``
(§4.1, LAS with equal weights) or ``makespan`` (§4.2), solved with scipy's HiGHS. Only ``makespan``
reads durations (each job's remaining work), the true ones or with ``knowledge: estimate`` an
estimator's (``docs/estimates.md``; refused with ``max_min_fairness``, which would not change).

Rounds (§5): every ``round_s`` seconds (6 minutes, §5 and Gavel's ``time_per_iteration=360``) the
policy ranks combinations with ``X > 0`` by priority ``X[c] / time received by c`` (Gavel's fraction
of rounds received; every combination starts at half a round, as in Gavel's scheduler, so a new one
is not infinite), ties broken by the deficit (time owed, ``X·elapsed - received``) then by ``X``
(§5, Algorithm 1). It greedily takes combinations that fit in the cluster's GPUs (whole gangs),
skipping those with a job already taken; jobs left over then fill leftover GPUs alone, largest
deficit first (Gavel's greedy also walks zero-priority jobs; keeping their deficit current so that
fill jobs rotate is ours). Running jobs not chosen again are preempted (they keep their progress;
Gavel checkpoints between rounds); jobs chosen again keep running (Gavel's lease extension, §5);
a chosen pair starts its second job beside the first via ``share_gpus``, largest gangs first. The
plan counts GPUs; under a strict placement (``strict-best-fit``: Gimbal §5.1's set-ups) a combination
whose job the placement refuses although enough GPUs are free does not run that round (no time
received, so its priority stays high) and its GPUs stay idle until the next round.

Re-solving (§5; Gavel's simulator): arrivals and completions only mark the allocation stale; it is
re-solved at the next round boundary at least ``reallocation_interval_s`` after the last solve (Gavel
scheduler.py's ``minimum_time_between_allocation_resets`` = 1,920 s), or at once when no active job
has an allocation. A re-solve resets the time-received counters, carrying the difference into the
deficits, as Gavel does. GPUs freed mid-round stay idle until the next round, as in Gavel's
simulator, except that an arrival on an idle cluster starts a round at once. ``resolve_after_start``
(default, as Gavel's code; off: every re-solve starts the interval): Gavel's simulator
(scheduler.py ``_update_priorities``) reads a last reset time of 0 as "never reset", so after its
first re-solve at time 0 the next arrival or completion re-solves at the next round, without waiting
for the interval (on its 96-job trace, at 720 s instead of 1,920 s).

LP size: at most ``max_jobs_in_lp`` active jobs (the oldest; default 100), the others run only as
fill; at most ``max_partners_per_job`` (default 8) pair columns per job, its best partners by combined
throughput, so a round's LP has at most ~900 columns and ~200 rows and solves in milliseconds on
128 GPUs. A pair is a candidate only if both jobs fit in one GPU's memory, ξ is finite and the
combined normalised throughput ``1/ξ_a + 1/ξ_b`` exceeds 1. Gavel's code considers every pair of
equal scale factor with non-zero throughput; dropping pairs with combined throughput <= 1 loses
nothing (time-slicing the two jobs alone gives the same progress for no more GPU time), and the
partner cap did not lower the optimum on the replays we checked (analytic ξ and Gavel's table).

LP ties: the second LP stage may lower the minimum by ``refine_tolerance`` (relative, default 1e-6)
to raise the total throughput. Where the minimum already uses every GPU, the slack this frees goes to
one job (a simplex vertex), so jobs that Gavel's solver (ECOS, an interior-point method) gives equal
shares get shares differing in the sixth digit, and the ranking (X / time received) puts that job
first; ``refine_tolerance: 0`` keeps the minimum at its optimum. HiGHS' simplex also leaves dust in
the last bits (one of five equal 4-GPU jobs at 0.1111111111111096 instead of 0.1111111111111111), which
ECOS does not; ``allocation_decimals: 9`` rounds it away, so that equal jobs rank by the next keys.

Unequal pairs (Gimbal §7.2's relaxed Gavel, spec ``gimbal.md`` A14; off by default): with
``unequal=True`` a pair may join jobs of different GPU counts. The combination holds the larger job's
GPUs (``combo GPUs = max``), the smaller job runs on a fewest-server subset of them, and the LP rates
are those before any calibration, with LISS balancing the larger job (docs/explanation/gimbal.md): the smaller runs at
``1/ξ_s``, the larger at ``(k/ξ_L + n_L - k) / n_L`` (k of its n_L workers shared). A pair is a
candidate if its GPU-weighted throughput beats the larger job alone.

Preemption overhead: the project default, 63 s checkpoint-restore (Lyra §7.5), like the other
preemptive baselines; Gavel's simulator charges none (replay with ``preemption_overhead_s=0``).
"""

from __future__ import annotations

import math
from bisect import insort
from itertools import islice
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pydantic import Field, model_validator

from schedlab.sched.estimators.params import KnowledgeParams
from schedlab.sched.policies.base import Policy
from schedlab.sched.policies.gavel.lp import STAGE_TOLERANCE, RepeatSolver, build_problem
from schedlab.sched.policies.packing import fewest_servers

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job

ALLOCATION_FLOOR = 1e-6  # LP values below this are solver dust, not an allocation
_ROUND = "gavel-round"
_LAST = (math.inf, math.inf)  # after every fill rank


class GavelParams(KnowledgeParams):
    objective: Literal["max_min_fairness", "makespan"] = "max_min_fairness"
    round_s: float = Field(default=360.0, gt=0, description="round length (Gavel §5: 6 minutes)")
    reallocation_interval_s: float = Field(
        default=1920.0, ge=0, description="least time between LP re-solves (Gavel scheduler.py default)"
    )
    resolve_after_start: bool = Field(
        default=True, description="Gavel's simulator: a re-solve at time 0 does not start the interval")
    refine_tolerance: float = Field(
        default=STAGE_TOLERANCE, ge=0, lt=1,
        description="how far below its optimum (relative) the LP's second stage may push the minimum")
    allocation_decimals: int | None = Field(
        default=None, ge=1, le=15, description="round the LP's X to this many decimals (None: as solved)")
    max_jobs_in_lp: int = Field(default=100, ge=1, description="oldest active jobs the LP allocates")
    max_partners_per_job: int = Field(
        default=8, ge=1, description="a job's best partners (by combined throughput) kept as LP pair columns"
    )
    space_sharing: bool = Field(default=True, description="consider pairs (Gavel's packing variants)")
    mode: Literal["timeslice", "mps"] = Field(default="timeslice", description="Gavel measured time-slicing")
    unequal: bool = Field(default=False, description="Gimbal §5.1: also pair jobs of different GPU counts")

    @model_validator(mode="after")
    def _reads_durations(self) -> GavelParams:
        if self.knowledge == "estimate" and self.objective != "makespan":
            raise ValueError(f"knowledge: estimate changes nothing with objective {self.objective!r}, which reads no"
                             " durations (only makespan does)")
        return self


class Gavel(Policy):
    name = "gavel"
    summary = "round-based LP allocation over single jobs and space-sharing pairs (max-min fairness or makespan)"
    paper = "Gavel (OSDI'20) §3.1 (combinations, effective throughput), §4.1-4.2 (objectives), §5 (rounds)"
    simplified = (
        "one GPU type; pairs of equal GPU count only (unequal=True: Gimbal's relaxation); LP over the oldest max_jobs_in_lp jobs and each job's"
        " max_partners_per_job best partners; ties refined by max total throughput; equal priority weights;"
        " ξ known (no throughput estimation, §6); placement by the engine's strategy; rounds of exactly round_s"
        " (Gavel's simulator runs whole steps: a job gets round_s less a fraction of a step)"
    )
    Params = GavelParams
    shares_gpus = True
    runs_without_workloads = True  # no job types: max-min fairness over time slices, nothing packed
    # every round preempts the jobs not chosen again (Gavel §5 checkpoints them): a job that restarts
    # from zero when preempted and needs more than its slices would never finish
    needs = frozenset({"checkpoint"})
    waits_when_refused = True  # a combination whose placement is refused does not run that round (_start_alone)

    def __init__(self, params: GavelParams | None = None) -> None:
        super().__init__(params)
        self.active: dict[int, Job] = {}  # job index -> job, in arrival order
        self.alloc: dict[tuple[int, ...], float] = {}  # combination (job indexes) -> X
        self.received: dict[tuple[int, ...], float] = {}  # seconds run since the last re-solve
        self.deficit: dict[tuple[int, ...], float] = {}  # owed time carried across re-solves
        self.finished: list[int] = []  # jobs finished since the last re-solve (their deficits go then)
        self.pair_deficits: dict[int, list[tuple[int, ...]]] = {}  # job index -> pairs with it in ``deficit``
        self.current: dict[tuple[int, ...], None] = {}  # combinations running this round (as a set)
        self.round_start = 0.0
        self.last_solve = -math.inf
        self.interval_start = -math.inf  # when the re-solve interval last started (see _reallocate)
        self.stale = False
        self.round_due = False
        self.timer_seq = 0
        self.pairs: dict[tuple, tuple[float, float] | None] = {}  # (model, batch) x 2 -> rates or None
        self.gains: dict[tuple, float | None] = {}  # (kind, kind) -> a pair's ranking gain or None
        self.combos_of: dict[int, list[tuple[int, ...]]] = {}  # job index -> its combinations in alloc
        self.table = _AllocTable({}, {}, {})  # the allocation as arrays, for ranking it each round
        self.lp_solve_times: list[float] = []  # seconds per re-solve (both LP stages)
        self.lp = RepeatSolver()  # an identical re-solve returns the previous solution (same answer)
        # fill ranks of the active jobs without a solo allocation: ``fill_of``, index -> its entry
        # (-(deficit - received), index) of its solo combination (see _refill); ``fill``, a sorted list of
        # those entries and of replaced ones, left behind when a rank changes: an entry counts while it
        # *is* ``fill_of[index]`` (see _fill_order), and a compaction drops the others
        self.fill: list[tuple[float, int]] = []
        self.fill_of: dict[int, tuple[float, int]] = {}
        self.round_times: list[float] = []  # when each round started
        # a middleware under Gavel (Gimbal §3, §6) may supply the throughputs it measured for a job pair
        # after calibrating it: ``(a, b) -> (rate_a, rate_b)`` normalised to solo, or None (see _lp_rates)
        self.measured_rates: Callable[[Job, Job], tuple[float, float] | None] | None = None

    # ---- events ------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        times = np.asarray(self.lp_solve_times) if self.lp_solve_times else np.zeros(1)
        return {"lp_solves": len(self.lp_solve_times), "lp_solve_mean_s": float(times.mean()),
                "lp_solve_p99_s": float(np.percentile(times, 99))}

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        self.active[job.index] = job
        self._refill([job.index])
        self.stale = True
        if not engine.running:
            self.round_due = True  # idle cluster: start a round now (a pending timer becomes stale)

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        del self.active[job.index]
        self.stale = True
        i = job.index
        # the combinations with job i: those of the allocation (indexed at the re-solve) and i alone;
        # ``received`` holds no others (it restarts at each re-solve and counts planned combinations).
        # ``current`` holds no others either (a round plans from the allocation and solo jobs).
        # ``deficit`` keeps its entries until the next re-solve: nothing reads a finished job's.
        self.finished.append(i)
        for key in (*self.combos_of.pop(i, ()), (i,)):
            self.alloc.pop(key, None)
            self.received.pop(key, None)
            self.current.pop(key, None)
        self.fill_of.pop(i, None)  # its entry in ``fill`` no longer counts

    def on_timer(self, engine: PolicyEngine, payload: Any) -> None:
        if payload == (_ROUND, self.timer_seq):
            self.round_due = True

    def schedule(self, engine: PolicyEngine) -> None:
        if not self.round_due:
            return
        self.round_due = False
        now = engine.now
        ran, received, fill_of, ranked = now - self.round_start, self.received, self.fill_of, []
        at, table_received = self.table.position.get, self.table.received
        for key in self.current:
            received[key] = got = received.get(key, 0.0) + ran
            p = at(key)
            if p is not None:
                table_received[p] = got
            elif key[0] in fill_of and len(key) == 1:
                ranked.append(key[0])
        self._refill(ranked)
        self.current = {}
        self.timer_seq += 1  # invalidates a pending timer when a round starts early
        if not self.active:
            return
        if self.stale and (now - self.interval_start >= self.params.reallocation_interval_s or not self.alloc):
            self._reallocate(engine)
        self._apply(engine, self._plan(engine))
        self.round_start = now
        self.round_times.append(now)
        engine.set_timer(now + self.params.round_s, (_ROUND, self.timer_seq))

    # ---- allocation (Gavel §3.1, §4) ---------------------------------------------------------
    def _reallocate(self, engine: PolicyEngine) -> None:
        now = engine.now
        span = now - self.last_solve
        deficit, pair_deficits = self.deficit, self.pair_deficits
        if math.isfinite(span):  # Gavel: deficit += time it should have had - time it had
            aget, rget, dget = self.alloc.get, self.received.get, deficit.get
            for key in self.alloc.keys() | self.received.keys():
                old = dget(key)
                if old is None:
                    old = 0.0
                    if len(key) > 1:
                        for i in key:
                            pair_deficits.setdefault(i, []).append(key)
                deficit[key] = old + (aget(key, 0.0) * span - rget(key, 0.0))
        # the jobs whose fill rank may change: those with a solo allocation before or after. A fill job
        # (X = 0) keeps its rank: -(deficit - received) before, -(deficit + (0.0 - received)) after, as
        # its received time moves into its deficit (equal, up to the sign of a zero, which ranks alike)
        moved = {k[0] for k in self.alloc if len(k) == 1}
        self.received = {}
        active = self.active
        for i in self.finished:  # drop the deficits of finished jobs' combinations (kept since they ended)
            deficit.pop((i,), None)
            for key in pair_deficits.pop(i, ()):
                deficit.pop(key, None)
        self.finished = []
        jobs = list(islice(self.active.values(), self.params.max_jobs_in_lp))
        combos, rates = self._combinations(engine, jobs)
        problem = build_problem([j.num_gpus for j in jobs], combos, rates, engine.cluster.total_gpus)
        remaining = [self.remaining(engine, j) for j in jobs] if self.params.objective == "makespan" else None
        solution = self.lp.solve(problem, self.params.objective, remaining, self.params.refine_tolerance)
        self.lp_solve_times.append(solution.seconds)
        x = solution.x  # the combinations above the floor, in column order (the same dict as a loop over all)
        digits = self.params.allocation_decimals
        xs, alloc, combos_of = (x if digits is None else np.round(x, digits)).tolist(), {}, {}
        for c in np.flatnonzero(x > ALLOCATION_FLOOR).tolist():
            combo = combos[c]
            if len(combo) == 1:
                i = jobs[combo[0]].index
                alloc[i,] = xs[c]
                combos_of.setdefault(i, []).append((i,))
            else:
                key = tuple(sorted(jobs[p].index for p in combo))
                alloc[key] = xs[c]
                for i in key:
                    combos_of.setdefault(i, []).append(key)
        self.alloc, self.combos_of = alloc, combos_of
        self.table = _AllocTable(alloc, deficit, {j.index: j.num_gpus for j in jobs})
        self.last_solve = now
        self.interval_start = -math.inf if now == 0 and self.params.resolve_after_start else now
        self.stale = False
        moved.update(i for (i, *rest) in alloc if not rest)
        self._refill([i for i in moved if (i,) not in alloc and i in active], [i for i in moved if (i,) in alloc])

    def _combinations(self, engine: PolicyEngine, jobs: list[Job]):
        """Every job alone, then for each job its ``max_partners_per_job`` best pairs: partners with
        the same GPU count (Gavel packs equal scale factors only), best combined throughput first,
        oldest first among equals. Pair rates are computed once per workload kind, not per job pair."""
        n = len(jobs)
        combos: list[tuple[int, ...]] = [(p,) for p in range(n)]
        rates: list[tuple[float, ...]] = [(1.0,)] * n
        if not self.params.space_sharing or engine.sharing is None:
            return combos, rates
        unequal = self.params.unequal
        kinds: dict[tuple, list[int]] = {}  # (GPUs, model, batch) -> positions, oldest first
        for p, job in enumerate(jobs):
            if job.model is not None and job.batch_size == job.batch_size:
                kinds.setdefault((job.num_gpus, job.model, job.batch_size), []).append(p)
        ranked: dict[tuple, list[tuple]] = {}  # kind -> partner kinds, best pair first
        gains = self.gains
        for ka, pa in kinds.items():
            options = []
            for kb, pb in kinds.items():
                if (ka, kb) not in gains:  # a pure function of the two kinds (``pairs`` keeps its entries)
                    pair = self._pair_rates(engine, jobs[pa[0]], jobs[pb[0]]) if kb[0] == ka[0] or unequal else None
                    gains[ka, kb] = None if pair is None else (
                        sum(pair) if kb[0] == ka[0] else (ka[0] * pair[0] + kb[0] * pair[1]) / max(ka[0], kb[0]))
                gain = gains[ka, kb]
                if gain is not None:
                    options.append((-gain, pb[0], kb))
            ranked[ka] = [kb for *_, kb in sorted(options)]
        chosen: dict[tuple[int, int], tuple[float, float]] = {}
        most = self.params.max_partners_per_job
        for ka, members in kinds.items():
            # a job's partners: the first ``most`` of its kind's partner list that are not itself, i.e.
            # of the list's first ``most + 1`` (the job appears in it once at most)
            head = list(islice((q for kb in ranked[ka] for q in kinds[kb]), most + 1))
            for p in members:
                partners = [q for q in head if q != p]
                for q in partners[:most]:
                    key = (p, q) if p < q else (q, p)
                    if key not in chosen:
                        chosen[key] = self._lp_rates(engine, jobs[key[0]], jobs[key[1]])
        for key in sorted(chosen):
            combos.append(key)
            rates.append(chosen[key])
        return combos, rates

    def _lp_rates(self, engine: PolicyEngine, a: Job, b: Job) -> tuple[float, float] | None:
        """The LP column of pair (a, b): the rates ``measured_rates`` supplies (Gavel's physical
        scheduler feeds its LP the throughputs measured while a pair runs, §6), else the estimate of
        :meth:`_pair_rates`. Measured rates are used as they are, even if the pair lost: Gavel's code
        keeps every pair with non-zero throughput. Plain Gavel has no ``measured_rates``."""
        if self.measured_rates is not None:
            measured = self.measured_rates(a, b)
            if measured is not None:
                return measured
        return self._pair_rates(engine, a, b)

    def _pair_rates(self, engine: PolicyEngine, a: Job, b: Job) -> tuple[float, float] | None:
        """Normalised throughputs (1/ξ_a, 1/ξ_b) of a useful pair, or None (cached per workload pair).
        Unequal pairs: the larger job's rate with LISS over its shared and unshared workers (A14)."""
        na, nb = a.num_gpus, b.num_gpus
        key = (a.model, a.batch_size, b.model, b.batch_size) if na == nb else (
            a.model, a.batch_size, na, b.model, b.batch_size, nb)
        if key not in self.pairs:
            rates = None
            if engine.sharing.fits_together(a, b):
                xi_a, xi_b = engine.sharing.ratio(a, b, self.params.mode)
                if math.isfinite(xi_a) and math.isfinite(xi_b):
                    if na == nb:
                        if 1 / xi_a + 1 / xi_b > 1:
                            rates = (1 / xi_a, 1 / xi_b)
                    else:
                        big, small = max(na, nb), min(na, nb)
                        r_a = (small / xi_a + na - small) / na if na > nb else 1 / xi_a
                        r_b = (small / xi_b + nb - small) / nb if nb > na else 1 / xi_b
                        if na * r_a + nb * r_b > big:
                            rates = (r_a, r_b)
            self.pairs[key] = rates
        return self.pairs[key]

    # ---- rounds (Gavel §5) -------------------------------------------------------------------
    def _refill(self, indexes: list[int], dropped: Iterable[int] = ()) -> None:
        """Re-rank jobs ``indexes`` in ``fill`` (their time received changed, or they arrived) and take
        jobs ``dropped`` out of it (they got a solo allocation). Job i's rank is ``(-(deficit + X·since
        - received), i)`` of ``(i,)``, for a job with no solo allocation (X = 0): ``X·since`` is then
        ``0.0`` whatever ``since``, so the rank changes only when its deficit (at a re-solve) or its
        time received (after a round it ran) does. A replaced entry stays in the list (skipped) until
        they are more than a quarter of the live ones; then the list is compacted."""
        fill, fill_of = self.fill, self.fill_of
        dget, rget = self.deficit.get, self.received.get
        for i in dropped:
            fill_of.pop(i, None)
        if 8 * len(indexes) < len(fill):
            for i in indexes:
                key = (i,)
                fill_of[i] = entry = (-(dget(key, 0.0) + 0.0 - rget(key, 0.0)), i)
                insort(fill, entry)
        else:  # many: one sort (of a sorted list and the new entries) beats insertions
            entries = [(-(dget(k, 0.0) + 0.0 - rget(k, 0.0)), k[0]) for k in [(i,) for i in indexes]]
            fill_of.update((e[1], e) for e in entries)
            fill += entries
            fill.sort()
        if len(fill) > len(fill_of) + (len(fill_of) >> 2) + 64:  # replaced entries: more than a quarter
            fill[:] = [e for e in fill if fill_of.get(e[1]) is e]

    def _plan(self, engine: PolicyEngine) -> dict[tuple[int, ...], int]:
        """The combinations to run this round (Gavel §5), in the order chosen, with the GPUs each holds."""
        now, seed = engine.now, self.params.round_s / 2
        alloc, table = self.alloc, self.table
        # a combination's live deficit: its carried deficit + X * (time since the re-solve) - time received
        # (no re-solve yet: no allocation either; ``X · 0.0`` is then the ``0.0`` owed)
        span = now - self.last_solve if math.isfinite(self.last_solve) else 0.0
        x, got = table.x, table.received
        live_deficit = table.deficit + x * span - got
        # Gavel §5: priority X / time received, then deficit, then X (all descending), then the key
        ranked = np.lexsort((table.key_order, -x, -live_deficit, -x / (seed + got))).tolist()
        free = engine.cluster.total_gpus
        active, keys, combo_gpus = self.active, table.keys, table.gpus
        taken: set[int] = set()
        plan: dict[tuple[int, ...], int] = {}
        for p in ranked:
            key, gpus = keys[p], combo_gpus[p]
            if gpus > free or key not in alloc or not taken.isdisjoint(key):  # not in alloc: a job ended
                continue
            plan[key] = gpus
            taken.update(key)
            free -= gpus
            if free == 0:
                return plan
        # leftover jobs alone, largest live deficit first (-(deficit + X·since - received), then index):
        # Gavel's zero-priority fill, as its greedy walks every job. Jobs with a solo allocation are
        # ranked here; the others' ranks do not move with the clock and are kept sorted in ``fill``
        # (_refill): merging the two walks the same order as sorting every job, and stops as soon
        # as the GPUs run out (a job too large for what is left is skipped, as before)
        solo_rank = (-live_deficit).tolist()
        solo = sorted([(solo_rank[p], keys[p][0]) for p in table.solos if keys[p][0] not in taken and keys[p] in alloc])
        for i in self._fill_order(solo):
            if i not in taken:
                gpus = active[i].num_gpus
                if gpus <= free:
                    plan[(i,)] = gpus
                    free -= gpus
                    if not free:
                        break
        return plan

    def _fill_order(self, solo: list[tuple[float, int]]) -> Iterator[int]:
        """Job indexes in fill order: ``solo``'s (sorted ranks of jobs with a solo allocation) merged
        with the live entries of ``fill``."""
        fill_of, s = self.fill_of, 0
        solo.append(_LAST)
        for entry in self.fill:
            if fill_of.get(entry[1]) is entry:
                while solo[s] < entry:
                    yield solo[s][1]
                    s += 1
                yield entry[1]
        for _, i in solo[s:-1]:
            yield i

    def _partners(self, engine: PolicyEngine, job: Job) -> list[Job]:
        """The jobs sharing ``job``'s GPUs (equal pairs hold identical GPU sets: its first GPU says it)."""
        holders = engine.cluster.holders
        if not self.params.unequal:
            return [p for p in holders[job.gpus[0]] if p is not job]
        return list(dict.fromkeys(p for g in job.gpus for p in holders[g] if p is not job))

    def _apply(self, engine: PolicyEngine, plan: dict[tuple[int, ...], int]) -> None:
        target = {i: key for key in plan for i in key}
        running = list(engine.running)
        for job in running:  # not chosen for the next round
            if job.index not in target:
                engine.preempt(job)
        holders, unequal, active = engine.cluster.holders, self.params.unequal, self.active
        if engine.cluster.double_gpus:  # else no running job has a partner
            for job in running:  # chosen, but its current partner is not in its next combination
                # (equal pairs hold identical GPUs: a job alone on its first GPU has no partner)
                if job.gpus and (unequal or len(holders[job.gpus[0]]) > 1) and any(
                    p.index not in target[job.index] for p in self._partners(engine, job)
                ):
                    engine.preempt(job)
        for key in plan:  # a pair whose jobs both ran alone: move the second beside the first
            if len(key) == 2:
                a, b = active[key[0]], active[key[1]]
                if a.num_gpus < b.num_gpus:
                    a, b = b, a  # unequal: the smaller job must run inside the larger one's GPUs
                if a.num_gpus > b.num_gpus and b.running and not a.running:
                    engine.preempt(b)
                if a.running and b.running and b not in self._partners(engine, a):
                    engine.preempt(b)
        self.current = dict.fromkeys(plan)  # (read as a set: the order of ``received`` counts for nothing)
        idle = {target[i] for i in target.keys() - {job.index for job in engine.running}}
        # the combinations with a job to start, big gangs first (Gavel §5; a combination's GPUs: its
        # larger job's), in plan order among equals
        for key in sorted([key for key in plan if key in idle], key=plan.__getitem__, reverse=True):
            if len(key) == 1:
                if not self._start_alone(engine, active[key[0]]):
                    del self.current[key]
                continue
            a, b = active[key[0]], active[key[1]]
            if b.num_gpus > a.num_gpus or (b.num_gpus == a.num_gpus and b.running and not a.running):
                a, b = b, a  # the larger, else the running job anchors the pair
            if not a.running and not self._start_alone(engine, a):
                del self.current[key]  # the pair's GPUs were refused: neither job runs this round
                continue
            if not b.running:
                if b.num_gpus == a.num_gpus:
                    engine.start(b, share_gpus=a.gpus, mode=self.params.mode)
                else:  # Gimbal C2: the fewest servers of the larger job's GPUs
                    gpus = fewest_servers(list(a.gpus), b.num_gpus, engine.cluster.gpus_per_server)
                    engine.start(b, share_gpus=gpus, mode=self.params.mode)

    @staticmethod
    def _start_alone(engine: PolicyEngine, job: Job) -> bool:
        """Start ``job`` on free GPUs. The plan counted GPUs only, so a strict placement
        (``strict-best-fit``, ``strict-consolidated``) may refuse it although enough are free: then it
        does not run this round (no time received; its GPUs stay idle until the next round, as GPUs
        freed mid-round do). A refusal with too few GPUs free is a counting error."""
        if engine.start(job):
            return True
        if job.num_gpus > engine.cluster.free_gpus:
            raise RuntimeError(f"gavel: job {job.job_id} did not fit although its GPUs were counted free")
        return False


class _AllocTable:
    """The combinations of an allocation as arrays, to rank them every round with numpy (Gavel §5):
    ``x`` and the carried ``deficit`` are fixed from one re-solve to the next, ``received`` (seconds
    run since the re-solve) changes after each round the combination ran. Entries stay when a job
    ends (the policy skips combinations no longer in its ``alloc``). ``key_order`` ranks the keys
    as tuples compare (the last tie-breaker); ``gpus``: what each combination holds, its larger job's."""

    def __init__(self, alloc: dict[tuple[int, ...], float], deficit: dict[tuple[int, ...], float],
                 gpus: dict[int, int]) -> None:
        self.keys = list(alloc)
        self.position = {key: p for p, key in enumerate(self.keys)}
        self.x = np.array(list(alloc.values()), dtype=float)
        self.deficit = np.array([deficit.get(key, 0.0) for key in self.keys], dtype=float)
        self.received = np.zeros(len(self.keys))
        self.key_order = np.empty(len(self.keys), dtype=np.int64)
        self.key_order[sorted(range(len(self.keys)), key=self.keys.__getitem__)] = np.arange(len(self.keys))
        self.gpus = [max(gpus[i] for i in key) for key in self.keys]
        self.solos = [p for p, key in enumerate(self.keys) if len(key) == 1]
