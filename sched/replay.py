"""Replay one canonical job table through one policy on one cluster: the unit every experiment fans out."""

from __future__ import annotations

import gc
import json
import math
import os
import secrets
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from schedlab.sched.traces.annotate import annotate, catalog_gpu_type, fill_durations
from schedlab.sched.core.cluster import ClusterSpec, ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.core.job import JobSource
from schedlab.sched.results.metrics import job_table, summarize
from schedlab.sched.results.outdir import OutputError, os_reason
from schedlab.sched.core.placement import DEFAULT, canonical_placement
from schedlab.sched.policies import make_policy
from schedlab.sched.models.scaling import use_elastic_scaling
from schedlab.sched.models.sharing import SharingModel
from schedlab.sched.models.smact import SmactProfile, replay_smact
from schedlab.sched.traces.common import JobError, LoadReport
from schedlab.sched.models.workloads import FittedCatalog, WorkloadCatalog, default_catalog


@dataclass
class ReplayResult:
    policy: str
    jobs: pd.DataFrame
    summary: dict[str, Any]
    utilization: pd.DataFrame = field(default_factory=pd.DataFrame)  # time, busy_gpus
    smact: pd.DataFrame | None = None  # smact, gpu_s: the SM-activity distribution, when profiled

    def write(self, out_dir: str | Path) -> Path:
        """Write ``jobs.parquet``, ``summary.json`` and ``utilization.parquet`` (and ``smact.parquet``
        when the SM-activity distribution was computed), atomically, file by file."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "jobs.parquet", lambda p: self.jobs.to_parquet(p, index=False))
        write_atomic(out / "utilization.parquet", lambda p: self.utilization.to_parquet(p, index=False))
        if self.smact is not None:
            write_atomic(out / "smact.parquet", lambda p: self.smact.to_parquet(p, index=False))
        write_atomic(out / "summary.json", lambda p: p.write_text(json.dumps(_jsonable(self.summary), indent=2)))
        return out


def prepare_table(
    table: pd.DataFrame, cluster: ClusterSpec, *, annotate_workloads: bool | str | dict = False, seed: int = 0,
    goodput_root: str | Path | None = None, iteration_time: str | WorkloadCatalog | None = None,
    report: LoadReport | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Optionally annotate workloads, then fill solo durations from the catalog where a trace gives
    ``model, batch_size, iterations`` only. Iteration times are for the cluster's training GPU type,
    or the catalog's reference type when the catalog has no figures for it (reported in the notes).

    ``iteration_time`` (``catalog``, a fitted model's path or URI, or a catalog object from
    :func:`~schedlab.sched.models.fitted.make_iteration_time`) decides the solo durations: a fitted model's
    parameters replace the catalog's for the workloads and GPU types it covers. Annotation (the work
    of a trace job in iterations) always uses the packaged catalog, so a fitted model changes how long
    the same work takes.

    Goodput jobs (a ``global_batch`` column, e.g. ``--format pollux``) get as ``duration`` their
    nominal run time: alone, at the trace's GPU count and batch, packed on the cluster's servers
    (specs/pollux.md); that is what SJF-like policies see as the job's length.

    ``report``: the load report of ``table`` (as :func:`~schedlab.sched.traces.load_trace` returned
    both): an error about a job then names the trace file, the job's data row and the file's column."""
    try:
        return _prepare_table(table, cluster, annotate_workloads, seed, goodput_root, iteration_time)
    except JobError as err:
        if report is None:
            raise
        raise report.locate(err) from None


def _prepare_table(
    table: pd.DataFrame, cluster: ClusterSpec, annotate_workloads: bool | str | dict, seed: int,
    goodput_root: str | Path | None, iteration_time: str | WorkloadCatalog | None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    pool = cluster.training_pool
    if "global_batch" in table.columns:
        return nominal_durations(table, pool.gpus_per_server, goodput_root), {"goodput": True}
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
    timing = iteration_catalog(iteration_time)
    if isinstance(timing, FittedCatalog):
        gpu_type = catalog_gpu_type(timing, pool.gpu_type)
        used = sorted(set(timing.covered(gpu_type)) & set(table["model"].dropna()) if "model" in table else ())
        notes.update({"iteration_time": timing.source, "iteration_time_gpu_type": gpu_type,
                      "iteration_time_fitted": used})
        if gpu_type == pool.gpu_type:
            notes.pop("iteration_time_note", None)
    table = fill_durations(table, timing, gpu_type=gpu_type, gpus_per_server=pool.gpus_per_server)
    return table, notes


def iteration_catalog(spec: str | WorkloadCatalog | None) -> WorkloadCatalog:
    """The catalog a replay takes iteration times from (``spec`` as :func:`make_iteration_time`)."""
    if isinstance(spec, WorkloadCatalog):
        return spec
    from schedlab.sched.models.fitted import make_iteration_time

    return make_iteration_time(spec)


def nominal_durations(table: pd.DataFrame, gpus_per_server: int, root: str | Path | None = None) -> pd.DataFrame:
    """``duration`` = each goodput job's run time alone at its own GPU count and global batch."""
    from schedlab.sched.models.goodput import load_applications

    models = load_applications(root)
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
def replay(
    table: pd.DataFrame,
    cluster: ClusterSpec | str,
    policy: str,
    params: dict[str, Any] | None = None,
    *,
    placement: str = DEFAULT,
    seed: int = 0,
    preemption_overhead_s: float | None = None,
    interference: str | None = None,
    iteration_time: str | WorkloadCatalog | None = None,
    load_report: dict[str, Any] | None = None,
    progress: bool | Callable[[int, int], None] = False,
    allocation_stall_s: float | None = None,
    goodput_root: str | Path | None = None,
    smact: SmactProfile | None = None,
    inference: Any = None,
) -> ReplayResult:
    """Replay ``table`` through ``policy``. ``interference`` is the ξ source that decides how fast
    co-located jobs really run (``analytic`` by default; see ``sched/models/interference.py``);
    ``iteration_time`` the catalog or fitted model of solo speeds the sharing model uses (the table's
    durations come from :func:`prepare_table` with the same source). With ``smact`` (profiled SMACT,
    :func:`schedlab.profiling.smact.smact_profile`) the engine records who held which GPU and the
    summary gains the SM-activity distribution's ``smact_*`` metrics (Castor Fig. 12c/d). With
    ``inference`` (:class:`~schedlab.sched.core.pools.LoanOptions`) the cluster's inference pool lends
    servers to a policy that borrows them (``sched/core/pools.py``) and the summary gains Lyra's figures."""
    for option, value in (("preemption_overhead_s", preemption_overhead_s), ("allocation_stall_s", allocation_stall_s)):
        if value is not None and not 0 <= value < math.inf:
            raise ValueError(f"{option} must be a finite number of seconds >= 0, got {value!r}")
    placement = canonical_placement(placement)  # the summary names the strategy, not an alias
    spec = load_cluster(cluster) if isinstance(cluster, str) else cluster
    timing = iteration_catalog(iteration_time)
    sharing = SharingModel.for_cluster(spec, interference, timing)
    decider = make_policy(policy, params)
    goodput_models = None
    if "global_batch" in table.columns:
        from schedlab.sched.models.goodput import load_applications

        goodput_models = load_applications(goodput_root)
        decider.for_goodput_jobs()
    state, orchestrator = ClusterState(spec), None
    if inference is not None:
        from schedlab.sched.models.inference import load_inference
        from schedlab.sched.core.pools import Orchestrator, PooledCluster

        state = PooledCluster(spec, inference)
        orchestrator = Orchestrator(load_inference(inference.load), inference, seed)
    engine = Engine(
        JobSource(table, goodput_models),  # job records made as they arrive, dropped as they end
        state,
        decider,
        placement=placement,
        preemption_overhead_s=preemption_overhead_s,
        seed=seed,
        progress=progress,
        sharing=sharing,
        allocation_stall_s=allocation_stall_s,
        record_occupancy=smact is not None,
        orchestrator=orchestrator,
    )
    use_elastic_scaling(engine)
    result = engine.run()
    jobs = job_table(result)
    summary = summarize(jobs, result)
    if orchestrator is not None:
        from schedlab.sched.core.pools import pool_summary

        summary.update(pool_summary(result, jobs))
    summary.update(decider.metrics())
    summary["interference"] = sharing.interference.name
    summary["xi_fallback_pairs"] = sharing.interference.fallbacks
    if isinstance(timing, FittedCatalog):
        summary["iteration_time"] = timing.source
    distribution = None
    if smact is not None:
        smact_metrics, distribution, smact_notes = replay_smact(result, smact)
        summary.update(smact_metrics)
        load_report = {**(load_report or {}), **smact_notes}
    summary = {
        "policy": policy,
        "cluster": spec.name,
        "placement": placement,
        "seed": seed,
        **summary,
        "jobs_read": (load_report or {}).get("read", summary["jobs"]),
        "jobs_dropped": sum((load_report or {}).get("dropped", {}).values()),
        "load_report": load_report or {},
    }
    utilization = pd.DataFrame(result.utilization_timeline, columns=["time", "busy_gpus"])
    if orchestrator is not None:
        from schedlab.sched.core.pools import utilization_with_capacity

        utilization = utilization_with_capacity(utilization, result.pools)
    return ReplayResult(policy=policy, jobs=jobs, summary=summary, utilization=utilization, smact=distribution)


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
