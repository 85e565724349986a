"""``gimbal-jct``, ``gimbal-deadline``, ``gimbal-makespan``: Gimbal's flexible job packing over a base
scheduler (P. Yang et al., "Taming Flexible Job Packing in Deep Learning Training Clusters", 2025;
``docs/explanation/gimbal.md``).

Gimbal is a middleware (§3, Fig. 3): an upper scheduler decides which jobs are packed; Gimbal tunes
the workers of every packed combination at run time with two primitives mapped on two mechanisms
(§4): LGRR, MPS caps in 10 % steps with a 3.6 s switch stall (§4.1, §7.4), and LISS, lossless input
sample stealing between a job's workers (§4.1-4.2), through the engine's ``calibrate`` (see
``sched/core/calibration.py``). Its coordinator runs Algorithm 1 (§5.2) on every job packing set (§5.1,
``job_sets.py``) after the set changes, as a state machine on timers (``search.py``).

Each policy wraps its paper's base (§7.1): ``gimbal-jct`` = Lucid (JCT, eqs. 1-2), ``gimbal-deadline``
= Gandiva extended with deadlines (eqs. 3-4), ``gimbal-makespan`` = Gavel's makespan policy (eqs. 5-6).
The base runs unchanged behind an engine proxy that observes its starts and preemptions (to keep the
sets current), namespaces its timers, runs its packs under MPS and refuses packs that break §5.1.
Durations read (``docs/estimates.md``): Algorithm 1's R_j (each packed job's remaining work) and
whatever its base reads (Lucid: each job's duration; Gavel's makespan LP: remaining work; Gandiva:
none); with ``knowledge: estimate`` both read the same estimator's figures.
The relaxations (§7.2) the wrapper asks of its base: Lucid packs jobs larger than one server and, with
LGRR on, pairs with a summed sharing score up to 3 (A12); Gavel solves its makespan LP with MPS rates
and, with ``feed_rates`` (default), with the throughputs of every pair Gimbal has calibrated, measured
when its calibration ended (1 / pace per job), in place of Gavel's free-competition estimate (OURS: the
paper's Gavel runs on the testbed, where its throughputs are the calibrated jobs' own);
``unequal`` / ``max_jobset`` (and Gandiva's ``order=edf``) are passed to a base whose parameters have
them. Ablation flags (Fig. 12): ``unequal`` (packs of different GPU counts), ``liss``, ``lgrr``.
Two options of OURS, off by default: ``makespan_guard: throughput`` keeps a configuration
Algorithm 1 finds better on max R_j only if the set's summed throughput is not below the start's, and
``search_gate: kept`` searches a set over Gavel only once a round boundary kept it.
Placement: §5.1 puts each job "on the theoretically smallest number of nodes", so Gimbal's set-ups
(``conf/experiments/gimbal-*.yaml``) replay under ``strict-best-fit``; a start it refuses leaves the
job waiting in its base, which decides what runs instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from schedlab.sched.core.calibration import Calibration
from schedlab.sched.core.protocol import POLICY_MEMBERS
from schedlab.sched.estimators.params import KnowledgeParams
from schedlab.sched.policies.base import Policy
from schedlab.sched.policies.gimbal.search import TAG, Coordinator
from schedlab.sched.policies.gimbal.job_sets import JobSets

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.core.job import Job

_BASE = "gimbal-base"
UNLIMITED_PACK_GPUS = 1 << 20


class GimbalError(RuntimeError):
    pass


class GimbalParams(KnowledgeParams):
    base: Literal["lucid", "gandiva", "gavel"] = "lucid"
    objective: Literal["jct", "deadline", "makespan"] = "jct"
    base_params: dict[str, Any] = Field(default_factory=dict, description="the base policy's parameters (override)")
    unequal: bool = Field(default=True, description="packs of different GPU counts (Fig. 12 step 1), if the base can")
    liss: bool = Field(default=True, description="LISS: sample stealing inside a job (Fig. 12 step 2)")
    lgrr: bool = Field(default=True, description="LGRR: MPS caps and Algorithm 1's search (Fig. 12 step 3)")
    granularity: float = Field(default=0.1, gt=0, le=0.5, description="MPS cap step (§4.1, Fig. 13: 10 %)")
    min_share: float = Field(default=0.1, gt=0, le=1, description="lowest MPS cap (0 % would stop the job)")
    early_exit: int = Field(default=3, ge=1, description="unsuccessful plans in a row that end a search (§5.2)")
    monitor_s: float = Field(default=30.0, gt=0, description="runtime monitor period (§6)")
    lgrr_stall_s: float = Field(default=3.6, ge=0, description="stall per LGRR switch (§7.4)")
    timing: Literal["paper", "model"] = Field(default="paper", description="search iteration lengths (A7)")
    iter_lgrr_s: float = Field(default=39.0, gt=0, description="an iteration with an LGRR change (Fig. 14)")
    iter_liss_s: float = Field(default=9.0, gt=0, description="a LISS-only iteration (Fig. 14)")
    measure_s: float = Field(default=60.0, gt=0, description="timing=model: longest measurement window (§5.2)")
    measure_steps: int = Field(default=5, ge=1, description="timing=model: training steps measured (§5.2)")
    straggler_eps: float = Field(default=0.05, ge=0, description="iteration-time spread that makes stragglers (A6)")
    max_jobset: int = Field(default=5, ge=2, description="most jobs per packing set (§7.4: M <= 5)")
    research_s: float | None = Field(default=None, gt=0, description="search a set again after this (A9)")
    feed_rates: bool = Field(default=True, description="give a base that takes them (Gavel's LP) the pair"
                             " throughputs measured after calibration (§3: Gimbal under the scheduler)")
    makespan_guard: Literal["none", "throughput"] = Field(
        default="none", description="OURS, not the paper's: 'throughput' keeps a configuration Algorithm 1 finds"
        " better on F = max R_j only if the set's summed throughput (Σ 1/pace, solo = 1) is not below the"
        " start's (the search's all-100 % configuration); makespan objective only")

    search_gate: Literal["none", "kept"] = Field(
        default="none", description="OURS, not the paper's: 'kept' searches a set only once a round boundary of"
        " a round-based base (Gavel) has kept it; a set formed during the current round waits for the next")

    @model_validator(mode="after")
    def _our_options(self) -> GimbalParams:
        for name in self.base_params:
            if name in KnowledgeParams.model_fields:
                raise ValueError(f"base_params: {name} is set on the Gimbal policy itself, which passes its"
                                 " knowledge of durations on to its base")
        if self.makespan_guard != "none" and self.objective != "makespan":
            raise ValueError(f"makespan_guard={self.makespan_guard!r} applies to objective 'makespan' only,"
                             f" not {self.objective!r}")
        if self.search_gate != "none" and self.base != "gavel":
            raise ValueError(f"search_gate={self.search_gate!r} needs a round-based base ('gavel'), not {self.base!r}")
        return self


class GimbalJctParams(GimbalParams):
    base: Literal["lucid", "gandiva", "gavel"] = "lucid"
    objective: Literal["jct", "deadline", "makespan"] = "jct"


class GimbalDeadlineParams(GimbalParams):
    base: Literal["lucid", "gandiva", "gavel"] = "gandiva"
    objective: Literal["jct", "deadline", "makespan"] = "deadline"


class GimbalMakespanParams(GimbalParams):
    base: Literal["lucid", "gandiva", "gavel"] = "gavel"
    objective: Literal["jct", "deadline", "makespan"] = "makespan"


def base_defaults(base: str, params: GimbalParams, fields: dict) -> dict[str, Any]:
    """The base policy's parameters under Gimbal (§7.2 relaxations; keys the base does not have are
    left out, so this works before and after the bases learn unequal packing), then ``base_params``."""
    wanted: dict[str, Any] = {"unequal": params.unequal, "max_jobset": params.max_jobset}
    if base == "lucid":
        wanted["max_pack_gpus"] = UNLIMITED_PACK_GPUS if params.unequal else None
        if params.lgrr:  # LGRR tames high-interference pairs (§2.2 L1, A12): a looser score threshold
            wanted["max_pair_score"] = 3
    elif base == "gandiva":
        wanted["order"] = "edf"  # A13: the deadline-aware Gandiva
    elif base == "gavel":
        wanted.update(objective="makespan" if params.objective == "makespan" else None, mode="mps")
    out = {k: v for k, v in wanted.items() if k in fields and v is not None}
    out.update(params.base_params)
    return out


class _EngineProxy:
    """What the base policy sees: the engine, with its starts, preemptions and timers observed."""

    __slots__ = ("_engine", "_gimbal")

    def __init__(self, engine: PolicyEngine, gimbal: Gimbal) -> None:
        self._engine, self._gimbal = engine, gimbal

    def __getattr__(self, name: str) -> Any:
        if name not in POLICY_MEMBERS:  # the base policy sees the engine as any policy does
            raise AttributeError(f"{name!r} is not part of the policy API (sched/core/protocol.py: PolicyEngine)")
        return getattr(self._engine, name)

    def start(self, job: Job, placement=None, *, share_gpus=(), **kwargs) -> bool:
        return self._gimbal._start(self._engine, job, placement, tuple(share_gpus), kwargs)

    def preempt(self, job: Job) -> None:
        self._engine.preempt(job)
        self._gimbal._left(self._engine, job)

    def set_timer(self, at: float, payload: Any = None) -> None:
        self._engine.set_timer(at, (_BASE, payload))

    def calibrating(self, job: Job) -> bool:
        """Whether Gimbal is still searching ``job``'s set (e.g. to defer Gandiva's introspection)."""
        return self._gimbal.coordinator.busy(job)

    def star_violation(self, job: Job, share_gpus: tuple[int, ...]) -> str | None:
        """Why packing ``job`` on ``share_gpus`` would break Gimbal §5.1, or None (for base policies)."""
        return self._gimbal.sets.violation(self._engine.cluster, job, tuple(share_gpus))


class Gimbal(Policy):
    """The wrapper; the registered names are its three subclasses below."""

    summary = "Gimbal"
    paper = "Gimbal (2025)"
    simplified = (
        "MPS-cap slowdowns from the replay's ξ source (default model mpscap: p^-ρ(1+(ξ⁰-1)q^η), ρ=0.5, η=2, OURS);"
        " a worker's speed known exactly (no measurement noise); LISS rebalances in one shot to equal iteration"
        " times (OURS); search iterations of fixed length (39 s LGRR / 9 s LISS, Fig. 14); a search starts at the"
        " first 30 s tick after a set changes and never re-searches unless research_s; priorities of multi-job"
        " subsets: mean (JCT) or max (OURS); eqs. 3, 4, 6 signs as the prose; rule-breaking packs are errors,"
        " not run sequentially (§5 intro); u_j from the catalog's gpu_util, else memory share (OURS); options"
        " makespan_guard and search_gate are OURS (off by default); packs of"
        " different GPU counts only where the base policy makes them (unequal is passed to bases that have it)"
    )
    Params = GimbalParams
    shares_gpus = True
    #: every base (lucid, gandiva, gavel) leaves a job its placement refuses waiting; the wrapper passes
    #: the refusal through (``_start`` returns the engine's answer and changes no set)
    waits_when_refused = True
    capabilities = (Calibration,)  # per-worker caps, batches and ξ (sched/core/calibration.py)

    def __init__(self, params: GimbalParams | None = None) -> None:
        super().__init__(params)
        from schedlab.sched.policies import POLICIES, make_policy  # the registry imports this module

        p = self.params
        base_cls = POLICIES[p.base]
        self.base = make_policy(p.base, base_defaults(p.base, p, base_cls.Params.model_fields))
        self.default_preemption_overhead_s = self.base.default_preemption_overhead_s
        self.default_allocation_stall_s = self.base.default_allocation_stall_s
        self.sets = JobSets(p.max_jobset)
        self.coordinator = Coordinator(p, self.sets)
        if p.search_gate == "kept":  # the validator allows it over Gavel only, whose rounds these are
            base = self.base
            self.coordinator.round_bounds = lambda: (base.round_start, base.round_start + base.params.round_s)
        if p.feed_rates and hasattr(self.base, "measured_rates"):  # Gavel: its LP sees calibrated pairs
            self.base.measured_rates = self.coordinator.measured_rates
        self._proxy: _EngineProxy | None = None
        self._base_due = True  # an event the base policy sees happened since its last pass
        self.use_knowledge(self.knowledge)

    def use_knowledge(self, knowledge) -> None:
        """Its base and its search read durations as it does (the search: R_j's remaining work)."""
        super().use_knowledge(knowledge)
        self.base.use_knowledge(knowledge)
        self.coordinator.knowledge = knowledge

    def _view(self, engine: PolicyEngine) -> _EngineProxy:
        if self._proxy is None or self._proxy._engine is not engine:
            self._proxy = _EngineProxy(engine, self)
        return self._proxy

    # ---- observed actions of the base ------------------------------------------------------------
    def _start(self, engine: PolicyEngine, job: Job, placement, share_gpus: tuple[int, ...], kwargs: dict) -> bool:
        hosts: list[Job] = []
        if share_gpus:
            reason = self.sets.violation(engine.cluster, job, share_gpus)
            if reason is not None:
                raise GimbalError(f"{self.name}: base policy {self.params.base} packed job {job.job_id}"
                                  f" against Gimbal §5.1: {reason}")
            hosts = list(dict.fromkeys(engine.cluster.holders[g][0] for g in share_gpus))
            kwargs["mode"], kwargs["shares"] = "mps", None  # LGRR is MPS: packs share under MPS (A11)
        engine.calibration.track(job)
        ok = engine.start(job, placement, share_gpus=share_gpus, **kwargs)
        if ok and hosts:
            self.sets.spread(engine.cluster, job, hosts)
            group = self.sets.join(job, hosts)
            if self.params.liss or self.params.lgrr:
                self.coordinator.request(engine, group)
        return ok

    def _left(self, engine: PolicyEngine, job: Job) -> None:
        group = self.sets.leave(job)
        if not (self.params.liss or self.params.lgrr):
            self.sets.released.clear()
            return
        if group is not None or self.sets.released:
            self.coordinator.request(engine, group)

    # ---- Policy ----------------------------------------------------------------------------------
    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        self._base_due = True
        self.base.on_arrival(self._view(engine), job)

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        self._base_due = True
        self._left(engine, job)
        self.coordinator.forget(job)
        self.base.on_finish(self._view(engine), job)

    def on_epoch(self, engine: PolicyEngine, job: Job) -> None:
        self._base_due = True
        self.base.on_epoch(self._view(engine), job)

    def for_goodput_jobs(self) -> None:
        self.base.for_goodput_jobs()

    def on_timer(self, engine: PolicyEngine, payload: Any) -> None:
        if isinstance(payload, tuple) and payload and payload[0] == _BASE:
            self._base_due = True
            self.base.on_timer(self._view(engine), payload[1])
        elif isinstance(payload, tuple) and payload and payload[0] == TAG:
            self.coordinator.on_timer(engine, payload)
        else:
            raise GimbalError(f"{self.name}: unexpected timer payload {payload!r}")

    def schedule(self, engine: PolicyEngine) -> None:
        """The base's pass, only after events it sees: Gimbal's own timers (monitor, search steps)
        change rates, never the queue or the free GPUs, so the base decides exactly when it would alone."""
        if self._base_due:
            self._base_due = False
            self.base.schedule(self._view(engine))

    def metrics(self) -> dict[str, float]:
        sizes = self.sets.sizes
        return {
            **self.base.metrics(),
            **self.coordinator.metrics(),
            "gimbal_unequal_packs": self.sets.unequal_packs,
            "gimbal_spread_packs": self.sets.spread_packs,
            "gimbal_max_set_size": max(sizes, default=0),
            "gimbal_mean_set_size": sum(sizes) / len(sizes) if sizes else 0.0,
        }


class GimbalJct(Gimbal):
    name = "gimbal-jct"
    uses = (frozenset({"xi"}),)
    falls_back_to = "ssf"  # its base Lucid packs nothing, so there is no pack to calibrate
    summary = "Lucid + Gimbal: unequal and high-interference packs calibrated by LGRR/LISS for average JCT"
    paper = "Gimbal (2025) §4 LGRR/LISS, §5.1 job sets, §5.2 Alg. 1 with JCT eqs. 1-2; base Lucid (§7.1)"
    Params = GimbalJctParams


class GimbalDeadline(Gimbal):
    name = "gimbal-deadline"
    summary = "Gandiva (deadline-aware) + Gimbal: squeeze jobs with headroom to speed up those near their deadline"
    paper = "Gimbal (2025) §4, §5.1, §5.2 Alg. 1 with deadline eqs. 3-4 (signs as the prose); base Gandiva (§7.1)"
    Params = GimbalDeadlineParams


class GimbalMakespan(Gimbal):
    name = "gimbal-makespan"
    summary = "Gavel makespan + Gimbal: squeeze shorter jobs of a packing set to speed up the longest"
    paper = "Gimbal (2025) §4, §5.1, §5.2 Alg. 1 with makespan eqs. 5-6 (signs as the prose); base Gavel (§7.1)"
    Params = GimbalMakespanParams
    needs = frozenset({"checkpoint"})  # its base Gavel's rounds preempt regardless of progress (gavel/policy.py)
