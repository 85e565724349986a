"""``schedlab check-policy``: a policy run through generated traces and clusters, against the engine's rules
(the contract is ``sched/core/protocol.py``).

Hypothesis (property-based testing) draws small canonical job tables (1-10 jobs) and small clusters (1-4
servers x 1-8 GPUs); each is replayed twice through :func:`schedlab.sched.replay.run` with the policy
wrapped in a :class:`CheckedPolicy`, which hands the policy a :class:`CheckingEngine` in place of the
engine. The rules (:data:`RULES`):

``capacity``    no GPU holds more jobs than the policy may put there: 1, or 2 for a policy that shares GPUs
                (``Policy.shares_gpus``; Castor eq. 7); the free counts agree with the holders
``submit``      no job starts before it is submitted (the engine has not yet handed it to the policy)
``finishes``    every job finishes, within a bounded horizon and a bounded number of policy calls
``progress``    no job's remaining work grows (except by a preemption that loses progress)
``determinism`` the same seed gives the identical job table (two replays in one process)
``api``         the policy touches the engine only through :class:`~schedlab.sched.core.protocol.PolicyEngine`:
                no other attribute read, no write, and no change to engine state (jobs, GPUs, the running
                set) between two engine calls
``time``        each policy call (``schedule``, ``on_arrival``, …) returns within the deadline
``crash``       the policy (or the engine on its behalf) raises no error

A run aborts at the first violation (a :class:`_Abort`, a ``BaseException``, so a policy's ``except
Exception`` cannot swallow it); Hypothesis then shrinks the case to a minimal one per rule, which the
report gives as a canonical job table (CSV) and cluster that ``schedlab replay`` reproduces.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, is_dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from schedlab.checks import validation_message
from schedlab.sched.core.job import Job
from schedlab.sched.core.protocol import POLICY_MEMBERS, EngineError
from schedlab.sched.policies import load_policy_class
from schedlab.sched.policies.base import Policy, PolicyWrapper
from schedlab.sched.spec import PolicyRun
from schedlab.sched.contained import POLICY_EXITS, raised
from schedlab.sched.watchdog import Died, Heartbeat, Overran, Returned, Watchdog

#: every rule, with what it means (the report's legend and docs/how-to/check-policy.md's)
RULES: dict[str, str] = {
    "capacity": "no GPU holds more jobs than the policy's sharing allowance (1, or 2 if it shares GPUs)",
    "submit": "no job starts before its submission",
    "finishes": "every job finishes (bounded horizon and number of policy calls)",
    "progress": "a job's remaining work never grows (except a preemption that loses progress)",
    "determinism": "the same seed gives an identical job table",
    "api": "the engine is read and changed only through PolicyEngine (sched/core/protocol.py)",
    "time": "every policy call returns within the deadline",
    "crash": "the policy (or the engine on its behalf) raises no error",
}

MAX_JOBS = 10  # the bar: a reproducing trace of at most 10 jobs
MAX_SERVERS = 4
MAX_GPUS_PER_SERVER = 8
MAX_SUBMIT_S = 3600
MAX_DURATION_S = 7200
#: the engine calls that change state; the proxy checks the state before and records it after each
ACTIONS = frozenset({"start", "preempt", "resize", "set_batch", "set_timer", "calibrate"})
#: job fields the engine keeps but a read may build lazily (``by_end``), so not part of the fingerprint
_LAZY_JOB_FIELDS = frozenset({"end_key"})
_JOB_FIELDS = tuple(f.name for f in fields(Job) if f.name not in _LAZY_JOB_FIELDS)
_SHARED_GPUS = 2  # Castor eq. 7: at most two jobs on one GPU
#: policy calls one replay of at most 10 jobs may take (a 60 s round policy needs ~1,200 for 20 h of work)
MAX_CALLS = 20_000
#: calls stopped at the deadline (each costs the deadline) after which shrinking ends with the smallest
#: case found: a policy whose call never returns is reported within about this many deadlines
MAX_STOPPED = 40


# ---- cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One generated replay: a canonical job table (``job_id, submit_time, num_gpus, duration`` and, for
    elastic jobs, ``elastic_min, elastic_max``) on ``servers`` x ``gpus_per_server`` GPUs."""

    table: pd.DataFrame
    servers: int
    gpus_per_server: int

    @property
    def cluster(self) -> str:
        """The cluster as ``schedlab replay --cluster`` takes it."""
        return f"{self.servers}x{self.gpus_per_server}"

    @property
    def jobs(self) -> int:
        return len(self.table)

    def csv(self) -> str:
        """The job table as a canonical CSV (``schedlab replay --trace``)."""
        out = io.StringIO()
        self.table.to_csv(out, index=False)
        return out.getvalue()


def case_strategy(max_jobs: int = MAX_JOBS, elastic: bool = True):
    """Hypothesis strategy of :class:`Case`: 1-``max_jobs`` jobs (submit 0-1 h, 1-8 GPUs but at most the
    cluster's, 1 s - 2 h of work), some elastic (``elastic_min`` = the trace's GPUs, ``elastic_max`` up to
    the cluster's; Lyra's convention, docs/explanation/lyra.md) when ``elastic``. Shrinks towards fewer jobs,
    fewer GPUs, earlier submissions and shorter durations."""
    from hypothesis import strategies as st

    @st.composite
    def cases(draw: Callable[..., Any]) -> Case:
        servers = draw(st.integers(1, MAX_SERVERS))
        per = draw(st.integers(1, MAX_GPUS_PER_SERVER))
        total = servers * per
        n = draw(st.integers(1, max_jobs))
        rows = []
        for _ in range(n):
            gpus = draw(st.integers(1, total))
            row = {"submit_time": float(draw(st.integers(0, MAX_SUBMIT_S))), "num_gpus": gpus,
                   "duration": float(draw(st.integers(1, MAX_DURATION_S)))}
            if elastic and gpus < total and draw(st.booleans()):
                row["elastic_max"] = draw(st.integers(gpus + 1, total))
            rows.append(row)
        rows.sort(key=lambda r: r["submit_time"])  # stable: ids follow the drawn order within a time
        first = rows[0]["submit_time"]  # the first job at 0, as `schedlab replay` reads a trace (first-job origin)
        for r in rows:
            r["submit_time"] -= first
        table = pd.DataFrame({
            "job_id": [f"j{i}" for i in range(n)],
            "submit_time": [r["submit_time"] for r in rows],
            "num_gpus": [r["num_gpus"] for r in rows],
            "duration": [r["duration"] for r in rows],
        })
        if any("elastic_max" in r for r in rows):
            table["elastic_min"] = [r["num_gpus"] if "elastic_max" in r else 0 for r in rows]
            table["elastic_max"] = [r.get("elastic_max", 0) for r in rows]
        return Case(table, servers, per)

    return cases()


# ---- the observer -----------------------------------------------------------------------------


class _Abort(BaseException):
    """A rule broken during a replay: aborts it (past any ``except Exception`` of the policy)."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule, self.message = rule, message


def _snap(value: Any) -> Any:
    """A comparable copy of a field's value: containers, arrays and dataclass states copied, jobs and other
    objects (a goodput model) by identity, NaN equal to NaN."""
    if isinstance(value, float):
        return "nan" if value != value else value
    if value is None or isinstance(value, (int, str, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_snap(v) for v in value)
    if isinstance(value, dict):
        return tuple((_snap(k), _snap(v)) for k, v in value.items())
    if isinstance(value, Job):
        return ("job", id(value))
    if is_dataclass(value) and not isinstance(value, type):  # an extension state (Gimbal's Workers)
        return (type(value).__name__, id(value), tuple(_snap(getattr(value, f.name)) for f in fields(value)))
    if hasattr(value, "tolist"):  # a numpy array or scalar
        return ("array", id(value), _snap(value.tolist()))
    return ("obj", id(value))


@dataclass
class Observer:
    """The rules checked while a replay runs, at every policy call and around every engine action."""

    allowance: int  # jobs a GPU may hold
    deadline_s: float
    horizon: float  # trace time by which every job must have finished
    max_calls: int
    arrived: dict[int, Job] = field(default_factory=dict)  # id -> job handed to the policy, not finished
    remaining: dict[int, float] = field(default_factory=dict)  # id -> remaining work at the last check
    calls: int = 0
    slowest_s: float = 0.0
    slowest_call: str = ""
    depth: int = 0  # inside ``accumulating``: a pending job reads as running, by the API's leave
    beat: Heartbeat | None = None  # where a call in progress is announced to the watchdog (None: not watched)
    _fingerprint: Any = None

    # -- rules on the state --
    def check(self, engine: Any, where: str) -> None:
        """Capacity and progress now, then that nothing changed since the last :meth:`mark`."""
        self._capacity(engine, where)
        self._progress(engine, where)
        if self.depth == 0 and self._fingerprint is not None and self._state(engine) != self._fingerprint:
            raise _Abort("api", f"engine state changed outside the API {where}: {self._what_changed(engine)}")

    def mark(self, engine: Any) -> None:
        """Record the state (as the engine's API left it) and each job's remaining work."""
        self._capacity(engine, "after an engine call")
        self._fingerprint = self._state(engine)
        for key, job in self.arrived.items():
            self.remaining[key] = engine.remaining(job)

    def _capacity(self, engine: Any, where: str) -> None:
        cluster = engine.cluster
        busy = 0
        for gpu, holders in enumerate(cluster.holders):
            if len(holders) > self.allowance:
                ids = ", ".join(j.job_id for j in holders)
                raise _Abort("capacity", f"GPU {gpu} holds {len(holders)} jobs ({ids}), the policy may put"
                             f" {self.allowance} there ({where}, t={engine.now:g})")
            busy += bool(holders)
        if cluster.total_gpus - busy != cluster.free_gpus or any(
                cluster.holders[g] for stack in cluster.free_by_server for g in stack):
            raise _Abort("capacity", f"{cluster.free_gpus} GPUs counted free but {cluster.total_gpus - busy} hold"
                         f" no job ({where}, t={engine.now:g})")

    def _progress(self, engine: Any, where: str) -> None:
        for key, job in self.arrived.items():
            before = self.remaining.get(key)
            now = engine.remaining(job)
            if before is not None and now > before + 1e-6 * max(1.0, before):
                raise _Abort("progress", f"job {job.job_id}'s remaining work grew from {before:g} to {now:g} s"
                             f" ({where}, t={engine.now:g})")

    def _state(self, engine: Any) -> tuple:
        cluster = engine.cluster
        jobs = tuple((key, tuple(_snap(getattr(job, name)) for name in _JOB_FIELDS))
                     for key, job in self.arrived.items())
        gpus = (tuple(tuple(id(j) for j in h) for h in cluster.holders), _snap(cluster.free_by_server),
                cluster.free_gpus, cluster.single_gpus, cluster.double_gpus)
        return jobs, gpus, tuple(id(j) for j in engine.running), engine.now, engine.state_version

    def _what_changed(self, engine: Any) -> str:
        jobs, gpus, running, now, version = self._state(engine)
        old_jobs, old_gpus, old_running, old_now, old_version = self._fingerprint
        old = dict(old_jobs)
        for key, values in jobs:
            if key in old and old[key] != values:
                changed = [name for name, a, b in zip(_JOB_FIELDS, old[key], values) if a != b]
                return f"job {self.arrived[key].job_id}'s field(s) {', '.join(changed)}"
        if gpus != old_gpus:
            return "the cluster's GPU bookkeeping (holders or free GPUs)"
        if running != old_running:
            return "the running set"
        return "the engine's clock" if now != old_now else f"state_version {old_version} -> {version}"

    # -- rules on the calls --
    def enter(self, engine: Any, call: str) -> float:
        self.calls += 1
        if self.calls > self.max_calls:
            raise _Abort("finishes", f"{self.max_calls} policy calls and jobs still unfinished (t={engine.now:g})")
        if engine.now > self.horizon:
            left = [j.job_id for j in self.arrived.values()]
            raise _Abort("finishes", f"t={engine.now:g} is past the horizon {self.horizon:g} and job(s)"
                         f" {', '.join(left) or '(not yet arrived)'} are unfinished")
        self._capacity(engine, f"before {call}")
        self._progress(engine, f"before {call}")
        self.mark(engine)  # what the engine did since the last call is its own business
        if self.beat is not None:
            self.beat.enter(call, engine.now)
        return time.perf_counter()

    def leave(self, engine: Any, call: str, started: float) -> None:
        took = time.perf_counter() - started
        if self.beat is not None:
            self.beat.leave()
        if took > self.slowest_s:
            self.slowest_s, self.slowest_call = took, call
        if took > self.deadline_s:
            raise _Abort("time", f"{call} took {took:.3f} s > the deadline {self.deadline_s:g} s (t={engine.now:g})")
        self.check(engine, f"after {call}")
        self.mark(engine)


class CheckingEngine:
    """The engine as the checked policy sees it: only :class:`~schedlab.sched.core.protocol.PolicyEngine`
    members are forwarded; any other read, or any write, aborts the replay naming the attribute."""

    __slots__ = ("_engine", "_observer", "_policy")

    def __init__(self, engine: Any, observer: Observer, policy: Policy) -> None:
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_observer", observer)
        object.__setattr__(self, "_policy", policy)

    def __getattr__(self, name: str) -> Any:
        if name not in POLICY_MEMBERS:
            if not hasattr(self._engine, name):  # a probe for an optional hook (getattr(engine, name, None))
                raise AttributeError(f"{name!r} is not part of the policy API (sched/core/protocol.py)")
            raise _Abort("api", f"the policy read engine.{name}, which is not part of PolicyEngine"
                         " (sched/core/protocol.py)")
        if name == "policy":
            return self._policy
        value = getattr(self._engine, name)
        if name in ACTIONS:
            return _action(self._engine, self._observer, f"engine.{name}", value)
        if name == "calibration" and value is not None:  # its methods are engine calls too (Gimbal §4)
            return _CapabilityView(self._engine, self._observer, value)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise _Abort("api", f"the policy wrote engine.{name} = {value!r}")

    def __delattr__(self, name: str) -> None:
        raise _Abort("api", f"the policy deleted engine.{name}")

    @contextmanager
    def accumulating(self, job: Job, steps: int) -> Iterator[None]:
        observer, engine = self._observer, self._engine
        observer.check(engine, "before engine.accumulating")
        observer.depth += 1
        try:
            with engine.accumulating(job, steps):
                yield
        finally:
            observer.depth -= 1
        observer.check(engine, "after engine.accumulating")


def _action(engine: Any, observer: Observer, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` (an engine action) with the state checked before it and recorded after it."""

    def checked(*args: Any, **kwargs: Any) -> Any:
        observer.check(engine, f"before {name}")
        job = args[0] if args and isinstance(args[0], Job) else kwargs.get("job")
        if name == "engine.start" and job is not None:
            if id(job) not in observer.arrived or job.submit_time > engine.now:
                raise _Abort("submit", f"the policy started job {job.job_id} (submitted at"
                             f" t={job.submit_time:g}) at t={engine.now:g}, before the engine handed it over")
        result = call(*args, **kwargs)
        if name == "engine.preempt" and job is not None:  # it may lose progress (checkpoint: false)
            observer.remaining.pop(id(job), None)
        observer.mark(engine)
        return result

    return checked


class _CapabilityView:
    """A capability a policy reads through the engine (``engine.calibration``): its methods are engine
    calls (checked as actions), its other attributes read as they are; no writes."""

    __slots__ = ("_engine", "_observer", "_capability")

    def __init__(self, engine: Any, observer: Observer, capability: Any) -> None:
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_observer", observer)
        object.__setattr__(self, "_capability", capability)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._capability, name)
        if callable(value) and not isinstance(value, type):
            return _action(self._engine, self._observer, f"engine.calibration.{name}", value)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise _Abort("api", f"the policy wrote engine.calibration.{name} = {value!r}")


class CheckedPolicy(PolicyWrapper):
    """``inner`` as the engine sees it, each hook timed and handed a :class:`CheckingEngine`."""

    def __init__(self, inner: Policy, observer: Observer) -> None:
        super().__init__(inner)
        self.observer = observer
        self._proxy: CheckingEngine | None = None

    def _call(self, engine: Any, hook: str, *args: Any) -> None:
        if self._proxy is None:
            self._proxy = CheckingEngine(engine, self.observer, self.inner)
        started = self.observer.enter(engine, hook)
        getattr(self.inner, hook)(self._proxy, *args)
        self.observer.leave(engine, hook, started)

    def on_arrival(self, engine: Any, job: Job) -> None:
        self.observer.arrived[id(job)] = job
        self.observer.remaining[id(job)] = job.remaining
        self._call(engine, "on_arrival", job)

    def on_finish(self, engine: Any, job: Job) -> None:
        self.observer.arrived.pop(id(job), None)
        self.observer.remaining.pop(id(job), None)
        self._call(engine, "on_finish", job)

    def on_timer(self, engine: Any, payload: Any) -> None:
        self._call(engine, "on_timer", payload)

    def on_epoch(self, engine: Any, job: Job) -> None:
        self._call(engine, "on_epoch", job)

    def schedule(self, engine: Any) -> None:
        self._call(engine, "schedule")

    def for_goodput_jobs(self) -> None:
        self.inner.for_goodput_jobs()

    def metrics(self) -> dict[str, float]:
        return self.inner.metrics()


# ---- one case ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckOptions:
    """``check-policy``'s options, validated on construction (a ValueError names the option)."""

    examples: int = 100
    seed: int = 0
    max_jobs: int = MAX_JOBS
    deadline_s: float = 1.0
    elastic: bool = True  # draw elastic jobs too
    params: dict[str, Any] = field(default_factory=dict)
    max_calls: int = MAX_CALLS  # policy calls per replay before ``finishes`` fails

    def __post_init__(self) -> None:
        for name, low, high in (("examples", 1, 100_000), ("seed", 0, 2**63 - 1), ("max_jobs", 1, MAX_JOBS),
                                ("max_calls", 1, 10_000_000)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"--{name.replace('_', '-')}: must be an integer in [{low}, {high}], got {value!r}")
        value = self.deadline_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"--deadline-s: must be a finite number of seconds > 0, got {value!r}")


def horizon(table: pd.DataFrame) -> float:
    """Trace time by which any sane policy has finished every job: the last submission plus 100 x
    (all work + 10 min per job: restores, allocation stalls, rounds)."""
    return float(table["submit_time"].max() + 100 * (table["duration"].sum() + 600 * len(table)))


@dataclass
class Slowest:
    """The slowest policy call seen so far (the report's figure)."""

    seconds: float = 0.0
    call: str = ""

    def update(self, observer: Observer) -> None:
        if observer.slowest_s > self.seconds:
            self.seconds, self.call = observer.slowest_s, observer.slowest_call


def run_case(policy: str, case: Case, options: CheckOptions, slowest: Slowest | None = None,
             beat: Heartbeat | None = None) -> tuple[str, str] | None:
    """Replay ``case`` twice under ``policy`` with the rules checked; the first broken rule as ``(rule,
    message)``, or None. ``slowest`` is updated with the slowest policy call; ``beat``: where each call
    announces itself to a :class:`~schedlab.sched.watchdog.Watchdog` (run in its child, the call that
    never returns is stopped from outside; here a call's time is measured once it returns)."""
    from schedlab.sched.replay import prepare, run
    from schedlab.sched.spec import AUTO, ReplaySpec

    cls = load_policy_class(policy)
    spec = ReplaySpec(cluster=case.cluster, policies=[{"name": policy, "params": options.params}],
                      seed=options.seed, annotate=AUTO)
    try:
        prepared = prepare(spec, case.table)
    except (ValueError, EngineError) as err:  # a table the generator should not make: a bug of ours
        raise RuntimeError(f"check-policy generated a table the replay refuses: {err}\n{case.csv()}") from err
    observers: list[Observer] = []

    def wrap(inner: Policy) -> Policy:
        observer = Observer(allowance=_SHARED_GPUS if cls.shares_gpus else 1, deadline_s=options.deadline_s,
                            horizon=horizon(case.table), max_calls=options.max_calls, beat=beat)
        observers.append(observer)
        return CheckedPolicy(inner, observer)

    tables = []
    for _ in range(2):
        try:
            result = run(spec, prepared, wrap_policy=wrap)[0]
        except _Abort as abort:
            return abort.rule, abort.message
        except EngineError as err:
            rule = "finishes" if "unfinished" in str(err) else "crash"
            return rule, str(err)
        except (Exception, *POLICY_EXITS) as err:  # noqa: BLE001 (any error of the policy is a finding)
            return "crash", raised(err)
        finally:
            if slowest is not None and observers:
                slowest.update(observers[-1])
        broken = _job_table_rules(result.jobs)
        if broken is not None:
            return broken
        tables.append(result.jobs)
    a, b = tables
    if not a.equals(b):
        return "determinism", _first_difference(a, b)
    return None


def _job_table_rules(jobs: pd.DataFrame) -> tuple[str, str] | None:
    """The post-run checks on the job table: every job started no earlier than submitted, and ended."""
    for row in jobs.itertuples(index=False):
        if not row.start_time >= row.submit_time:
            if row.start_time != row.start_time:
                return "finishes", f"job {row.job_id} never started"
            return "submit", f"job {row.job_id} started at t={row.start_time:g}, submitted at t={row.submit_time:g}"
        if not row.end_time >= row.start_time:
            return "finishes", f"job {row.job_id} has no end after its start at t={row.start_time:g}"
    return None


def _first_difference(a: pd.DataFrame, b: pd.DataFrame) -> str:
    for column in a.columns:
        x, y = a[column], b[column]
        differ = ~((x == y) | (x.isna() & y.isna()))
        if differ.any():
            i = int(differ.to_numpy().argmax())
            return (f"two replays with the same seed differ: job {a['job_id'].iloc[i]}'s {column} is"
                    f" {x.iloc[i]!r} then {y.iloc[i]!r}")
    return "two replays with the same seed give different job tables"


# ---- the search -------------------------------------------------------------------------------


class PolicyCheckFailure(AssertionError):
    """A broken rule on a generated case (what Hypothesis shrinks); one subclass per rule, so that
    Hypothesis shrinks each rule's failures separately."""

    rule = ""

    def __init__(self, message: str, case: Case) -> None:
        super().__init__(f"{self.rule}: {message}")
        self.message, self.case = message, case


FAILURES: dict[str, type[PolicyCheckFailure]] = {
    rule: type(f"{rule.title()}Failure", (PolicyCheckFailure,), {"rule": rule}) for rule in RULES
}


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    case: Case

    def save(self, folder: Path) -> Path:
        """Write the case as ``<rule>.csv`` in ``folder``; returns the path."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.rule}.csv"
        path.write_text(self.case.csv())
        return path

    def replay_command(self, policy: str, options: CheckOptions, path: str | Path) -> str:
        """The ``schedlab replay`` command line that replays this case as the check did."""
        sets = "".join(f" --set {policy}.{k}={json.dumps(v)}" for k, v in options.params.items())
        return (f"schedlab replay --trace {path} --cluster {self.case.cluster} --policy {policy}{sets}"
                f" --seed {options.seed}")


@dataclass
class CheckReport:
    policy: str
    options: CheckOptions
    examples: int  # cases run (shrinking included), each replayed twice
    violations: list[Violation]
    slowest_s: float
    slowest_call: str
    note: str = ""  # why a case shown may not be minimal

    @property
    def passed(self) -> bool:
        return not self.violations

    def text(self, saved: dict[str, Path] | None = None) -> str:
        lines = [f"check-policy {self.policy}: {self.examples} generated cases, each replayed twice (seed"
                 f" {self.options.seed}, up to {self.options.max_jobs} jobs), slowest call {self.slowest_call or '-'}"
                 f" {self.slowest_s * 1000:.1f} ms (deadline {self.options.deadline_s:g} s)"]
        broken = {v.rule for v in self.violations}
        for rule, meaning in RULES.items():
            lines.append(f"  {'FAIL' if rule in broken else 'ok':4}  {rule:<11} {meaning}")
        if self.note:
            lines += ["", f"note: {self.note}"]
        for v in self.violations:
            lines += ["", f"{v.rule}: {v.message}",
                      f"  {'smallest' if self.note else 'minimal'} case: {v.case.jobs} job(s) on a {v.case.cluster} cluster"]
            lines += ["    " + line for line in v.case.csv().splitlines()]
            path = (saved or {}).get(v.rule)
            lines.append(f"  reproduce: {v.replay_command(self.policy, self.options, path or f'{v.rule}.csv')}")
        return "\n".join(lines)


def check_policy(policy: str, options: CheckOptions | None = None) -> CheckReport:
    """Run ``policy`` through ``options.examples`` generated cases; each broken rule with its minimal case."""
    from hypothesis import HealthCheck, Phase, given, seed, settings

    options = options or CheckOptions()
    try:  # an unknown policy or parameter: an error before any replay
        PolicyRun(name=policy, params=options.params)
    except ValidationError as err:
        raise ValueError(validation_message(err)) from None
    runs, slowest = [0], Slowest()
    watchdog = Watchdog(partial(_case_in_child, policy, options), call_deadline_s=options.deadline_s,
                        preload=(__name__,))
    smallest: dict[str, Violation] = {}  # per rule, the smallest failing case yet (if shrinking is cut short)

    def run_one(case: Case) -> None:
        runs[0] += 1
        broken = _watched(watchdog, case, slowest)
        if broken is not None:
            rule, message = broken
            if rule not in smallest or _size(case) < _size(smallest[rule].case):
                smallest[rule] = Violation(rule, message, case)
            if watchdog.stopped > MAX_STOPPED:
                raise _ShrinkingCut()
            raise FAILURES[rule](message, case)

    @seed(options.seed)
    @settings(max_examples=options.examples, database=None, deadline=None, derandomize=False,
              phases=(Phase.generate, Phase.shrink), report_multiple_bugs=True, print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(case_strategy(options.max_jobs, options.elastic))
    def search(case: Case) -> None:
        run_one(case)

    violations: dict[str, Violation] = {}
    note = ""
    try:
        with watchdog:
            search()
    except _ShrinkingCut:
        violations = smallest
        note = (f"shrinking stopped after {MAX_STOPPED} policy calls were stopped at the deadline: each case shown"
                " is the smallest found, not necessarily minimal")
    except PolicyCheckFailure as failure:
        violations[failure.rule] = Violation(failure.rule, failure.message, failure.case)
    except BaseExceptionGroup as group:
        _, rest = group.split(PolicyCheckFailure)
        if rest is not None:
            raise rest
        for failure in _leaves(group):
            violations.setdefault(failure.rule, Violation(failure.rule, failure.message, failure.case))
    ordered = sorted(violations.values(), key=lambda v: list(RULES).index(v.rule))
    return CheckReport(policy, options, runs[0], ordered, slowest.seconds, slowest.call, note)


class _ShrinkingCut(BaseException):
    """Ends the search (Hypothesis passes it through: not a failure) once too many calls were stopped."""


def _size(case: Case) -> tuple:
    """How big a case is, for keeping the smallest: jobs, then GPUs, then work."""
    table = case.table
    return (case.jobs, case.servers * case.gpus_per_server, int(table["num_gpus"].sum()),
            float(table["duration"].sum()), float(table["submit_time"].sum()))


def _case_in_child(policy: str, options: CheckOptions, case: Case, beat: Heartbeat) -> tuple[Any, float, str]:
    """:func:`run_case` as the watchdog's child runs it: the broken rule (or None) and the slowest call."""
    slowest = Slowest()
    broken = run_case(policy, case, options, slowest, beat)
    return broken, slowest.seconds, slowest.call


def _watched(watchdog: Watchdog, case: Case, slowest: Slowest) -> tuple[str, str] | None:
    """``case`` run by ``watchdog``'s child: a call still running at the deadline is stopped there and
    breaks ``time``; a child that ends while the policy runs (``os._exit``, a crash of native code) is
    the policy's ``crash``."""
    outcome = watchdog.call(case)
    if isinstance(outcome, Returned):
        broken, seconds, call = outcome.value
        if seconds > slowest.seconds:
            slowest.seconds, slowest.call = seconds, call
        return broken
    if isinstance(outcome, Overran):
        if outcome.seconds > slowest.seconds:
            slowest.seconds, slowest.call = outcome.seconds, outcome.call or ""
        return "time", (f"{outcome.call} did not return within the deadline {outcome.limit_s:g} s: stopped after"
                        f" {outcome.seconds:.2f} s (t={outcome.now:g})")
    assert isinstance(outcome, Died)
    where = f"in {outcome.call} (t={outcome.now:g})" if outcome.call else "outside any policy call"
    return "crash", f"the process running the policy {outcome.how} {where}; a policy may not end the process"


def _leaves(group: BaseExceptionGroup) -> Iterator[PolicyCheckFailure]:
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            yield from _leaves(e)
        else:
            yield e  # type: ignore[misc]
