"""Sharing-aware shortest-job-first: ``sjf-ffs``, ``sjf-bsbf`` and ``castor`` (Castor §5, SJF-BSBF §V).

All three walk the pending jobs shortest first (Alg. 1 line 1: by ``L_k``, the remaining solo time)
and start a job on free GPUs when enough are free. When not, but free GPUs plus GPUs holding one job
(G_OJ) would suffice (line 9), they may put the job beside running jobs, at most two per GPU:

- ``sjf-ffs`` (Castor §9.1 baseline 7, SJF-BSBF §VI-A4): first fit, no questions asked: free GPUs
  first, then G_OJ GPUs in id order whose holder fits in memory beside it, at the requested batch.
- ``sjf-bsbf`` (Alg. 1-2, Theorem 1): for every running job A on G_OJ, Alg. 2 halves the new job's
  per-GPU batch (powers of two, gradient accumulation keeps the global batch) and applies
  Theorem 1 to each feasible batch: share now (κ = 0) or wait for A (κ = t_A i_A). Jobs A with which
  sharing wins are sorted by the pair's average JCT (line 14) and their GPUs taken until the new job
  has enough (lines 15-17). Time-sliced sharing.
- ``castor`` (Castor §4-§8): the same algorithm with MPS spatial sharing (active-thread shares) and
  ξ predictions from a ``predictor`` source (the XGBoost model in the paper); the replay's own
  interference source decides how fast jobs really run, so a wrong prediction costs what it would.
  §9.5's ablations are parameters: ``mode`` (timeslice | mps) and ``predictor`` (any ξ source).

Where the papers are silent we chose, and say so: a job whose beneficial partners hold too few
GPUs completes its gang with free GPUs (Alg. 1 line 9 counts them); the batch of a job placed
beside several partners is the smallest any chosen pair needs. A partner judged at a larger batch
is kept if the pair still fits in memory at the gang's batch (``gang_check: memory``, the default,
with which our tables are measured) or only if Theorem 1 also still says share there
(``gang_check: theorem1``: Alg. 1 line 12 read at the batch the gang really runs). Measured over 10
seeds, theorem1 gives sjf-bsbf-philly 4.74 -> 4.46 h (one seed's 16-GPU job no longer
shares with two 600-h jobs at accumulation 4), sjf-bsbf-pollux 2.00 -> 1.92, castor-pollux castor
0.69 -> 0.68, but sjf-bsbf-pollux-480 2.31 -> 2.63 (a knock-on: earlier large starts hold back
smaller jobs), which puts SJF-BSBF Table IV's sjf-bsbf above sjf-ffs.

Theorem 1 compares the two jobs' remaining times in one unit. The new job's is its nominal solo time
(``L_k``: seconds at goodput 1); by default (``time_to_go: nominal``) the running partner's is counted
the same way, its nominal seconds left at its current pace (plus any restart overhead left). On
fixed-duration jobs that is the engine's expected end. On goodput jobs (docs/explanation/pollux.md) the engine's
expected end divides the nominal seconds left by the current epoch's goodput, far from 1 and changing
over a run (0.07-1.7 at castor-pollux seed 0's sharing decisions, low early in a job), so
``time_to_go: expected_end`` (the policy's earlier rule) mixes units. Castor Alg. 1 counts ``L_k`` as
t_iter x iterations left, and Theorem 1 a running job's time as t_A i_A: both nominal.

Durations read (``docs/estimates.md``): a pending job's ``L_k`` and each running partner's time to go
(its expected end, or its remaining work at its pace), true (``knowledge: oracle``) or estimated
(``knowledge: estimate``: ``L_k`` is the estimate at submission; a partner's time to go falls to 0 once
it outlives its estimate, so that sharing with it never wins). Castor eq. 24's exclusive JCT, a figure
of the engine's for collateral damage, stays on true durations (it is a result, not a decision).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from typing import TYPE_CHECKING

from pydantic import Field

from schedlab.sched.estimators.params import KnowledgeParams
from schedlab.sched.models.interference import InterferenceSource, make_interference
from schedlab.sched.policies.base import Policy

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job


def theorem1(a: float, b: float, b_wait: float, xi_a: float, xi_b: float) -> tuple[bool, float, float]:
    """Castor Theorem 1 / eq. 14-23 for a running job A with ``a`` seconds left and a new job B.

    ``b``: B's solo time as it would start beside A (with its chosen accumulation); ``b_wait``: B's
    solo time if it waits for A and then runs alone. Returns ``(share_now, avg_jct_share, avg_jct_wait)``
    of the pair, measured from now.
    """
    if a * xi_a >= b * xi_b:  # case 1: B finishes first, then A runs alone (eq. 16-17)
        t_b = b * xi_b
        t_a = t_b + (a - t_b / xi_a)
    else:  # case 2: A finishes first, then B runs alone (eq. 20-21 with κ = 0)
        t_a = a * xi_a
        t_b = t_a + (b - t_a / xi_b)
    share = (t_a + t_b) / 2
    wait = (a + a + b_wait) / 2  # κ = t_A i_A: B starts when A ends
    # a tie (e.g. on the boundary 2ξ_B + ξ_A - 2ξ_Aξ_B = 0) means wait, as in the theorem; the
    # tolerance keeps floating-point noise from deciding it
    return share < wait * (1 - 1e-12), share, wait


class SharingParams(KnowledgeParams):
    mode: str = Field(default="timeslice", pattern="^(timeslice|mps)$")
    mps_shares: tuple[float, float] = (50.0, 50.0)  # active-thread % of the new job and its partner
    predictor: str | None = None  # ξ source for decisions; None: the replay's interference source
    # Theorem 1's time to go of a running partner (module docstring): nominal seconds left at its
    # pace, the new job's unit (nominal), or the engine's expected end (expected_end: on goodput jobs,
    # nominal seconds over the current epoch's goodput). Equal on fixed-duration jobs.
    time_to_go: str = Field(default="nominal", pattern="^(nominal|expected_end)$")
    # what a partner judged at a larger batch must still satisfy at the gang's (smaller) batch: fit in
    # memory (memory), or fit and win Theorem 1 (theorem1); module docstring
    gang_check: str = Field(default="memory", pattern="^(memory|theorem1)$")


class CastorParams(SharingParams):
    mode: str = Field(default="mps", pattern="^(timeslice|mps)$")
    # Castor §6: an XGBoost ξ predictor on the §6.1 indicators; shipped: fitted to this project's H200
    # profiles (data/profiles/h200, conf/models/README.md). The Gavel-truth paper set-ups name
    # model:interference-gavel-v100, fitted to the same Gavel pairs as their truth.
    predictor: str | None = "model:interference-h200"


class _SharingSJF(Policy):
    """Alg. 1's frame: pending jobs by remaining solo time, exclusive first, sharing when short."""

    shares_gpus = True
    default_preemption_overhead_s = 0.0  # non-preemptive (Castor §3.3: no preemption or migration)
    Params = SharingParams
    #: a list to record each sharing decision in (``schedlab.studies.sharing_claims``); None: off
    decision_log: list[dict] | None = None

    def __init__(self, params: SharingParams | None = None) -> None:
        super().__init__(params)
        self.pending: list[tuple[float, int, Job]] = []  # sorted by (L_k, trace order)
        self._predictor: InterferenceSource | None = (
            make_interference(self.params.predictor) if self.params.predictor else None
        )
        # feasible (accumulation steps, ξ_new, ξ_running, solo speed) per pair of workloads: ξ and
        # memory depend only on (model, batch, accumulation, GPUs), so each pair is worked out once
        self._options: dict[tuple, list[tuple[int, float, float, float]]] = {}
        # engine.state_version at which a pending job last found no partner. While nothing changes,
        # partners' time-to-go only shrinks, and by eq. 19/23 the benefit of sharing (wait - share)
        # then never grows: with slope 1 in case 1, and in case 2 it is positive only when its
        # slope in a is positive. So the job would fail again; it is skipped until the state changes.
        self._no_partner_at: dict[int, int] = {}

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        insort(self.pending, (self.remaining(engine, job), job.index, job))

    def schedule(self, engine: PolicyEngine) -> None:
        cluster = engine.cluster
        started: set[int] = set()
        for _, index, job in self.pending:
            if cluster.free_gpus + cluster.single_gpus == 0:
                break
            if job.num_gpus <= cluster.free_gpus:
                ok = engine.start(job)
            elif job.num_gpus <= cluster.free_gpus + cluster.single_gpus:
                if self._no_partner_at.get(index) == engine.state_version:
                    continue
                ok = self.share(engine, job)
                if not ok:
                    self._no_partner_at[index] = engine.state_version
            else:
                continue
            if ok:
                started.add(index)
        if started:
            self.pending = [entry for entry in self.pending if entry[1] not in started]
            for index in started:
                self._no_partner_at.pop(index, None)

    def share(self, engine: PolicyEngine, job: Job) -> bool:
        raise NotImplementedError

    @property
    def _shares(self) -> tuple[float, float] | None:
        return self.params.mps_shares if self.params.mode == "mps" else None

    def ratio(self, engine: PolicyEngine, new: Job, running: Job) -> tuple[float, float]:
        """Predicted (ξ_new, ξ_running) for the decision."""
        source = self._predictor or engine.sharing
        return source.ratio(new, running, self.params.mode, self._shares)

    def options(self, engine: PolicyEngine, job: Job, running: Job,
                max_steps: int) -> list[tuple[int, float, float, float]]:
        """Alg. 2's candidate batches B, B/2, … (as accumulation steps up to ``max_steps``) at which
        ``job`` can run beside ``running``, with the predicted ξ of both and ``job``'s solo speed."""
        key = (job.model, job.batch_size, job.num_gpus, running.model, running.batch_size,
               running.accumulation_steps, running.num_gpus, max_steps)
        found = self._options.get(key)
        if found is None:
            found = []
            steps = 1
            while steps <= max_steps and job.batch_size / steps >= 1:
                if engine.can_share(job, running, self.params.mode, self._shares, steps):
                    with engine.accumulating(job, steps):  # the pending job's micro-batch, for the ξ lookup
                        xi_new, xi_running = self.ratio(engine, job, running)
                    if math.isfinite(xi_new) and math.isfinite(xi_running):
                        found.append((steps, xi_new, xi_running, engine.sharing.accumulation_speed(job, steps)))
                steps *= 2
            self._options[key] = found
        return found

    def _start_shared(self, engine: PolicyEngine, job: Job, gpus: list[int], steps: int) -> bool:
        return engine.start(
            job, share_gpus=tuple(gpus), mode=self.params.mode, shares=self._shares, accumulation_steps=steps
        )


class SJFFFS(_SharingSJF):
    name = "sjf-ffs"
    summary = "SJF; when free GPUs are short, first-fit onto GPUs holding one job (greedy sharing)"
    paper = "Castor §9.1 baseline 7; SJF-BSBF §VI-A4"
    simplified = "free GPUs are used first, then GPUs holding one job in id order"

    def share(self, engine: PolicyEngine, job: Job) -> bool:
        needed = job.num_gpus - engine.cluster.free_gpus
        chosen: list[int] = []
        for g in engine.cluster.single_gpu_ids():
            if self.options(engine, job, engine.cluster.holders[g][0], max_steps=1):
                chosen.append(g)
                if len(chosen) == needed:
                    return self._start_shared(engine, job, chosen, 1)
        return False


Option = tuple[int, float, float, float]  # (accumulation steps, ξ_new, ξ_running, solo speed)


def algorithm2(left: float, remaining: float, options: list[Option]) -> tuple[bool, int, float]:
    """Alg. 2 for a running job with ``left`` seconds to go and a new job with ``remaining`` solo
    seconds: over the feasible batches (``options``, B first), Theorem 1's best configuration.
    Returns (share now?, accumulation steps, the pair's average JCT)."""
    best = (False, 1, math.inf)
    for steps, xi_new, xi_running, speed in options:
        share, t_share, t_wait = theorem1(left, remaining / speed, remaining, xi_running, xi_new)
        t = t_share if share else t_wait
        if t <= best[2]:  # Alg. 2 line 7 (ties go to the smaller batch)
            best = (share, steps, t)
    return best


def sharing_threshold(remaining: float, options: list[Option]) -> float:
    """The least time-to-go ``a`` of a running job at which sharing with it can beat waiting for it,
    under any option. From eq. 16-23: in case 1 (a ξ_A >= b ξ_B) sharing wins iff
    a > 2bξ_B - bξ_B/ξ_A - b_wait; in case 2 iff a k < b_wait - b with k = 2ξ_A - ξ_A/ξ_B - 2."""
    lower = math.inf
    for _, xi_new, xi_running, speed in options:
        b = remaining / speed
        case_boundary = b * xi_new / xi_running
        bound = max(case_boundary, 2 * b * xi_new - b * xi_new / xi_running - remaining)
        slope = 2 * xi_running - xi_running / xi_new - 2
        if slope < 0:
            bound = min(bound, (remaining - b) / slope)
        lower = min(lower, bound)
    return lower


class SJFBSBF(_SharingSJF):
    """Alg. 1-2 computed without evaluating every partner: partners are grouped by workload (ξ and
    memory depend only on it) and kept in order of expected end. Within a group the pair's JCT grows
    with the partner's time-to-go, so the best partners are the first ones past the group's
    ``sharing_threshold``; each group is scanned from there only until it could fill the gang.
    ``tests/test_sharing.py`` checks this against the direct evaluation of every partner."""

    name = "sjf-bsbf"
    summary = "SJF with best-sharing-benefit-first: share only when Theorem 1 says it lowers the pair's JCT"
    paper = "SJF-BSBF (Alg. 1-2, Theorem 1); Castor §5"
    simplified = "a gang short of beneficial shared GPUs completes with free GPUs"

    def __init__(self, params: SharingParams | None = None) -> None:
        super().__init__(params)
        self._groups: dict[tuple, tuple[list[float], list[tuple]]] = {}
        self._groups_version: tuple = ()
        # sharing_threshold is proportional to the new job's remaining time (every term of eq. 16-23
        # scales with it), so per (new job's workload, partner group) one factor θ serves every job
        self._theta: dict[tuple, float] = {}
        self._limits: dict[tuple, float] = {}  # per instant: the largest remaining time that can share
        self._limits_at: tuple[int, float] = (-1, -1.0)
        # whether a goodput job has arrived: their nominal time to go reorders the partner groups
        self._goodput_jobs = False

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        super().on_arrival(engine, job)
        self._goodput_jobs = self._goodput_jobs or job.goodput is not None

    def share(self, engine: PolicyEngine, job: Job) -> bool:
        if self.remaining(engine, job) >= self._remaining_limit(engine, job):
            return False  # no partner group has anyone far enough from its end (necessary condition)
        chosen = self._choose(engine, job, self.beneficial(engine, job, enough=job.num_gpus))
        if chosen is None:  # a batch clash skipped partners: look at all of them
            chosen = self._choose(engine, job, self.beneficial(engine, job, enough=None)) or ([], 1)
        gpus, steps = chosen
        if not gpus or len(gpus) + engine.cluster.free_gpus < job.num_gpus:
            return False
        if self.decision_log is None:
            return self._start_shared(engine, job, gpus, steps)
        holders = engine.cluster.holders
        # per partner: Theorem 1's time to go, pace, and its nominal seconds left (not settled here:
        # that would change the replay's floating-point state)
        before = {p: (self._time_to_go(engine, p), p.pace, self.remaining(engine, p),
                      self._time_to_go(engine, p, "nominal"), self._time_to_go(engine, p, "expected_end"))
                  for p in {holders[g][0] for g in gpus}}
        remaining = self.remaining(engine, job)
        ok = self._start_shared(engine, job, gpus, steps)
        if ok:
            self._log_decision(engine, job, remaining, steps, before)
        return ok

    def _log_decision(self, engine: PolicyEngine, job: Job, remaining: float, steps: int,
                      before: dict[Job, tuple[float, float, float, float, float]]) -> None:
        """One record per partner of a sharing start (``decision_log``): what Theorem 1 predicted for
        the pair (eq. 14-23 on the policy's ξ) and what the engine then set (true ξ, the paces)"""
        for partner, (count, xi_job_true) in job.partners.items():
            a, pace_before, nominal_left, nominal_a, end_a = before[partner]
            option = next(o for o in self.options(engine, job, partner, max_steps=1 << 30) if o[0] == steps)
            _, xi_new, xi_running, speed = option
            _, share, wait = theorem1(a, remaining / speed, remaining, xi_running, xi_new)
            self.decision_log.append({
                "time": engine.now, "job": job.job_id, "job_gpus": job.num_gpus, "remaining_s": remaining,
                "steps": steps, "speed": speed, "partner": partner.job_id, "partner_gpus": partner.num_gpus,
                # Theorem 1's time to go as the policy counted it, and both ways (time_to_go)
                "shared_gpus": count, "partner_left_s": a, "partner_nominal_s": nominal_a,
                "partner_end_left_s": end_a, "xi_job_pred": xi_new, "xi_partner_pred": xi_running,
                "xi_job_true": xi_job_true, "xi_partner_true": partner.partners[job][1],
                "job_pace": job.pace, "partner_pace_before": pace_before, "partner_pace": partner.pace,
                "pred_share_s": share, "pred_wait_s": wait, "job_partners": len(job.partners),
                # Castor eq. 24's exclusive start (enough GPUs released at the running jobs' paces), from now;
                # the engine's figure from true durations: not known in estimate mode
                "exclusive_start_s": math.nan if self.knowledge.estimated else
                job.exclusive_jct_estimate + job.submit_time - remaining - engine.now,
                # a goodput job's rate over solo speed / pace (1 for a fixed-duration job): its epoch's goodput
                "partner_nominal_left_s": nominal_left,
                "job_goodput": job.rate * job.pace / job.solo_speed,
                "partner_goodput": partner.rate * partner.pace / partner.solo_speed,
            })

    def beneficial(self, engine: PolicyEngine, job: Job, enough: int | None) -> list[tuple]:
        """Partners with which sharing wins, as (pair JCT, index, steps, partner, GPUs), best first;
        per workload group only until ``enough`` GPUs are found (all if None)."""
        found = []
        remaining = self.remaining(engine, job)
        for key, (ends, members) in self._partner_groups(engine).items():
            threshold = remaining * self._theta_for(engine, job, key, members[0][2])
            if ends[-1] < engine.now + threshold - 1e-9:
                continue
            options = self.options(engine, job, members[0][2], max_steps=1 << 30)
            first = bisect_left(ends, engine.now + threshold - 1e-9)
            got = 0
            for end, index, partner, gpus in members[first:]:
                share, steps, pair_jct = algorithm2(end - engine.now, remaining, options)
                if share:
                    found.append((pair_jct, index, steps, partner, gpus))
                    got += len(gpus)
                    if enough is not None and got >= enough:
                        break
        found.sort(key=lambda entry: entry[:2])
        return found

    def _theta_for(self, engine: PolicyEngine, job: Job, key: tuple, partner: Job) -> float:
        theta_key = (job.model, job.batch_size, job.num_gpus, key)
        theta = self._theta.get(theta_key)
        if theta is None:
            options = self.options(engine, job, partner, max_steps=1 << 30)
            theta = self._theta[theta_key] = sharing_threshold(1.0, options) if options else math.inf
        return theta

    def _remaining_limit(self, engine: PolicyEngine, job: Job) -> float:
        """The largest remaining time a job of this workload may have and still find a partner now."""
        if self._limits_at != (engine.state_version, engine.now):
            self._limits.clear()
            self._limits_at = (engine.state_version, engine.now)
        sig = (job.model, job.batch_size, job.num_gpus)
        limit = self._limits.get(sig)
        if limit is None:
            limit = 0.0
            for key, (ends, members) in self._partner_groups(engine).items():
                theta = self._theta_for(engine, job, key, members[0][2])
                if theta <= 0:
                    limit = math.inf
                elif theta < math.inf:
                    limit = max(limit, (ends[-1] - engine.now) / theta * (1 + 1e-9))
            self._limits[sig] = limit
        return limit

    def _choose(self, engine: PolicyEngine, job: Job, beneficial: list[tuple]) -> tuple[list[int], int] | None:
        """Alg. 1 lines 14-17: take the best partners' GPUs until the gang is full. None if a partner
        had to be skipped because the batch a later pair needs would not run beside it."""
        chosen: list[int] = []
        partners: list[Job] = []
        steps_needed = 1
        skipped = False
        for _, _, steps, partner, gpus in beneficial:
            steps_with = max(steps_needed, steps)
            recheck = partners if steps_with != steps_needed else []
            if steps_with != steps and not self._still_fits(engine, job, partner, steps_with):
                skipped = True  # this pair was judged at a larger batch and cannot run (or no longer wins) at this one
                continue
            if not all(self._still_fits(engine, job, p, steps_with) for p in recheck):
                skipped = True  # the smaller batch this pair needs would not run (or win) beside an earlier partner
                continue
            chosen.extend(gpus[: job.num_gpus - len(chosen)])
            partners.append(partner)
            steps_needed = steps_with
            if len(chosen) == job.num_gpus:
                break
        if skipped and len(chosen) < job.num_gpus:
            return None
        return chosen, steps_needed

    def _still_fits(self, engine: PolicyEngine, job: Job, partner: Job, steps: int) -> bool:
        """Whether ``job`` runs beside ``partner`` at ``steps`` accumulation steps (``gang_check:
        memory``) and, with ``gang_check: theorem1``, Theorem 1 still says share there (Alg. 1 line 12
        at the batch the gang will really use: a pair judged at a larger batch may lose at a smaller
        one, the slower solo speed outweighing the wait)."""
        if self.params.gang_check == "memory":
            return engine.can_share(job, partner, self.params.mode, self._shares, steps)
        option = [o for o in self.options(engine, job, partner, max_steps=steps) if o[0] == steps]
        return bool(option) and algorithm2(self._time_to_go(engine, partner), self.remaining(engine, job), option)[0]

    def _time_to_go(self, engine: PolicyEngine, partner: Job, kind: str | None = None) -> float:
        """Theorem 1's time to go of a running partner as ``kind`` counts it (default: the
        ``time_to_go`` parameter; module docstring)."""
        if (kind or self.params.time_to_go) == "expected_end" or partner.goodput is None:
            return self.expected_end(engine, partner) - engine.now  # fixed duration: the two are the same
        return engine.stall_left(partner) + self.remaining(engine, partner) * partner.pace / partner.solo_speed

    def _partner_groups(self, engine: PolicyEngine) -> dict[tuple, tuple[list[float], list[tuple]]]:
        """Running jobs that hold GPUs alone, grouped by workload, in order of the time-to-go end
        (now + :meth:`_time_to_go`). On the engine's expected end (and with no goodput jobs) that is
        the engine's order, rebuilt only when its state changes; a goodput partner's nominal time to
        go falls at its goodput, so partners may overtake each other: rebuilt at each instant; so are
        estimated ends (a partner past its estimate ends now, whenever now is)."""
        version: tuple = (engine.state_version,)
        nominal = self.params.time_to_go == "nominal" and self._goodput_jobs
        if nominal or self.knowledge.estimated:
            version = (engine.state_version, engine.now)
        if self._groups_version != version:
            holders = engine.cluster.holders
            self._groups = {}
            for end, index, partner in self.ends(engine):
                if partner.partners and sum(c for c, _ in partner.partners.values()) == partner.num_gpus:
                    continue  # every GPU of it already holds two jobs
                gpus = [g for g in partner.gpus if len(holders[g]) == 1]
                key = (partner.model, partner.batch_size, partner.accumulation_steps, partner.num_gpus)
                ends, members = self._groups.setdefault(key, ([], []))
                if nominal and partner.goodput is not None:
                    end = engine.now + self._time_to_go(engine, partner)
                ends.append(end)
                members.append((end, index, partner, gpus))
            if nominal:
                for key, (ends, members) in self._groups.items():
                    members.sort(key=lambda m: m[:2])
                    ends[:] = [m[0] for m in members]
            self._groups_version = version
        return self._groups


class Castor(SJFBSBF):
    name = "castor"
    summary = "SJF-BSBF with MPS spatial sharing and predicted interference ratios"
    paper = "Castor §4-§8 (journal version of SJF-BSBF)"
    simplified = "MPS shares fixed per run (mps_shares); ξ predictions from `predictor`"
    Params = CastorParams
