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
from typing import Any, Callable, Optional, Sequence

from .collectors import DEFAULT_INTERVAL_S, Collector, HostCollector
from .indicators import ALL_INDICATORS, percentile
from .runner import EXIT_OOM
from .store import ProfileRecord


#: called with each job's results so far, the collectors and their source name, while a batch runs
Progress = Callable[[list[list[Optional[dict[str, Any]]]], list[Collector], str], None]


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
    mps: bool = True  # False: MPS cannot run here (probed), MPS configurations stay unmeasured
    key_host: Optional[str] = None  # the machine name in configuration keys (default: this host's)
    #: CPU "devices" (the testbed's core sets, ``profiling/testbed/devices.py``): a job on n devices runs
    #: one process per set, each pinned to its set's cores (a pair's two jobs on the same ones); None: not
    #: pinned
    cpu_sets: Optional[list[list[int]]] = None


@dataclass
class Job:
    """One runner invocation: the configurations it runs one after another (a batch; usually one) plus
    how many processes (GPUs) each uses."""

    specs: list[dict[str, Any]]
    num_gpus: int = 1
    first_device: int = 0  # its devices are the run's [first_device, first_device + num_gpus)


def launch(job: Job, result: Path, log: Path, env: dict[str, str], python: str,
           barrier: Optional[Path] = None, name: str = "a", stop_at: Optional[float] = None,
           cpu_sets: Optional[Sequence[Sequence[int]]] = None, parties: int = 2) -> subprocess.Popen[bytes]:
    """Start ``python -m schedlab.profiling.runner`` (through torchrun for > 1 GPU); with ``cpu_sets`` (one
    per process, the testbed's CPU devices) each process is pinned to its set, as the testbed pins a
    multi-device job's ranks (``profiling/testbed/process.py``), and torchrun's agent to their union."""
    mod = ["-m", "schedlab.profiling.runner", "--spec", json.dumps(job.specs), "--result", str(result)]
    if barrier is not None:
        mod += ["--barrier", str(barrier), "--name", name, "--parties", str(parties)]
    if stop_at is not None:
        mod += ["--stop-at", repr(stop_at)]
    sets = [",".join(map(str, cores)) for cores in cpu_sets or []]
    pin = ["--cpus", ",".join(sets)] if sets else []
    guard = [python, "-m", "schedlab.profiling.guard"]
    if job.num_gpus > 1:
        rank_pin = [*guard, "--rank-cpus", ";".join(sets)] if sets else []
        mod = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={job.num_gpus}", "--no-python",
               *rank_pin, python, *mod]
    cmd = [*guard, *pin, python, *mod]
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


def read_progress(result: Path) -> dict[str, Any]:
    """The runner's result file (``{"results", "current", "started"}``), empty before its first write."""
    try:
        return json.loads(result.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"results": [], "current": None, "started": None}


def wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float,
             results: Sequence[Path] = (), hard_deadline: Optional[float] = None,
             barrier: Optional[Path] = None,
             poll: Optional[Callable[[list[dict[str, Any]]], None]] = None) -> str:
    """Wait for every process.  Returns ``"ok"``; ``"timeout"`` when one configuration ran longer than
    ``timeout_s`` (counted from the start of the configuration each runner reports in its ``results``
    file, else from now); ``"deadline"`` at ``hard_deadline`` (epoch s).  On a timeout or the deadline
    every group is killed.  When one member of a pair has exited, the pair's ``barrier`` gets its
    ``stop`` mark, so the other starts nothing it could not measure beside a partner.  ``poll`` gets the
    runners' result files as read (:func:`read_progress`) about ten times a second (the sweep stores
    finished configurations from them)."""
    start = time.time()
    while any(p.poll() is None for p in procs):
        now = time.time()
        if barrier is not None and any(p.poll() is not None for p in procs):
            (barrier / "stop").touch()
        progress = [read_progress(r) for r in results]
        if poll is not None:
            poll(progress)
        began = [state.get("started") or start for state in progress] or [start]
        verdict = ("deadline" if hard_deadline is not None and now >= hard_deadline
                   else "timeout" if now - max(began) > timeout_s else None)
        if verdict:
            for q in procs:
                kill_group(q)
            return verdict
        time.sleep(0.1)
    return "ok"


def _per_config(done: list[Optional[dict[str, Any]]], n: int) -> list[Optional[dict[str, Any]]]:
    """One entry per configuration of a batch of ``n``: its result, None where there is none yet."""
    return done[:n] + [None] * (n - len(done))


def outcomes(p: subprocess.Popen[bytes], result: Path, log: Path, n: int, ended: str,
             timeout_s: float) -> list[Optional[dict[str, Any]]]:
    """The results of a runner's ``n`` configurations; how the process ended (``ok``, ``timeout``,
    ``deadline``) decides the one it was running (timeout, oom, error; none when the sweep's deadline
    stopped it); None = not measured."""
    progress = read_progress(result)
    done: list[Optional[dict[str, Any]]] = list(progress.get("results") or [])
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    oom_in_log = "out of memory" in tail.lower() or "OutOfMemoryError" in tail
    for res in done:
        if res and res.get("status") == "error" and oom_in_log and "PartnerFailed" not in str(res.get("message")):
            res["status"] = "oom"  # another rank ran out of memory
    running = progress.get("current") is not None or (not done and p.returncode)  # or died before its first write
    if len(done) < n and running and ended != "deadline":
        if ended == "timeout":
            done.append({"status": "timeout", "message": f"killed after {timeout_s:g}s"})
        elif p.returncode == EXIT_OOM or oom_in_log:
            done.append({"status": "oom", "message": tail.strip().splitlines()[-1] if tail.strip() else "out of memory"})
        else:
            done.append({"status": "error", "message": f"exit {p.returncode}: {tail.strip()[-800:]}"})
    return _per_config(done, n)


def outcome(p: subprocess.Popen[bytes], result: Path, log: Path, timed_out: bool,
            timeout_s: float) -> dict[str, Any]:
    """The result of a one-configuration runner (see :func:`outcomes`)."""
    (res,) = outcomes(p, result, log, 1, "timeout" if timed_out else "ok", timeout_s)
    return res or {"status": "error", "message": "no result"}


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
        except Exception as exc:  # an NVML call the driver refuses (in a VM, say): measure without it
            print(f"warning: NVML collector failed ({type(exc).__name__}: {exc}); GPU indicators will be missing",
                  file=sys.stderr)
    return None, "none"


def fill(rec: ProfileRecord, res: dict[str, Any], collectors: Sequence[Collector]) -> ProfileRecord:
    """Copy a runner result and the window's indicator statistics into ``rec``."""
    rec.status = res.get("status", "error")
    rec.message = res.get("message")
    for k in ("gpu_model", "gpu_uuid", "driver_version", "torch_version", "cuda_version", "peak_mem_bytes",
              "mem_source", "throughput", "window_start", "window_end", "wall_s"):
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
                elif k == "nvml_sm_clock_mhz" and m is not None:
                    rec.sm_clock_mean_mhz = m
            labels = getattr(c, "labels", None)
            if labels and not rec.gpu_uuid:  # a CPU run records the exporter's GPU identity
                rec.gpu_uuid = ",".join(g.uuid for g in labels)
                rec.gpu_model = rec.gpu_model or ",".join(sorted({g.model for g in labels}))
                rec.driver_version = rec.driver_version or labels[0].driver or None
        missing = [k for k in ALL_INDICATORS if rec.ind.get(f"{k.lower()}_mean") is None]
        rec.indicators_missing = ",".join(missing) or None
    return rec


def run_jobs(jobs: list[Job], ctx: Context, timeout_s: float, gpus: list[str],
             env_extra: Optional[list[dict[str, str]]] = None, stop_at: Optional[float] = None,
             hard_deadline: Optional[float] = None, on_progress: Optional[Progress] = None,
             ) -> tuple[list[list[Optional[dict[str, Any]]]], list[Collector], str]:
    """Run one job (solo) or several at once (a pair, or a multi-device job with a partner on each of its
    devices; their batches in lockstep) and return, per job, one result per configuration (None: not
    measured, e.g. the deadline came first). Each job runs on its ``first_device``'s devices.  ``on_progress``
    sees the results so far while the runners work (finished configurations are stored at once)."""
    tag = hashlib.sha1(f"{time.time()}{os.getpid()}".encode()).hexdigest()[:10]
    wd = ctx.work_dir / tag
    wd.mkdir(parents=True, exist_ok=True)
    barrier = wd / "barrier" if len(jobs) > 1 else None
    if barrier:
        barrier.mkdir()
    gcol, gsrc = gpu_collector(ctx, gpus)
    cols: list[Collector] = [HostCollector(ctx.interval_s)] + ([gcol] if gcol else [])
    src = "+".join(([gsrc] if gsrc != "none" else []) + ["host"])
    procs, paths = [], []
    ended = "ok"
    try:
        for i, job in enumerate(jobs):
            env = dict(os.environ, **(env_extra[i] if env_extra else {}))
            if ctx.device == "cuda":
                env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA indices = NVML/DCGM `gpu` indices
                if not (env_extra and "CUDA_VISIBLE_DEVICES" in env_extra[i]):
                    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[job.first_device:job.first_device + job.num_gpus])
            threads = job.specs[0].get("threads") if job.specs else None
            if threads:
                env["OMP_NUM_THREADS"] = str(threads)
            res, log = wd / f"result{i}.json", wd / f"log{i}.txt"
            paths.append((res, log))
            sets = ctx.cpu_sets[job.first_device:job.first_device + job.num_gpus] if ctx.cpu_sets else None
            procs.append(launch(job, res, log, env, ctx.python, barrier, name=str(i), stop_at=stop_at, cpu_sets=sets,
                                parties=len(jobs)))
        for c in cols:  # runners spend seconds importing torch and warming up first
            c.start()
        progress = (lambda states: on_progress([_per_config(list(state.get("results") or []), len(job.specs))
                                                for state, job in zip(states, jobs)], cols, src)) if on_progress else None
        ended = wait_all(procs, timeout_s, [r for r, _ in paths], hard_deadline, barrier, progress)
    finally:
        for p in procs:
            if p.poll() is None:
                kill_group(p)
        for c in cols:
            c.stop()
            if c.errors:
                print(f"warning: collector {c.name}: {len(c.errors)} failed reads, first: {c.errors[0]}", file=sys.stderr)
    results = [outcomes(p, r, lg, len(job.specs), ended, timeout_s) for p, (r, lg), job in zip(procs, paths, jobs)]
    return results, cols, src
