"""Runs one configuration in runner subprocesses with the collectors sampling in this
process (Castor §7: a short bounded profiling run, T_prof, per job configuration).

Timeouts kill the whole process group; out-of-memory and crashes become records.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from .collectors import DEFAULT_INTERVAL_S, Collector, HostCollector
from .indicators import ALL_INDICATORS, percentile
from .runner import EXIT_OOM
from .store import ProfileRecord


@dataclass
class Context:
    """Where and how configurations run."""

    device: str = "cpu"  # resolved: cpu | cuda
    gpus: list[str] = field(default_factory=lambda: ["0"])
    dcgm_url: Optional[str] = None
    interval_s: float = DEFAULT_INTERVAL_S
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="schedlab-run-")))
    python: str = sys.executable
    mps_root: Optional[Path] = None


@dataclass
class Job:
    """One runner invocation: a spec plus how many processes (GPUs)."""

    spec: dict[str, Any]
    num_gpus: int = 1
    share: Optional[float] = None


def launch(job: Job, result: Path, log: Path, env: dict[str, str], python: str,
           barrier: Optional[Path] = None, name: str = "a") -> subprocess.Popen[bytes]:
    """Start ``python -m schedlab.profiling.runner`` (through torchrun for > 1 GPU)."""
    mod = ["-m", "schedlab.profiling.runner", "--spec", json.dumps(job.spec), "--result", str(result)]
    if barrier is not None:
        mod += ["--barrier", str(barrier), "--name", name, "--parties", "2"]
    dist = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={job.num_gpus}"]
    cmd = [python, "-m", "schedlab.profiling.guard", python] + (dist if job.num_gpus > 1 else []) + mod
    out = open(log, "wb")
    try:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    finally:
        out.close()


def kill_group(p: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> bool:
    """Wait for every process; on timeout kill all groups and return False."""
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                kill_group(q)
            return False
    return True


def outcome(p: subprocess.Popen[bytes], result: Path, log: Path, timed_out: bool,
            timeout_s: float) -> dict[str, Any]:
    """The runner's result, or a status derived from how the process ended."""
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    oom_in_log = "out of memory" in tail.lower() or "OutOfMemoryError" in tail
    if result.exists():
        res = json.loads(result.read_text())
        if res.get("status") == "error" and oom_in_log:  # another rank ran out of memory
            res["status"] = "oom"
        return res
    if timed_out:
        return {"status": "timeout", "message": f"killed after {timeout_s:g}s"}
    if p.returncode == EXIT_OOM or oom_in_log:
        return {"status": "oom", "message": tail.strip().splitlines()[-1] if tail.strip() else "out of memory"}
    return {"status": "error", "message": f"exit {p.returncode}: {tail.strip()[-800:]}"}


def gpu_collector(ctx: Context, gpus: list[str]) -> tuple[Optional[Collector], str]:
    """dcgm-exporter when a URL is given; NVML on a CUDA run; otherwise none."""
    if ctx.dcgm_url:
        from .dcgm import DcgmCollector

        return DcgmCollector(ctx.dcgm_url, gpus, ctx.interval_s), "dcgm"
    if ctx.device == "cuda":
        from .nvml import NvmlCollector, NvmlUnavailable

        try:
            c = NvmlCollector(gpus, ctx.interval_s)
            return c, c.source
        except NvmlUnavailable as exc:
            print(f"warning: {exc}; GPU indicators will be missing", file=sys.stderr)
    return None, "none"


def fill(rec: ProfileRecord, res: dict[str, Any], collectors: Sequence[Collector]) -> ProfileRecord:
    """Copy a runner result and the window's indicator statistics into ``rec``."""
    rec.status = res.get("status", "error")
    rec.message = res.get("message")
    for k in ("gpu_model", "gpu_uuid", "driver_version", "torch_version", "cuda_version", "peak_mem_bytes",
              "mem_source", "throughput", "window_start", "window_end"):
        if res.get(k) is not None:
            setattr(rec, k, res[k])
    ts = [float(x) for x in res.get("iter_times_s", [])]
    if ts:
        mean = sum(ts) / len(ts)
        rec.iter_times_s, rec.measured_iters, rec.iter_time_mean_s = ts, len(ts), mean
        rec.iter_time_p50_s, rec.iter_time_p95_s = percentile(ts, 50), percentile(ts, 95)
        rec.iter_time_std_s = (sum((x - mean) ** 2 for x in ts) / len(ts)) ** 0.5
        rec.iter_time_min_s, rec.iter_time_max_s = min(ts), max(ts)
    if rec.window_start is not None and rec.window_end is not None:
        for c in collectors:
            for k, (m, p95) in c.summary(rec.window_start, rec.window_end).items():
                if k in ALL_INDICATORS:
                    rec.ind[f"{k.lower()}_mean"], rec.ind[f"{k.lower()}_p95"] = m, p95
                elif k == "nvml_gpu_util" and m is not None:
                    rec.gpu_util_mean = m
            labels = getattr(c, "labels", None)
            if labels and not rec.gpu_uuid:  # a CPU run records the exporter's GPU identity
                rec.gpu_uuid = ",".join(g.uuid for g in labels)
                rec.gpu_model = rec.gpu_model or ",".join(sorted({g.model for g in labels}))
                rec.driver_version = rec.driver_version or labels[0].driver or None
        missing = [k for k in ALL_INDICATORS if rec.ind.get(f"{k.lower()}_mean") is None]
        rec.indicators_missing = ",".join(missing) or None
    return rec


def run_jobs(jobs: list[Job], ctx: Context, timeout_s: float, gpus: list[str],
             env_extra: Optional[list[dict[str, str]]] = None) -> tuple[list[dict[str, Any]], list[Collector], str]:
    """Run one job (solo) or two at once (a pair) and return their results."""
    tag = hashlib.sha1(f"{time.time()}{os.getpid()}".encode()).hexdigest()[:10]
    wd = ctx.work_dir / tag
    wd.mkdir(parents=True, exist_ok=True)
    barrier = wd / "barrier" if len(jobs) > 1 else None
    if barrier:
        barrier.mkdir()
    gcol, gsrc = gpu_collector(ctx, gpus)
    cols: list[Collector] = [HostCollector(ctx.interval_s)] + ([gcol] if gcol else [])
    procs, paths = [], []
    try:
        for i, job in enumerate(jobs):
            env = dict(os.environ, **(env_extra[i] if env_extra else {}))
            if ctx.device == "cuda":
                env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA indices = NVML/DCGM `gpu` indices
                if not (env_extra and "CUDA_VISIBLE_DEVICES" in env_extra[i]):
                    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            if job.spec.get("threads"):
                env["OMP_NUM_THREADS"] = str(job.spec["threads"])
            res, log = wd / f"result{i}.json", wd / f"log{i}.txt"
            paths.append((res, log))
            procs.append(launch(job, res, log, env, ctx.python, barrier, name=str(i)))
        for c in cols:  # runners spend seconds importing torch and warming up first
            c.start()
        ok = wait_all(procs, timeout_s)
    finally:
        for p in procs:
            if p.poll() is None:
                kill_group(p)
        for c in cols:
            c.stop()
    results = [outcome(p, r, lg, not ok, timeout_s) for p, (r, lg) in zip(procs, paths)]
    src = "+".join(([gsrc] if gsrc != "none" else []) + ["host"])
    return results, cols, src
