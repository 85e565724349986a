"""The node's own models, from which the simulator replays a testbed trace (Castor §7: the profiler
feeds the simulator; Lyra §7.2: calibrate on the testbed's own figures).

1. **Profile** what the trace needs with the profiler's sweep machinery (``profiling/profiler.py``), on
   the testbed's devices (CPU devices pinned to their cores): for each workload and per-GPU batch B of
   the trace, solos at B, B/2 and B/4 (eq. 1 needs two batches) and B/2 with two accumulation steps;
   solos on n devices for the trace's multi-device jobs (a longer warm-up and window:
   ``MULTI_DEVICE_WINDOW``, ``MULTI_DEVICE_SECONDS``); every pair of the trace's one-device job kinds
   co-located (time-sliced, and under MPS at the run's shares on a GPU); each multi-device kind beside
   each one-device kind, a copy of the latter on every device (time-sliced).
2. **Fit** with the existing fit code: the iteration-time model (``fitting.store_artifact``, Castor
   §3.1 eq. 1-3) and the ξ table of the measured pairs (``mps_table``, the ``table:`` ξ source).
3. **Measure the node's overheads** with the testbed's own launcher and training process: start-up
   (launch to the end of the first iteration, less one modelled iteration: interpreter, imports, model
   build and the first iteration's extra cost), the stop (stop request to the checkpoint saved and
   the processes gone) and the restart (relaunch from the checkpoint to its first iteration's end,
   less one iteration), and the start-up of each multi-device count apart (longer: the ranks meet
   before their first iteration; about 0.5 s more on two CPU devices). The replay charges start-up
   as the engine's ``allocation_stall_s`` (every first start; a table by device count when a
   multi-device count was measured) and the restart as ``preemption_overhead_s``.

Everything is written to one folder (``node.json``, ``iteration-time.json``, ``xi-table.csv``) that a
later run can reuse (``--models``).
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations_with_replacement
from pathlib import Path
from typing import Any

import pandas as pd

from schedlab.profiling.testbed.devices import Device
from schedlab.profiling.testbed.process import JobProcess

NODE_FILE = "node.json"
ITERATION_FILE = "iteration-time.json"
XI_FILE = "xi-table.csv"


def load_average() -> list[float]:
    """``/proc/loadavg``'s 1, 5 and 15-minute averages (what else ran on the machine)."""
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return [float("nan")] * 3


@dataclass
class NodeModels:
    """Where a replay of this node's testbed takes its figures from (paths relative to ``folder``)."""

    folder: Path
    startup_s: float
    restart_s: float
    stop_s: float
    facts: dict[str, Any] = field(default_factory=dict)
    #: the start-up of a job on n > 1 devices (measured apart: its ranks meet before the first iteration)
    startup_by_devices: dict[int, float] = field(default_factory=dict)

    def startup_for(self, devices: int) -> float:
        """The start-up the replay charges on ``devices`` devices (read from :meth:`allocation_stall`'s
        table as the engine reads it)."""
        from schedlab.sched.core.restore import STALL, RestoreTable, restore_overhead

        stall = restore_overhead(self.allocation_stall(), STALL)
        return stall.seconds(devices) if isinstance(stall, RestoreTable) else stall

    def allocation_stall(self) -> float | str:
        """The replay's ``allocation_stall_s``: the one-device start-up, or a table by device count
        (``"1:2.17,2:2.71,inf:2.71"``: a count above the largest measured takes the largest's)."""
        if not self.startup_by_devices:
            return self.startup_s
        rows = [(1, self.startup_s), *sorted(self.startup_by_devices.items())]
        return ",".join(f"{n}:{s:.6g}" for n, s in rows) + f",inf:{rows[-1][1]:.6g}"

    @property
    def iteration_time(self) -> Path:
        return self.folder / ITERATION_FILE

    @property
    def xi_table(self) -> Path:
        return self.folder / XI_FILE

    def save(self) -> Path:
        data = {k: v for k, v in asdict(self).items() if k != "folder"}
        path = self.folder / NODE_FILE
        path.write_text(json.dumps(data, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> NodeModels:
        folder = Path(folder)
        path = folder / NODE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"--models {folder}: no {NODE_FILE} (run the testbed once without --models to make"
                             " one)") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON ({err.msg})") from None
        for name in ("startup_s", "restart_s", "stop_s"):
            value = data.get(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                raise ValueError(f"{path}: {name} must be a number of seconds >= 0, got {value!r}")
        for name in (ITERATION_FILE, XI_FILE):
            if not (folder / name).is_file():
                raise ValueError(f"--models {folder}: {name} is missing")
        by_devices = data.get("startup_by_devices") or {}  # absent in an older node.json: one start-up
        try:
            by_devices = {int(n): float(v) for n, v in by_devices.items()}
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"{path}: startup_by_devices must map device counts to seconds, got"
                             f" {by_devices!r}") from None
        if not all(n > 1 and math.isfinite(v) and v >= 0 for n, v in by_devices.items()):
            raise ValueError(f"{path}: startup_by_devices must map device counts > 1 to seconds >= 0, got"
                             f" {by_devices!r}")
        return cls(folder, float(data["startup_s"]), float(data["restart_s"]), float(data["stop_s"]),
                   data.get("facts") or {}, by_devices)


# ---- 1. what to profile ------------------------------------------------------------------------
def job_kinds(table: pd.DataFrame) -> list[tuple[str, int, int]]:
    """The trace's ``(workload, per-GPU batch, devices)``, in first-seen order."""
    kinds = zip(table["model"].astype(str), table["batch_size"].astype(int), table["num_gpus"].astype(int))
    return list(dict.fromkeys(kinds))


#: the measurement window of an n-device solo: data-parallel training's first iterations run slow (gloo's
#: connections and DDP's gradient buckets are set up then), and a one-second window after 3 warm-up
#: iterations kept that transient. Measured on 2 one-core devices (imagenet b32): iterations 1-6 at 54-91 ms,
#: then 37-44 ms; the old window's mean, 50.8 ms, made every 2-device job 1.2x longer in the replay (0.82x
#: on a quiet machine), the testbed's whole fifo error.
#: (each figure is a floor: a larger setting is kept)
MULTI_DEVICE_WINDOW = {"warmup": 10, "iters": 60}
#: an n-device configuration is measured this many times the one-device window (``--profile-seconds``): its
#: iterations vary more from second to second (a rank held up holds the others). Three profiles of one node
#: measured imagenet b32 on 2 devices at 41.8, 40.6 and 38.8 ms over 3 s (quarters of a window 37-43 ms),
#: while every testbed job of it ran at 41-43.5 ms over 10-30 s.
MULTI_DEVICE_SECONDS = 4.0


def sweep_for(table: pd.DataFrame, devices: Sequence[Device], *, size: str, iters: int = 20, warmup: int = 3,
              min_seconds: float = 2.0, mps_shares: Sequence[tuple[float, float]] = ()):
    """The profiling sweep a trace needs on these devices (module docstring, step 1)."""
    from schedlab.profiling.sweep import PairConfig, SoloConfig, Sweep

    threads = devices[0].threads
    common = dict(size=size, warmup=warmup, iters=iters, threads=threads, min_seconds=min_seconds)
    configs: list[Any] = []
    singles: list[SoloConfig] = []
    multis: list[SoloConfig] = []
    for workload, batch, gpus in job_kinds(table):
        for b in sorted({batch, max(1, batch // 2), max(1, batch // 4)}, reverse=True):
            configs.append(SoloConfig(workload, b, 1, 1, **common))
        if batch >= 2:
            configs.append(SoloConfig(workload, batch // 2, 2, 1, **common))
        if gpus > 1:
            window = {**{k: max(common[k], least) for k, least in MULTI_DEVICE_WINDOW.items()},
                      "min_seconds": MULTI_DEVICE_SECONDS * min_seconds}
            configs.append(SoloConfig(workload, batch, 1, gpus, **{**common, **window}))
            multis.append(configs[-1])
        singles.append(SoloConfig(workload, batch, 1, 1, **common))
    singles = list(dict.fromkeys(singles))
    kind = devices[0].kind
    for a, b in combinations_with_replacement(singles, 2):
        configs.append(PairConfig(a, b, "timeslice", (None, None)))
        if kind == "cuda":
            configs += [PairConfig(a, b, "mps", (float(sa), float(sb))) for sa, sb in mps_shares]
    # a multi-device job beside a one-device job on each of its devices (the profiler runs a copy of the
    # partner per device): its ξ and the partners', keyed by device count in the ξ table
    configs += [PairConfig(a, b, "timeslice", (None, None)) for a in dict.fromkeys(multis) for b in singles]
    unique = list(dict.fromkeys(configs))
    return Sweep("testbed", unique, timeout_s=600.0, interval_s=1.0, device=kind)


def profile(table: pd.DataFrame, devices: Sequence[Device], store_dir: Path, *, size: str,
            mps_shares: Sequence[tuple[float, float]] = (), echo: Callable[[str], None] = print,
            **settings: Any) -> dict[str, int]:
    """Measure what :func:`sweep_for` lists and the store lacks (a re-run resumes); status counts."""
    from schedlab.profiling.execute import Context
    from schedlab.profiling.profiler import Profiler
    from schedlab.profiling.store import ProfileStore

    sweep = sweep_for(table, devices, size=size, mps_shares=mps_shares, **settings)
    kind = devices[0].kind
    sets = [list(d.cores) for d in devices] if kind == "cpu" else None
    # pinned measurements are keyed apart from unpinned ones of the same machine
    host = socket.gethostname() + (f"/cores={';'.join(','.join(map(str, s)) for s in sets)}" if sets else "")
    ctx = Context(device=kind, gpus=[d.gpu for d in devices] if kind == "cuda" else ["0"], cpu_sets=sets,
                  key_host=host, mps=kind == "cuda", interval_s=sweep.interval_s)
    counts = Profiler(ProfileStore(store_dir), ctx, timeout_s=sweep.timeout_s, sweep_name=sweep.name).run(
        sweep, progress=False, echo=echo)
    return dict(counts)


# ---- 2. fit --------------------------------------------------------------------------------------
def fit(store_dir: Path, folder: Path, size: str, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Fit the iteration-time model and export the ξ table into ``folder``; their figures."""
    from schedlab.profiling.fitting import store_artifact
    from schedlab.profiling.mps_table import mps_table
    from schedlab.profiling.store import read_profiles

    df, version = read_profiles(store_dir)
    skipped: list[str] = []
    artifact = store_artifact(df, version, skipped=skipped)
    for why in skipped:
        echo(f"not fitted: {why}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ITERATION_FILE).write_text(json.dumps(artifact, indent=1) + "\n")
    table = mps_table(df, size)
    if table.empty:
        raise ValueError(f"profile store {store_dir}: no co-located pair was measured (the ξ table would be empty)")
    table.to_csv(folder / XI_FILE, index=False)
    mape = {f"{w}.{g}": {"train": p["mape_train"]["all"], "holdout": p["mape_holdout"]["all"]}
            for w, by_gpu in artifact["workloads"].items() for g, p in by_gpu.items()}
    xi = table[["model_a", "batch_a", "model_b", "batch_b", "mode", "share_a", "share_b", "xi_a", "xi_b"]]
    return {"mape": mape, "xi_pairs": xi.to_dict("records"), "xi_raised_to_1": table.attrs["raised_to_1"],
            "not_fitted": skipped}


# ---- 3. overheads --------------------------------------------------------------------------------
def _first_iteration(proc: JobProcess, timeout_s: float) -> float:
    """Epoch time at which ``proc`` reported its first iteration done."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for sample in proc.samples():
            if sample["event"] == "progress":
                return float(sample["t"])
        code = proc.poll()
        if code is not None:
            raise proc.failure(code)
        time.sleep(0.02)
    proc.kill()
    raise TimeoutError(f"job {proc.job_id}: no iteration within {timeout_s:g} s. {proc.log_tail()}")


def measure_overheads(kinds: Sequence[tuple[str, int, int]], devices: Sequence[Device], folder: Path,
                      iteration_s: Callable[[str, int, int], float], *, size: str, samples: int = 3,
                      run_s: float = 1.0, timeout_s: float = 300.0, env: dict[str, str] | None = None,
                      echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Start-up, stop and restart of the testbed's training process on device 0 (module docstring, step
    3), ``samples`` times over the trace's workloads in turn; then the start-up of each multi-device
    count of the trace (``samples`` times, on its first devices: its ranks meet before their first
    iteration). Medians and every sample."""
    startup, stop, restart = [], [], []
    device = devices[0]
    for k in range(samples):
        workload, batch, _ = kinds[k % len(kinds)]
        spec = _overhead_spec(workload, batch, size, device, k)
        where = folder / f"overhead-{k}"
        t_iter = iteration_s(workload, batch, 1)
        first = JobProcess(f"overhead-{k}", where, 0, spec, [device], env)
        launched = first.launch()
        startup.append(_first_iteration(first, timeout_s) - launched - t_iter)
        time.sleep(run_s)
        asked = time.time()
        first.request_stop()
        code = first.wait()
        result = first.result()
        if code != 0 or result is None or result["status"] != "preempted":
            raise first.failure(code)
        stop.append(time.time() - asked)
        second = JobProcess(f"overhead-{k}", where, 1, spec, [device], env)
        relaunched = second.launch()
        try:
            restart.append(_first_iteration(second, timeout_s) - relaunched - t_iter)
        finally:
            second.kill()
        echo(f"overheads {workload} b{batch}: start-up {startup[-1]:.2f} s, stop {stop[-1]:.2f} s,"
             f" restart {restart[-1]:.2f} s (load {load_average()[0]:.2f})")
    by_devices: dict[int, list[float]] = {}
    for n in sorted({g for _, _, g in kinds if 1 < g <= len(devices)}):
        of_n = [(w, b) for w, b, g in kinds if g == n]
        for k in range(samples):
            workload, batch = of_n[k % len(of_n)]
            job = JobProcess(f"overhead-{n}x-{k}", folder / f"overhead-{n}x-{k}", 0,
                             _overhead_spec(workload, batch, size, device, k), devices[:n], env)
            launched = job.launch()
            try:
                by_devices.setdefault(n, []).append(_first_iteration(job, timeout_s) - launched
                                                    - iteration_s(workload, batch, n))
            finally:
                job.kill()
            echo(f"overheads {workload} b{batch} on {n} devices: start-up {by_devices[n][-1]:.2f} s"
                 f" (load {load_average()[0]:.2f})")
    return {"startup_s": statistics.median(startup), "stop_s": statistics.median(stop),
            "restart_s": statistics.median(restart),
            "startup_by_devices": {n: statistics.median(v) for n, v in by_devices.items()},
            "samples": {"startup_s": startup, "stop_s": stop, "restart_s": restart,
                        "startup_by_devices": {str(n): v for n, v in by_devices.items()}}}


def _overhead_spec(workload: str, batch: int, size: str, device: Device, seed: int) -> dict[str, Any]:
    return {"workload": workload, "batch": batch, "accum": 1, "size": size, "iterations": 10 ** 9,
            "device": device.kind, "threads": device.threads, "progress_s": 0.2, "seed": seed}


def facts(devices: Sequence[Device]) -> dict[str, Any]:
    """The machine a measurement ran on."""
    import torch

    return {"host": socket.gethostname(), "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "devices": [d.label for d in devices], "torch": torch.__version__, "python": platform.python_version(),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
