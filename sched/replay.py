"""Replay one job trace through one or more policies on one cluster: a
:class:`~schedlab.sched.spec.ReplaySpec` says what (plain, validated data), :func:`prepare` loads and
prepares its trace once, :func:`run` replays each policy on it. Every caller (the CLI's ``replay``, the
experiment's Prefect task on a Dask worker, the benchmarks) builds a spec and calls :func:`run`, so each
rule (trace loading and capacity check, workload annotation, solo durations from the iteration-time
model, goodput jobs' nominal durations, elastic scaling, loaned inference servers, SM activity) lives
here once; the models and the rest a replay is built from come from :mod:`schedlab.sched.parts`."""

from __future__ import annotations

import functools

import gc
import json
import math
import os
import secrets
import warnings
from collections.abc import Callable
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from schedlab.sched import parts as replay_parts
from schedlab.sched.contained import Contained, ContainedRunner, PolicyFailed
from schedlab.sched.core.cluster import ClusterSpec
from schedlab.sched.core.engine import Engine
from schedlab.sched.core.job import JobSource
from schedlab.sched.core.restore import STALL, restore_overhead
from schedlab.sched.estimators.seam import KnowledgeWarning, with_knowledge
from schedlab.sched.models.annotate import annotate, catalog_gpu_type, fill_durations
from schedlab.sched.models.fitted import Fetch
from schedlab.sched.models.interference import fresh
from schedlab.sched.models.scaling import use_elastic_scaling
from schedlab.sched.models.sharing import SharingModel
from schedlab.sched.models.smact import SmactProfile, replay_smact
from schedlab.sched.models.workloads import FittedCatalog, WorkloadCatalog, default_catalog
from schedlab.sched.policies import Policy
from schedlab.sched.policy_needs import CapabilityWarning, Fallback, setup_capabilities, table_capabilities
from schedlab.sched.policy_needs import check as check_policies
from schedlab.sched.results.applied import applied, fit_changed
from schedlab.sched.results.metrics import job_groups, job_table, summarize, with_groups
from schedlab.sched.results.outdir import OutputError, os_reason
from schedlab.sched.spec import AUTO, PolicyRun, ReplaySpec
from schedlab.sched.traces import load_trace
from schedlab.sched.traces.common import JobError, LoadReport


@dataclass
class Prepared:
    """A spec's trace, loaded and prepared once for all its policies: the job table (workloads
    annotated, solo durations filled), the load report and notes, and the parts it was built with."""

    parts: replay_parts.ReplayParts
    table: pd.DataFrame
    notes: dict[str, Any]
    report: LoadReport | None = None  # None: a table given in memory
    fitted: frozenset[str] = frozenset()  # ids of the jobs a fitted iteration-time model gave another duration

    @property
    def cluster(self) -> ClusterSpec:
        return self.parts.cluster

    @property
    def timing(self) -> WorkloadCatalog:
        return self.parts.timing

    @functools.cached_property
    def groups(self) -> pd.DataFrame | None:
        """The trace's ``user`` / ``vc`` by job id, once for all policies (:func:`job_groups`)."""
        return job_groups(self.table)

    @property
    def load_report(self) -> dict[str, Any]:
        """What the summaries record under ``load_report``: the load's figures and the notes."""
        return {**self.report.to_dict(), **self.notes} if self.report is not None else dict(self.notes)


@dataclass
class ReplayResult:
    policy: str
    jobs: pd.DataFrame
    summary: dict[str, Any]
    utilization: pd.DataFrame = field(default_factory=pd.DataFrame)  # time, busy_gpus
    smact: pd.DataFrame | None = None  # smact, gpu_s: the SM-activity distribution, when profiled
    #: per model or option given beyond the defaults, the jobs it applied to, and a message for each that
    #: applied to none (``sched/results/applied.py``); beside the summary, which they leave as it was
    applied: dict[str, int] = field(default_factory=dict)
    unused: list[str] = field(default_factory=list)
    #: the trace's ``user`` / ``vc`` by job id (None: it has neither), joined to ``jobs`` only in
    #: :meth:`jobs_with_groups` and ``jobs.parquet``, so ``jobs`` (and its digests) stay as they were
    groups: pd.DataFrame | None = None

    def jobs_with_groups(self) -> pd.DataFrame:
        """The job table as ``jobs.parquet`` holds it: ``jobs`` and the trace's ``user`` and ``vc``."""
        return with_groups(self.jobs, self.groups)

    def write(self, out_dir: str | Path) -> Path:
        """Write ``jobs.parquet`` (:meth:`jobs_with_groups`), ``summary.json`` and ``utilization.parquet`` (and ``smact.parquet``
        when the SM-activity distribution was computed, ``applied.json`` when models or options were
        given: :attr:`applied` and :attr:`unused`), atomically, file by file."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "jobs.parquet", lambda p: self.jobs_with_groups().to_parquet(p, index=False))
        write_atomic(out / "utilization.parquet", lambda p: self.utilization.to_parquet(p, index=False))
        if self.smact is not None:
            write_atomic(out / "smact.parquet", lambda p: self.smact.to_parquet(p, index=False))
        write_atomic(out / "summary.json", lambda p: p.write_text(json.dumps(_jsonable(self.summary), indent=2)))
        if self.applied:
            write_atomic(out / "applied.json", lambda p: p.write_text(json.dumps(
                {"applied": self.applied, "unused": self.unused}, indent=2)))
        return out


def run(spec: ReplaySpec, prepared: Prepared | None = None, *, fetch: Fetch | None = None,
        progress: bool | Callable[[int, int], None] = False,
        each: Callable[[ReplayResult], None] | None = None,
        wrap_policy: Callable[[Policy], Policy] | None = None,
        contained: Contained | None = None,
        failed: Callable[[PolicyFailed], None] | None = None,
        engine: Callable[..., Engine] = Engine) -> list[ReplayResult]:
    """Replay ``spec``: its trace prepared once (:func:`prepare`, unless ``prepared`` is given: a spec
    naming ``smact_profiles`` needs one prepared with its SMACT profile), then
    each of its policies in turn, a result per policy in ``spec.policies``' order; ``each(result)`` is
    called as each one ends (to write it or log it before the next starts). ``fetch`` downloads the
    MLflow URIs the spec's models name; ``progress``: a bar, or ``progress(jobs done, jobs)``.
    ``wrap_policy``: what the engine runs in place of each policy made (``check-policy``'s observer,
    ``sched/policy_check.py``). ``engine``: what makes the engine (called as :class:`Engine` is): another
    backend of the policy API, e.g. the testbed's live engine (``profiling/testbed/live.py``).

    ``contained``: each policy's replay runs in a child process, stopped at its time limit
    (:mod:`schedlab.sched.contained`); a policy that raises (anything), runs past the limit or ends its
    process ends its replay with :class:`~schedlab.sched.contained.PolicyFailed`: raised, or, with
    ``failed``, handed to ``failed(error)`` and left out of the results while the other policies go on."""
    prepared = prepared if prepared is not None else prepare(spec, fetch=fetch)
    results = []
    with ExitStack() as stack:
        runner = stack.enter_context(ContainedRunner(contained)) if contained is not None else None
        for policy in spec.policies:
            if runner is None:
                result = _replay(spec, prepared, policy, progress, wrap_policy, engine)
            else:
                try:
                    result = runner.replay(spec, prepared, policy, progress)
                except PolicyFailed as error:
                    if failed is None:
                        raise
                    failed(error)
                    continue
            if each is not None:
                each(result)
            results.append(result)
    return results


def prepare(spec: ReplaySpec, table: pd.DataFrame | None = None, *, report: LoadReport | None = None,
            parts: replay_parts.ReplayParts | None = None, fetch: Fetch | None = None,
            smact: SmactProfile | None = None, warn: bool = True) -> Prepared:
    """Load ``spec``'s trace (or take ``table``, with its load ``report`` if there is one) and prepare
    it: annotate workloads when ``spec.annotate`` asks (``auto``: when a policy shares GPUs and the
    trace gives none), then fill solo durations where a trace gives ``model, batch_size, iterations``
    only. Iteration times are for the cluster's training GPU type, or the catalog's reference type when
    the catalog has no figures for it (reported in the notes).

    ``parts``: the replay's parts (:func:`schedlab.sched.parts.build`, built here from ``fetch`` and
    ``smact`` when not given: the SM-activity profile read from ``spec.smact_profiles``, which the caller
    reads, e.g. ``schedlab.profiling.smact.profile_for(spec)``).

    ``spec.iteration_time`` (``catalog`` or a fitted model) decides the solo durations: a fitted model's
    parameters replace the catalog's for the workloads and GPU types it covers. Annotation (the work
    of a trace job in iterations) always uses the packaged catalog, so a fitted model changes how long
    the same work takes.

    Goodput jobs (a ``global_batch`` column, e.g. ``--format pollux``) get as ``duration`` their
    nominal run time: alone, at the trace's GPU count and batch, packed on the cluster's servers
    (Pollux §5); that is what SJF-like policies see as the job's length.

    An error about a job names the trace file, the job's data row and the file's column. Before it
    returns, :func:`check_capabilities`: an error for a policy that cannot run on the table, a warning
    (unless not ``warn``) for one that will decide as another."""
    parts = parts if parts is not None else replay_parts.build(spec, fetch, smact)
    if table is None:
        pool = parts.cluster.training_pool
        options = spec.options
        if options.max_gpus is None:  # the capacity check: no job larger than the cluster
            options = options.model_copy(update={"max_gpus": pool.servers * pool.gpus_per_server})
        applications = parts.goodput_models() if spec.format == "pollux-philly" else None  # its generator's
        table, report = load_trace(spec.trace, spec.format, options, applications=applications)
    scheme = spec.annotate
    if scheme == AUTO:
        scheme = "model" not in table.columns and any(p.policy_class().shares_gpus for p in spec.policies)
    try:
        table, notes, fitted = _prepare_table(table, parts, scheme, spec.seed)
    except JobError as err:
        if report is None:
            raise
        raise report.locate(err) from None
    check_capabilities(spec, table, warn)
    return Prepared(parts, table, notes, report, fitted)


def check_capabilities(spec: ReplaySpec, table: pd.DataFrame, warn: bool = True) -> list[Fallback]:
    """Before any replay: :class:`CapabilityError` (one line) when a policy cannot run on the prepared
    ``table`` with ``spec``'s models; the policies that will fall back to another's behaviour
    (``sched/policy_needs.py``), each warned (:class:`CapabilityWarning`) if ``warn``."""
    present = table_capabilities(table) | setup_capabilities(spec.interference, spec.inference is not None)
    fallbacks = check_policies({p.name: p.policy_class() for p in spec.policies}, present)
    for fallback in fallbacks if warn else ():
        warnings.warn(str(fallback), CapabilityWarning, stacklevel=3)
    return fallbacks


def _prepare_table(table: pd.DataFrame, parts: replay_parts.ReplayParts, annotate_workloads: bool | str | dict,
                   seed: int) -> tuple[pd.DataFrame, dict[str, Any], frozenset[str]]:
    """The table with workloads and durations, the notes, and the ids of the jobs whose duration a
    fitted iteration-time model computes."""
    pool, timing = parts.cluster.training_pool, parts.timing
    if "global_batch" in table.columns:
        return nominal_durations(table, pool.gpus_per_server, parts.goodput_models()), {"goodput": True}, frozenset()
    catalog = default_catalog()
    gpu_type = catalog_gpu_type(catalog, pool.gpu_type)
    notes: dict[str, Any] = {"iteration_time_gpu_type": gpu_type}
    if gpu_type != pool.gpu_type:
        notes["iteration_time_note"] = f"catalog has no {pool.gpu_type!r} figures; used {gpu_type!r}"
    if annotate_workloads:
        scheme = "pollux" if annotate_workloads is True else annotate_workloads  # or gimbal (annotate.py)
        table = annotate(table, catalog, seed=seed, gpu_type=gpu_type, gpus_per_server=pool.gpus_per_server,
                         scheme=scheme)
        notes["annotated"] = True if annotate_workloads is True else annotate_workloads
    if isinstance(timing, FittedCatalog):
        gpu_type = catalog_gpu_type(timing, pool.gpu_type)
        used = sorted(set(timing.covered(gpu_type)) & set(table["model"].dropna()) if "model" in table else ())
        notes.update({"iteration_time": timing.source, "iteration_time_gpu_type": gpu_type,
                      "iteration_time_fitted": used})
        if gpu_type == pool.gpu_type:
            notes.pop("iteration_time_note", None)
    filled = fill_durations(table, timing, gpu_type=gpu_type, gpus_per_server=pool.gpus_per_server)
    fitted = (fit_changed(table, filled, pool.gpu_type, pool.gpus_per_server) if isinstance(timing, FittedCatalog)
              else frozenset())
    return filled, notes, fitted


def nominal_durations(table: pd.DataFrame, gpus_per_server: int, models: dict[str, Any]) -> pd.DataFrame:
    """``duration`` = each goodput job's run time alone at its own GPU count and global batch
    (``models``: the applications' goodput models by name)."""
    unknown = ~table["model"].isin(list(models)).to_numpy()
    if unknown.any():
        raise JobError(f"no goodput model for this application; known: {', '.join(sorted(models))}", table,
                       unknown, "model")
    out = table.copy()
    durations = []
    for i, (app, gpus, batch) in enumerate(zip(out["model"], out["num_gpus"], out["global_batch"])):
        try:
            durations.append(models[app].run_time(int(gpus), int(batch), gpus_per_server))
        except ValueError as err:
            raise JobError(f"{gpus} GPUs, global batch {batch}: {err}", out, np.arange(len(out)) == i) from None
    out["duration"] = durations
    return out


@contextmanager
def gc_paused():
    """No cyclic garbage collection inside (a replay runs so): building the job records and replaying
    allocate millions of tracked objects (jobs, event tuples) but make few reference cycles (none in
    the baselines, a few per job in some sharing policies), so the collector's repeated walks of the
    growing heap are nearly pure cost (~5% of a Tiresias replay). Results cannot change: the collector
    only frees unreachable cycles, which nothing in a replay reads; it runs again (if it was on) as
    soon as the block ends, and frees what was left then."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@gc_paused()
def _replay(spec: ReplaySpec, prepared: Prepared, policy: PolicyRun, progress: bool | Callable[[int, int], None],
            wrap_policy: Callable[[Policy], Policy] | None = None,
            make_engine: Callable[..., Engine] = Engine) -> ReplayResult:
    """One policy on the prepared table. ``spec.interference`` is the ξ source that decides how fast
    co-located jobs really run (``analytic`` by default; see ``sched/models/interference.py``), a fresh
    copy per policy (a source counts its own fallbacks); the iteration-time catalog gives the sharing
    model its solo speeds. With SMACT profiles the engine records who held which GPU and the summary
    gains the SM-activity distribution's ``smact_*`` metrics (Castor Fig. 12c/d). With ``inference``
    the cluster's inference pool lends servers to a policy that borrows them (``sched/core/pools.py``)
    and the summary gains Lyra's figures."""
    parts, timing = prepared.parts, prepared.timing
    cluster = parts.cluster
    sharing = parts.sharing()
    decider = parts.policy(policy)
    engine, orchestrator, decider = _engine(spec, prepared, decider, sharing, progress, wrap_policy, make_engine)
    result = engine.run()
    jobs = job_table(result)
    summary = summarize(jobs, result)
    if orchestrator is not None:
        from schedlab.sched.core.pools import pool_summary

        summary.update(pool_summary(result, jobs))
    summary.update(decider.metrics())
    if summary.get("estimate_reads") == 0:
        warnings.warn(f"policy {policy.label} read no duration on this trace: knowledge: estimate changed"
                      " nothing (docs/estimates.md)", KnowledgeWarning, stacklevel=2)
    summary["interference"] = sharing.interference.name
    summary["xi_fallback_pairs"] = sharing.interference.fallbacks
    if isinstance(timing, FittedCatalog):
        summary["iteration_time"] = timing.source
    counts, unused = applied(spec, timing, prepared.notes, jobs, policy.policy_class(),  # what each model and
                             _fit_changed(spec, prepared, policy, jobs, sharing), len(sharing.fit_changed))  # option did
    distribution = None
    load_report = prepared.load_report
    if parts.smact is not None:
        smact_metrics, distribution, smact_notes = replay_smact(result, parts.smact)
        summary.update(smact_metrics)
        load_report = {**load_report, **smact_notes}
    summary = {
        "policy": policy.label,
        "cluster": cluster.name,
        "placement": spec.placement,
        "seed": spec.seed,
        **summary,
        "jobs_read": load_report.get("read", summary["jobs"]),
        "jobs_dropped": sum(load_report.get("dropped", {}).values()),
        "load_report": load_report,
    }
    utilization = pd.DataFrame(result.utilization_timeline, columns=["time", "busy_gpus"])
    if orchestrator is not None:
        from schedlab.sched.core.pools import utilization_with_capacity

        utilization = utilization_with_capacity(utilization, result.pools)
    return ReplayResult(policy=policy.label, jobs=jobs, summary=summary, utilization=utilization, smact=distribution,
                        applied=counts, unused=unused, groups=prepared.groups)


def _engine(spec: ReplaySpec, prepared: Prepared, decider: Policy, sharing: SharingModel,
            progress: bool | Callable[[int, int], None],
            wrap_policy: Callable[[Policy], Policy] | None = None,
            make_engine: Callable[..., Engine] = Engine) -> tuple[Engine, Any, Policy]:
    """The engine of one policy's replay, the pools' orchestrator (None without loaned servers) and the
    policy as the engine runs it (in estimate mode with its estimator, then ``wrap_policy``'s)."""
    parts, table = prepared.parts, prepared.table
    goodput_models = None
    if "global_batch" in table.columns:
        goodput_models = parts.goodput_models()
        decider.for_goodput_jobs()
    source = JobSource(table, goodput_models)  # job records made as they arrive, dropped as they end
    decider = with_knowledge(decider, source.table, spec.seed)  # estimate mode: its estimator and blindfold
    if wrap_policy is not None:
        decider = wrap_policy(decider)
    state, orchestrator = parts.cluster_state(spec)
    engine = make_engine(
        source,
        state,
        decider,
        placement=spec.placement,
        preemption_overhead_s=restore_overhead(spec.preemption_overhead_s),
        seed=spec.seed,
        progress=progress,
        sharing=sharing,
        allocation_stall_s=restore_overhead(spec.allocation_stall_s, STALL),
        stall_at_shared_pace=spec.stall_at_shared_pace,
        record_occupancy=parts.smact is not None,
        orchestrator=orchestrator,
    )
    use_elastic_scaling(engine)
    return engine, orchestrator, decider


def _fit_changed(spec: ReplaySpec, prepared: Prepared, policy: PolicyRun, jobs: pd.DataFrame,
                 sharing: SharingModel) -> set[str]:
    """The ids of the jobs a fitted iteration-time model changed (``sched/results/applied.py``): those it
    gave another duration, and those whose speeds read from it differ from the catalog's. When it gave no
    other duration but the policy read such speeds, whether that changed anything is known only by the
    replay again with the catalog's speeds (same table, policy, seed): the jobs whose rows differ then."""
    changed = set(prepared.fitted) | sharing.fit_changed
    if prepared.fitted or not sharing.fit_changed:
        return changed
    parts = prepared.parts
    catalog = SharingModel.for_cluster(parts.cluster, fresh(parts.interference), default_catalog())
    engine, _, _ = _engine(spec, prepared, parts.policy(policy), catalog, False)
    other = job_table(engine.run()).set_index("job_id")
    mine = jobs.set_index("job_id")
    differs = pd.Series(False, index=mine.index)
    for column in mine.columns.intersection(other.columns):
        a, b = mine[column], other[column].reindex(mine.index)
        differs |= ~((a == b) | (a.isna() & b.isna()))
    return set(differs.index[differs.to_numpy()])


def write_atomic(path: Path, write) -> None:
    """Write through a temp file of a unique name (concurrent writers never share one), then rename.
    An OS error (full disk, read-only, no permission) raises :class:`OutputError` naming ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        tmp.replace(path)
    except OSError as err:  # pyarrow's carry no file name: name it here
        raise OutputError(f"{path}: cannot write ({os_reason(err)})") from None
    finally:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
