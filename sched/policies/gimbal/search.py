"""Gimbal's aggressive packing coordinator: Algorithm 1 (§5.2, "Multi-Job Coordination Search") as a
state machine on engine timers (docs/explanation/gimbal.md), plus the 30 s runtime monitor (§6).

No global tick: a monitor timer is pending only while some set changed membership (or a job that left
a set still runs capped, A10); it fires on the 30 s grid. A search then runs one timer per iteration
(39 s with an LGRR change, 9 s LISS-only, Fig. 14; or ``timing="model"``). Timer payloads are
``("gimbal", set id, set generation, search seq)``; a membership change bumps the generation, so timers of an
aborted search are ignored, and the set is searched again at the next tick.

Objectives (prose of §5.2; signs of eqs. 3, 4 and 6 fixed as docs/explanation/gimbal.md says), with R_j the job's
remaining wall time at a given pace (remaining solo seconds × pace / solo speed; the remaining work is
true, or with ``knowledge: estimate`` the estimator's, ``docs/estimates.md``):
JCT F = mean R_j, prio = −u_j (mean over a subset); deadline F = max lateness max(0, now + R_j − D_j),
prio = −slack (max); makespan F = max R_j, prio = R_j (max). Higher priority is swelled (subset2).
A plan is successful if F at its paces beats F at the best configuration's paces, both on the
remaining work of now (A8). With ``makespan_guard="throughput"`` (OURS, off by default) a plan that
beats F is still unsuccessful if the set's summed throughput Σ 1/pace is below the start's: on a
round-based base that re-pairs jobs, a pair does not co-run to completion as F assumes, and slowing the
pair as a whole slows the cluster's makespan. With ``search_gate="kept"`` (OURS, off by
default) a set formed during the base's current round is searched only after the next round boundary
keeps it (a pair the round re-pairs is never searched: its search would be aborted, its switches
wasted). A plan that would change nothing (caps at the floor, LISS already balanced, a disabled
mechanism) ends the search: the search is deterministic, so it would repeat.
"""

from __future__ import annotations

import math
import time
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from schedlab.sched.core.calibration import CalibrationError
from schedlab.sched.estimators.knowledge import ORACLE

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job
    from schedlab.sched.estimators.knowledge import Estimated, Oracle
    from schedlab.sched.policies.gimbal.job_sets import JobSet, JobSets

TAG = "gimbal"
MONITOR = (TAG, "monitor")
_GAIN = 1e-9  # relative improvement that counts as a gain


@dataclass(eq=False)
class Search:
    jobset: JobSet
    generation: int
    seq: int
    started: float
    subset1: list[Job]
    subset2: list[Job]
    best: dict = field(default_factory=dict)  # job -> (shares, batches)
    best_pace: dict = field(default_factory=dict)  # job -> pace
    measured: bool = False
    start_throughput: float = 0.0  # Σ 1/pace of the start configuration (makespan_guard)
    failures: int = 0
    iterations: int = 0
    lgrr_iterations: int = 0


def _throughput(jobs: list[Job]) -> float:
    """Summed normalised throughput of ``jobs`` (solo = 1 each)."""
    return sum(1.0 / j.pace for j in jobs)


def _config(job: Job) -> tuple[dict, dict | None]:
    w = job.workers
    return dict(w.shares), (None if w.batches is None else dict(w.batches))


class Coordinator:
    def __init__(self, params: Any, sets: JobSets) -> None:
        self.p = params
        self.sets = sets
        #: how R_j's remaining work is read: the truth, or Gimbal's estimator (``Gimbal.use_knowledge``)
        self.knowledge: Oracle | Estimated = ORACLE
        self.searches: dict[int, Search] = {}
        self.pending: dict[int, None] = {}
        self.monitor_at: float | None = None
        self._seq = 0
        # metrics
        self.search_seconds: list[float] = []
        self.step_seconds = array("d")  # wall time of each coordination step (evaluate + next plan)
        self.lgrr_iterations: list[int] = []
        self.lgrr_switches = 0
        self.liss_steps = 0
        self.early_exits = 0
        self.aborted = 0
        self.blocked = 0  # configuration changes refused by the memory check
        self.round_bounds: Callable[[], tuple[float, float]] | None = None  # base round (start, end): search_gate
        self.changed_at: dict[int, float] = {}  # set id -> time of its last membership change (search_gate)
        self.gated = 0  # searches deferred to the next round boundary by search_gate
        self.guard_refusals = 0  # plans better on F refused by makespan_guard (lower summed throughput)
        self.final_shares: list[float] = []
        self.swelled: list[tuple[str, ...]] = []  # subset2 (the swelled, high-priority jobs) of every search
        self.measured: dict[int, dict[int, tuple[float, float]]] = {}  # job i -> partner k -> (rate_i, rate_k)

    # ---- triggers ------------------------------------------------------------------------------
    def request(self, engine: PolicyEngine, jobset: JobSet | None) -> None:
        """A set changed membership (or a job left one): search it / reset at the next monitor tick."""
        if jobset is not None:
            if self.searches.pop(jobset.sid, None) is not None:
                self.aborted += 1
            self.pending[jobset.sid] = None
            if self.round_bounds is not None:
                self.changed_at[jobset.sid] = engine.now
        for sid in [sid for sid in self.searches if sid not in self.sets.sets]:  # dissolved mid-search
            del self.searches[sid]
            self.aborted += 1
        for sid in [sid for sid in self.changed_at if sid not in self.sets.sets]:  # dissolved while gated
            del self.changed_at[sid]
        self._arm(engine)

    def _arm(self, engine: PolicyEngine) -> None:
        tick = self.p.monitor_s * (math.floor(engine.now / self.p.monitor_s) + 1)
        if self.monitor_at is None or self.monitor_at > tick:
            self.monitor_at = tick
            engine.set_timer(tick, MONITOR)

    def on_timer(self, engine: PolicyEngine, payload: tuple) -> None:
        if payload == MONITOR:
            if self.monitor_at is not None and engine.now >= self.monitor_at:
                self.monitor_at = None
                self._tick(engine)
            return
        _, sid, generation, seq = payload
        jobset = self.sets.sets.get(sid)
        if jobset is None or jobset.generation != generation:
            return  # stale: the set changed or dissolved since
        if seq == "research":
            if sid not in self.searches:
                self.request(engine, jobset)
            return
        if seq == "gate":  # a round boundary passed without changing the set: it was kept
            self.pending[sid] = None
            self._arm(engine)
            return
        search = self.searches.get(sid)
        if search is None or search.seq != seq:
            return
        began = time.perf_counter()
        self._evaluate(engine, search)
        self.step_seconds.append(time.perf_counter() - began)

    def _tick(self, engine: PolicyEngine) -> None:
        """The 30 s monitor: reset jobs that left a set (A10), start the pending searches."""
        for job in list(self.sets.released):
            del self.sets.released[job]
            if job.running and job not in self.sets.of and job.workers is not None:
                self._apply(engine, job, dict.fromkeys(job.gpus, 1.0), None)
        pending, self.pending = list(self.pending), {}
        for sid in pending:
            jobset = self.sets.sets.get(sid)
            changed = self.changed_at.pop(sid, -math.inf)
            if jobset is not None and len(jobset.members) > 1:
                if self.round_bounds is not None:
                    began, ends = self.round_bounds()
                    if changed >= began:  # formed in this round: wait for the next boundary
                        self.changed_at[sid] = changed
                        self.gated += 1
                        engine.set_timer(max(ends, engine.now), (TAG, sid, jobset.generation, "gate"))
                        continue
                self._start(engine, jobset)

    # ---- Algorithm 1 ---------------------------------------------------------------------------
    def _start(self, engine: PolicyEngine, jobset: JobSet) -> None:
        lgrr = False
        for job in jobset.members:  # every search starts from all 100 % and nominal batches
            lgrr |= self._apply(engine, job, dict.fromkeys(job.gpus, 1.0), None)
        if not self.p.lgrr:  # the "+LISS" ablation: LISS alone balances the stragglers of the set
            if self.p.liss:
                self._liss_pass(engine, jobset)
                self._measure(jobset)
            return
        jmax = jobset.jmax  # line 1
        subset1, subset2 = [jmax], [j for j in jobset.members if j is not jmax]  # line 2
        if self._priority(engine, subset2) < self._priority(engine, subset1):  # lines 3-4
            subset1, subset2 = subset2, subset1
        self.swelled.append(tuple(j.job_id for j in subset2))
        self._seq += 1
        search = Search(jobset, jobset.generation, self._seq, engine.now, subset1, subset2)
        self.searches[jobset.sid] = search
        self._wait(engine, search, lgrr)  # the first window measures the start configuration

    def busy(self, job: Job) -> bool:
        """Whether ``job``'s set waits for or runs a search (its pace is not final yet)."""
        group = self.sets.of.get(job)
        return group is not None and (group.sid in self.pending or group.sid in self.searches)

    def _evaluate(self, engine: PolicyEngine, search: Search) -> None:
        members = search.jobset.members
        if not search.measured:
            search.measured = True
            search.start_throughput = _throughput(members)
            self._keep(search)
        else:
            left = [self.knowledge.remaining(engine, j) for j in members]  # solo seconds left, the same for both
            now = self._objective(engine, members, left, [j.pace for j in members])
            best = self._objective(engine, members, left, [search.best_pace[j] for j in members])
            better = now < best - _GAIN * abs(best)
            if better and self.p.makespan_guard == "throughput" \
                    and _throughput(members) < search.start_throughput * (1 - _GAIN):
                better = False
                self.guard_refusals += 1
            if better:
                self._keep(search)
                search.failures = 0
            else:
                search.failures += 1
                if search.failures >= self.p.early_exit:  # lines 9-10
                    self.early_exits += 1
                    self._finish(engine, search)
                    return
        self._step(engine, search)

    def _keep(self, search: Search) -> None:
        search.best = {j: _config(j) for j in search.jobset.members}
        search.best_pace = {j: j.pace for j in search.jobset.members}

    def _step(self, engine: PolicyEngine, search: Search) -> None:
        """Lines 7 and 11-20: generate and apply one plan, then wait one iteration."""
        plan = self._primitives(engine, search)
        if plan is None:
            search.failures += 1
            self._finish(engine, search)
            return
        kind, changes = plan
        for job, value in changes.items():
            if kind == "lgrr":
                self._apply(engine, job, value, job.workers.batches, checked=True)
            else:
                engine.calibrate(job, batches=value)
                self.liss_steps += 1
        search.iterations += 1
        search.lgrr_iterations += kind == "lgrr"
        self._wait(engine, search, kind == "lgrr")

    def _primitives(self, engine: PolicyEngine, search: Search) -> tuple[str, dict] | None:
        jmax = search.jobset.jmax
        slow = self._slow_workers(engine, jmax)  # line 11
        if not slow:  # lines 12-13: squeeze subset1 (LGRR −granularity on every worker)
            return self._squeeze(engine, {j: list(j.gpus) for j in search.subset1})
        if jmax in search.subset1:  # lines 15-17: LISS inside J_max
            if not self.p.liss:
                return None
            try:
                batches = engine.calibration.liss_batches(jmax)
            except CalibrationError:  # the global batch does not fit the workers' memory bounds
                return None
            current = jmax.workers.batches or dict.fromkeys(jmax.gpus, jmax.batch_size)
            return None if batches == current else ("liss", {jmax: batches})
        workers: dict[Job, list[int]] = {}  # lines 19-20: squeeze the partners of the slow workers
        for g in slow:
            for other in engine.cluster.holders[g]:
                if other is not jmax:
                    workers.setdefault(other, []).append(g)
        return self._squeeze(engine, workers) if workers else None

    def _squeeze(self, engine: PolicyEngine, workers: dict[Job, list[int]]) -> tuple[str, dict] | None:
        step, floor = self.p.granularity, self.p.min_share
        changes = {}
        for job, gpus in workers.items():
            current = job.workers.shares
            shares = {g: round(max(floor, current[g] - step), 6) for g in gpus}
            if any(shares[g] != current[g] for g in gpus):
                if engine.calibration.check(job, shares, None, switching=True) is not None:
                    return None  # no room for the switching context: the search cannot go on
                changes[job] = shares
        return ("lgrr", changes) if changes else None

    def _slow_workers(self, engine: PolicyEngine, job: Job) -> list[int]:
        """GetWorkers (A6): GPUs whose iteration time is within ε of the worst, if the spread > ε."""
        view = engine.calibration.worker_times(job)  # worker_view's (GPU, t_w) only: same values
        times = [t for _, t in view]
        worst, eps = max(times), self.p.straggler_eps
        if worst <= (1 + eps) * min(times):
            return []
        return [g for g, t in view if t >= worst / (1 + eps)]

    def _finish(self, engine: PolicyEngine, search: Search) -> None:
        """Restore the best configuration, balance the remaining stragglers (A5), record the search."""
        del self.searches[search.jobset.sid]
        for job, (shares, batches) in search.best.items():
            if job.running and _config(job) != (shares, batches):
                self._apply(engine, job, shares, batches)
        if self.p.liss:
            self._liss_pass(engine, search.jobset)
        self._measure(search.jobset)
        self.search_seconds.append(engine.now - search.started)
        self.lgrr_iterations.append(search.lgrr_iterations)
        self.final_shares.extend(p for j in search.jobset.members for p in j.workers.shares.values())
        if self.p.research_s is not None:
            payload = (TAG, search.jobset.sid, search.jobset.generation, "research")
            engine.set_timer(engine.now + self.p.research_s, payload)

    def _liss_pass(self, engine: PolicyEngine, jobset: JobSet) -> None:
        for job in jobset.members:
            if job.num_gpus > 1 and self._slow_workers(engine, job):
                try:
                    batches = engine.calibration.liss_batches(job)
                except CalibrationError:
                    continue
                pace = job.pace
                before = _config(job)[1]
                engine.calibrate(job, batches=batches)
                if job.pace > pace:  # integer rounding made it worse: undo
                    engine.calibrate(job, batches=before or dict.fromkeys(job.gpus, job.batch_size))
                else:
                    self.liss_steps += 1

    # ---- helpers -------------------------------------------------------------------------------
    def _measure(self, jobset: JobSet) -> None:
        """The monitor's throughputs of a calibrated pair (solo = 1), for a base that asks (Gavel's LP)."""
        if len(jobset.members) == 2:
            a, b = jobset.members
            rates = (1.0 / a.pace, 1.0 / b.pace)
            self.measured.setdefault(a.index, {})[b.index] = rates
            self.measured.setdefault(b.index, {})[a.index] = rates[::-1]

    def measured_rates(self, a: Job, b: Job) -> tuple[float, float] | None:
        """The rates of pair (a, b), in that order, after its last calibration, or None if never calibrated."""
        return self.measured.get(a.index, {}).get(b.index)

    def forget(self, job: Job) -> None:
        """``job`` finished: drop its measured pairs."""
        for other in self.measured.pop(job.index, ()):
            self.measured[other].pop(job.index, None)

    def _apply(self, engine: PolicyEngine, job: Job, shares: dict, batches: dict | None, checked: bool = False) -> bool:
        """Set caps (paying the LGRR stall if any changes) and batches; True if a cap changed.
        ``checked``: :meth:`_squeeze` has just checked these caps (the same check ``calibrate`` would
        repeat; caps changed since on other jobs do not enter it, only batches do), so it is skipped."""
        w = job.workers
        switch = any(w.shares.get(g) != p for g, p in shares.items())
        same_batches = (w.batches is None and batches is None) or w.batches == batches
        if not switch and same_batches:
            return False
        target = batches if batches is not None else dict.fromkeys(job.gpus, job.batch_size)
        try:
            engine.calibration.calibrate(job, shares, None if same_batches else target,
                                  self.p.lgrr_stall_s if switch else 0.0, checked=checked)
        except CalibrationError:  # no memory for the switching context (or the batches): keep it as it is
            self.blocked += 1
            return False
        self.lgrr_switches += switch
        return switch

    def _wait(self, engine: PolicyEngine, search: Search, lgrr: bool) -> None:
        if self.p.timing == "paper":
            length = self.p.iter_lgrr_s if lgrr else self.p.iter_liss_s
        else:  # §5.2: at most 60 s or 5 steps of the slowest job, plus the switch
            slowest = max(t for j in search.jobset.members for *_, t in engine.worker_view(j))
            length = (self.p.lgrr_stall_s if lgrr else 0.0) + min(self.p.measure_s, self.p.measure_steps * slowest)
        search.seq = self._seq = self._seq + 1
        engine.set_timer(engine.now + length, (TAG, search.jobset.sid, search.generation, search.seq))

    def _remaining_time(self, engine: PolicyEngine, job: Job, pace: float) -> float:
        return self.knowledge.remaining(engine, job) * pace / job.solo_speed

    def _objective(self, engine: PolicyEngine, jobs: list[Job], left: list[float], paces: list[float]) -> float:
        """F of ``jobs`` with ``left`` solo seconds of work at ``paces`` (R_j as :meth:`_remaining_time`)."""
        r = [rem * pace / j.solo_speed for j, rem, pace in zip(jobs, left, paces)]
        objective, now = self.p.objective, engine.now
        if objective == "jct":
            return sum(r) / len(r)
        if objective == "makespan":
            return max(r)
        return max([0.0] + [now + rj - j.deadline for j, rj in zip(jobs, r) if j.deadline == j.deadline])

    def priority(self, engine: PolicyEngine, job: Job) -> float:
        """Per-job priority (higher is swelled): −u_j, −slack, or R_j."""
        objective = self.p.objective
        if objective == "jct":
            return -engine.sharing.utilization(job)
        r = self._remaining_time(engine, job, job.pace)
        if objective == "makespan":
            return r
        return -math.inf if job.deadline != job.deadline else engine.now + r - job.deadline

    def _priority(self, engine: PolicyEngine, subset: list[Job]) -> float:
        values = [self.priority(engine, j) for j in subset]
        return sum(values) / len(values) if self.p.objective == "jct" else max(values)

    def metrics(self) -> dict[str, float]:
        seconds, steps = sorted(self.search_seconds), sorted(self.step_seconds)
        p95 = seconds[min(len(seconds) - 1, math.ceil(0.95 * len(seconds)) - 1)] if seconds else 0.0
        ours = {} if self.p.makespan_guard == "none" else {"gimbal_guard_refusals": self.guard_refusals}
        if self.p.search_gate != "none":
            ours["gimbal_gated_searches"] = self.gated
        return {
            **ours,  # only with the guard on: the default summaries (and their digests) are unchanged
            "gimbal_searches": len(seconds),
            "gimbal_search_mean_s": sum(seconds) / len(seconds) if seconds else 0.0,
            "gimbal_search_p95_s": p95,
            "gimbal_searches_aborted": self.aborted,
            "gimbal_lgrr_switches": self.lgrr_switches,
            "gimbal_liss_steps": self.liss_steps,
            "gimbal_early_exits": self.early_exits,
            "gimbal_blocked_switches": self.blocked,
            "gimbal_mean_final_share": sum(self.final_shares) / len(self.final_shares) if self.final_shares else 1.0,
            "gimbal_steps": len(steps),
            "gimbal_step_mean_us": 1e6 * sum(steps) / len(steps) if steps else 0.0,
            "gimbal_step_p99_us": 1e6 * steps[min(len(steps) - 1, math.ceil(0.99 * len(steps)) - 1)] if steps else 0.0,
        }
