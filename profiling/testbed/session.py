"""One testbed session (:class:`~schedlab.profiling.testbed.spec.TestbedSpec`): the node's models,
then for each policy the real run, the replay of the same trace with the node's models, and the
comparison. Layout of ``OUT``::

    node/            node.json (start-up, restart, stop; facts), iteration-time.json, xi-table.csv
    profiles/        the node's profile store (unless --profiles names another)
    trace.csv        the generated mini trace (--generate)
    POLICY/testbed/  jobs.parquet (a replay's columns), summary.json, utilization.parquet,
                     activity.jsonl, jobs/<job>/ (each start's progress, log, result; the checkpoint)
    POLICY/replay/   jobs.parquet, summary.json, utilization.parquet, activity.jsonl
    POLICY/comparison.json
    summary.json     every policy's headline figures, the node's models and the machine's load
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pandas as pd

from schedlab.profiling.testbed import minitrace, node
from schedlab.profiling.testbed.activity import ActivityLog, Recorder
from schedlab.profiling.testbed.budget import error_sources
from schedlab.profiling.testbed.compare import compare, render
from schedlab.profiling.testbed.devices import Device
from schedlab.profiling.testbed.live import LiveEngine
from schedlab.profiling.testbed.process import JobProcess, JobStart
from schedlab.profiling.testbed.spec import TestbedSpec, environment_note, mps_split

Echo = Callable[[str], None]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return _jsonable(value.item())
    return value


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(_jsonable(data), indent=1) + "\n")
    tmp.replace(path)
    return path


def _cpu_s() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cluster_for(devices: list[Device]):
    """The testbed as the engine's cluster: one server per host (devices are numbered host by host), each
    of its devices a GPU of the node's type (``cpu`` for CPU devices; the GPU's type as the profiler names
    it)."""
    from schedlab.profiling.fitting import gpu_type_of
    from schedlab.sched.core.cluster import GPU_MEMORY_GB, ClusterSpec, PoolSpec

    gpu_type = "cpu"
    if devices[0].kind == "cuda":
        name = devices[0].name
        if name is None:
            import torch

            name = torch.cuda.get_device_name(0)
        gpu_type = gpu_type_of("cuda", name)
    if gpu_type not in GPU_MEMORY_GB:
        raise ValueError(f"GPU type {gpu_type!r} is not one a cluster may name ({', '.join(GPU_MEMORY_GB)})")
    hosts = list(dict.fromkeys(d.host for d in devices))
    per_host = len(devices) // len(hosts)
    if [d.host for d in devices] != [h for h in hosts for _ in range(per_host)]:
        raise ValueError(f"the testbed's servers must be alike, their devices numbered host by host"
                         f" ({', '.join(d.label for d in devices)})")
    pool = PoolSpec(name="training", servers=len(hosts), gpus_per_server=per_host,
                    gpu_type=gpu_type, gpu_memory_gb=GPU_MEMORY_GB[gpu_type])
    return ClusterSpec(name=f"testbed-{gpu_type}-{len(devices)}", pools=[pool])


def _profile_table(spec: TestbedSpec, trace: pd.DataFrame | None, devices: int) -> pd.DataFrame:
    """What the node must profile: the trace's job kinds, or for --generate every kind at every size
    a mini trace may give a job."""
    if trace is not None:
        return trace
    sizes = sorted({1, max(1, devices // 4), max(1, devices // 2), devices})
    rows = [(w, b, g) for w, b in spec.kind_pairs() for g in sizes]
    return pd.DataFrame(rows, columns=["model", "batch_size", "num_gpus"])


def node_models(spec: TestbedSpec, devices: list[Device], trace: pd.DataFrame | None, echo: Echo) -> node.NodeModels:
    """The node's models: read from ``--models``, else profiled, fitted and measured into ``OUT/node``."""
    if spec.models is not None:
        echo(f"node models: {spec.models}")
        return node.NodeModels.load(spec.models)
    folder = spec.out / "node"
    table = _profile_table(spec, trace, len(devices))
    started, load_before = time.time(), node.load_average()
    echo(f"profiling {len(node.job_kinds(table))} job kinds into {spec.profile_dir} ({environment_note()})")
    counts = node.profile(table, devices, spec.profile_dir, size=spec.workload_size, mps_shares=spec.mps_shares(),
                          iters=spec.profile_iters, min_seconds=spec.profile_seconds, echo=echo)
    fitted = node.fit(spec.profile_dir, folder, spec.workload_size, echo)
    timing = _timing(folder / node.ITERATION_FILE)
    gpu_type = cluster_for(devices).training_pool.gpu_type
    overheads = node.measure_overheads(
        node.job_kinds(table), devices, folder, lambda w, b, g: timing.solo_iteration_time(w, b, g, gpu_type, servers=1),
        size=spec.workload_size, samples=spec.overhead_samples, echo=echo)
    facts = {**node.facts(devices), "profile_counts": counts, "fit": fitted, "overheads": overheads["samples"],
             "load_before": load_before, "load_after": node.load_average(), "wall_s": time.time() - started}
    models = node.NodeModels(folder, overheads["startup_s"], overheads["restart_s"], overheads["stop_s"], facts,
                             overheads["startup_by_devices"])
    models.save()
    multi = "".join(f", on {n} devices {v:.2f} s" for n, v in sorted(models.startup_by_devices.items()))
    echo(f"node: start-up {models.startup_s:.2f} s{multi}, restart {models.restart_s:.2f} s, stop {models.stop_s:.2f} s;"
         f" models in {folder}")
    return models


def _timing(path: Path):
    """The node's fitted iteration-time model as a replay builds it (``sched/parts.py``)."""
    from schedlab.sched.parts import iteration_times

    return iteration_times(str(path))


def load_testbed_trace(path: str, devices: int) -> pd.DataFrame:
    """A canonical trace whose every job names a workload the profiler can run and fits the devices."""
    from schedlab.profiling.workloads import WORKLOADS
    from schedlab.sched.traces import LoadOptions, load_trace

    table, _ = load_trace(path, None, LoadOptions(max_gpus=devices))
    missing = [c for c in ("model", "batch_size", "iterations") if c not in table.columns]
    if missing:
        raise ValueError(f"{path}: the testbed runs jobs by workload; missing column(s) {', '.join(missing)}")
    bad = table[~table["model"].isin(list(WORKLOADS)) | table["iterations"].isna() | (table["iterations"] < 1)
                | table["batch_size"].isna() | (table["batch_size"] < 1)]
    if len(bad):
        row = bad.iloc[0]
        raise ValueError(f"{path}: job {row['job_id']}: model must be one of {', '.join(WORKLOADS)}, batch_size"
                         f" and iterations >= 1 (got {row['model']!r}, {row['batch_size']}, {row['iterations']})")
    return table.drop(columns=[c for c in ("duration",) if c in table.columns])


def run_policy(spec: TestbedSpec, policy, devices: list[Device], table: pd.DataFrame, models: node.NodeModels,
               mps_env, echo: Echo, launcher: Callable[..., JobStart] = JobProcess) -> dict[str, Any]:
    """The real run and the replay of one policy, written and compared (``launcher``: what starts a job's
    processes, ``remote.Nodes.job`` when the devices are nodes')."""
    from schedlab.sched import replay
    from schedlab.sched.reporting.testbed import page

    folder = spec.out / policy.label
    rspec = replay.ReplaySpec(
        cluster=cluster_for(devices), policies=(policy,), seed=spec.seed, placement=spec.placement,
        iteration_time=str(models.iteration_time), interference=f"table:{models.xi_table}",
        preemption_overhead_s=models.restart_s, allocation_stall_s=models.allocation_stall(),
        stall_at_shared_pace=devices[0].kind == "cpu")  # a start-up competes for a CPU device's cores
    prepared = replay.prepare(rspec, table)
    iterations = dict(zip(table["job_id"].astype(str), table["iterations"].astype(int)))
    engines: list[LiveEngine] = []

    def live(*args: Any, **kwargs: Any) -> LiveEngine:
        engine = LiveEngine(*args, devices=devices, iterations=iterations, folder=folder / "testbed",
                            size=spec.workload_size, mps=mps_env, poll_s=spec.poll_s, progress_s=spec.progress_s,
                            budget_s=spec.budget_s, launcher=launcher, **kwargs)
        engines.append(engine)
        return engine

    load_before, started, cpu = node.load_average(), time.time(), _cpu_s()
    echo(f"{policy.label}: running {len(table)} jobs on the testbed ({environment_note()})")
    (real,) = replay.run(rspec, prepared, engine=live)
    engine = engines[0]
    real.summary.update({"backend": "testbed", "devices": [d.label for d in devices], "unfinished": engine.unfinished,
                         "rounded_micro_batches": engine.rounded_micro_batches, "wall_s": time.time() - started,
                         "testbed_cpu_s": _cpu_s() - cpu,  # the testbed's own loop (not its jobs): CPU it took
                         "load_before": load_before, "load_after": node.load_average()})
    real.write(folder / "testbed")
    real_log = ActivityLog(sorted(engine.log, key=lambda r: r["t"]))
    real_log.write(folder / "testbed" / "activity.jsonl")
    replay_log = ActivityLog()
    (simulated,) = replay.run(rspec, prepared, wrap_policy=lambda p: Recorder(p, replay_log))
    simulated.summary["backend"] = "replay"
    simulated.write(folder / "replay")
    replay_log.write(folder / "replay" / "activity.jsonl")
    comparison = compare(real.jobs, real_log, simulated.jobs, replay_log, spec.tolerance_s)
    comparison.update({"policy": policy.label, "load_before": load_before, "load_after": real.summary["load_after"],
                       "node": {"startup_s": models.startup_s, "startup_by_devices": models.startup_by_devices,
                                "restart_s": models.restart_s, "stop_s": models.stop_s},
                       "error_sources": error_sources(real.jobs, real_log, models.startup_s, models.restart_s,
                                                      models.startup_for),
                       "testbed_cpu_s": real.summary["testbed_cpu_s"]})
    write_json(folder / "comparison.json", comparison)
    (folder / "comparison.html").write_text(page(policy.label, comparison, real.jobs, simulated.jobs))
    echo(render(policy.label, comparison))
    return comparison


def execute(spec: TestbedSpec, echo: Echo = print) -> int:
    """Run the session (module docstring); 0 when every job of every policy finished on the testbed."""
    spec.out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        nodes = None
        if spec.dask_address is not None:
            from schedlab.profiling.testbed.remote import Nodes

            nodes = stack.enter_context(Nodes(spec.dask_address, spec.device))
            echo("nodes' clocks against this one's: " + ", ".join(
                f"{host} {off:+.3f} s (±{bound:.3f})" for host, (off, bound) in nodes.clock_offsets.items()))
            off_by = max(abs(off) + bound for off, bound in nodes.clock_offsets.values())
            if off_by > spec.tolerance_s / 4:
                echo(f"warning: a node's clock is up to {off_by:.2f} s off this one's: its jobs' activity times"
                     f" are off by as much (--tolerance-s {spec.tolerance_s:g}); synchronise the clocks (NTP)")
        devices = nodes.devices if nodes is not None else spec.make_devices()
        echo(f"testbed: {len(devices)} {spec.device} device(s): {', '.join(d.label for d in devices)};"
             f" {environment_note()}")
        trace = load_testbed_trace(spec.trace, len(devices)) if spec.trace is not None else None
        models = node_models(spec, devices, trace, echo)  # the profiler runs its own MPS daemon when it needs one
        if trace is None:
            trace = generated_trace(spec, devices, models)
            trace.to_csv(spec.out / "trace.csv", index=False)
            echo(f"mini trace: {len(trace)} jobs in {spec.out / 'trace.csv'}")
        daemon = None
        if spec.device == "cuda" and spec.mps_shares():
            from schedlab.profiling.mps import MpsDaemon

            daemon = stack.enter_context(MpsDaemon(spec.out / "mps", [d.gpu for d in devices]))
        comparisons = {p.label: run_policy(spec, p, devices, trace, models,
                                           daemon.env if daemon is not None and mps_split(p) else None, echo,
                                           nodes.job if nodes is not None else JobProcess)
                       for p in spec.policies}
    headline = {label: {"relative_error": c["relative_error"], "per_job_jct_error": c["per_job_jct_error"],
                        "real": c["real"], "replay": c["replay"],
                        "decisions_identical": c["decisions"]["first_difference"] is None,
                        "load_before": c["load_before"], "load_after": c["load_after"]}
                for label, c in comparisons.items()}
    write_json(spec.out / "summary.json", {"policies": headline, "node": {
        "startup_s": models.startup_s, "startup_by_devices": models.startup_by_devices, "restart_s": models.restart_s,
        "stop_s": models.stop_s, "facts": models.facts},
        "spec": json.loads(spec.model_dump_json())})
    unfinished = sum(c["real"]["jobs"] - c["real"]["finished"] for c in comparisons.values())
    return 0 if unfinished == 0 else 1


def generated_trace(spec: TestbedSpec, devices: list[Device], models: node.NodeModels) -> pd.DataFrame:
    """``--generate``'s mini trace, its iterations from the node's fitted model."""
    timing = _timing(models.iteration_time)
    gpu_type = cluster_for(devices).training_pool.gpu_type
    return minitrace.generate(
        spec.generate, len(devices), spec.kind_pairs(),
        lambda w, b, g: timing.solo_iteration_time(w, b, g, gpu_type, servers=1),
        budget_s=spec.budget_s, startup_s=models.startup_s, min_job_s=spec.min_job_s, max_job_s=spec.max_job_s,
        load=spec.load, seed=spec.seed)
