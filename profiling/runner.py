"""Training-loop runner, one process per job (Castor §7: short profiling runs per
configuration).  ``python -m schedlab.profiling.runner --spec JSON --result FILE``; ``--spec`` may be
a JSON list (a batch of configurations run one after another in one process, see :func:`run_batch`).

Solo: warm-up, then N measured iterations (each = ``accum`` micro-batches + optimizer
step).  Multi-GPU runs are started by ``torchrun`` (``WORLD_SIZE`` > 1) and use DDP.
Pair member (``--barrier DIR``): after warm-up it waits until every member is warm,
measures, then keeps training until every member has finished measuring, so each
measured window lies entirely inside the partner's steady state.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

from . import device as D
from .workloads import get

EXIT_OOM = 3


def write_json(path: str, obj: dict[str, Any]) -> None:
    """Atomic JSON write (temp file + rename)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


class PartnerFailed(RuntimeError):
    """The other member of the pair failed this configuration (or the batch was stopped)."""


class Barrier:
    """File barrier between the two members of a co-located pair, one set of phases per configuration
    ``k`` of a batch: ``ready.k.NAME``, ``done.k.NAME``; ``fail.k.NAME`` marks a member that failed it and
    ``stop`` a member that will start no further configuration."""

    def __init__(self, root: str, name: str, parties: int, timeout_s: float = 600.0) -> None:
        self.root, self.name, self.parties, self.timeout_s = Path(root), name, parties, timeout_s
        self.k = 0

    def arrive(self, phase: str) -> None:
        (self.root / f"{phase}.{self.k}.{self.name}").touch()

    def count(self, phase: str) -> int:
        return len(list(self.root.glob(f"{phase}.{self.k}.*")))

    def fail(self) -> None:
        """Mark this configuration failed here and release the partner from both phases."""
        self.arrive("fail")
        self.arrive("ready")
        self.arrive("done")

    def partner_failed(self) -> bool:
        return any(p.name != f"fail.{self.k}.{self.name}" for p in self.root.glob(f"fail.{self.k}.*"))

    def stop(self) -> None:
        (self.root / "stop").touch()

    def stopped(self) -> bool:
        return (self.root / "stop").exists()

    def wait(self, phase: str) -> None:
        deadline = time.time() + self.timeout_s
        while self.count(phase) < self.parties:
            if self.stopped():
                raise PartnerFailed("the pair's batch was stopped")
            if time.time() > deadline:
                raise TimeoutError(f"barrier {phase!r} timed out")
            time.sleep(0.005)
        if self.partner_failed():
            raise PartnerFailed("partner failed this configuration")


def _agree(flag: bool, dev: torch.device) -> bool:
    """Rank 0's decision, broadcast to all ranks (identity when not distributed)."""
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    t = torch.tensor([1 if flag else 0], device=dev)
    dist.broadcast(t, 0)
    return bool(t.item())


@dataclass
class Trainer:
    """One configuration's training loop, built: ``step()`` is one iteration (``accum`` micro-batches,
    then the optimizer step) of ``model`` on synthetic batches made once on the device."""

    step: Callable[[], None]
    model: torch.nn.Module  # DDP-wrapped when ``world`` > 1
    opt: torch.optim.Optimizer
    dev: torch.device
    kind: str  # cpu | cuda
    world: int
    rank: int

    @property
    def module(self) -> torch.nn.Module:
        """The model itself (unwrapped from DDP): what a checkpoint holds."""
        return self.model.module if self.world > 1 else self.model


def build(spec: dict[str, Any]) -> Trainer:
    """The training loop ``spec`` describes (workload, size, micro-batch ``batch``, ``accum`` steps,
    ``amp``, ``threads``, ``seed``, ``device``), on this process's device; joins the process group when
    ``WORLD_SIZE`` > 1 (torchrun, or the testbed's launcher, set the usual variables)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    kind = D.resolve(spec.get("device", "auto"))
    if kind == "cuda":
        torch.cuda.set_device(local)
    dev = torch.device(kind, local) if kind == "cuda" else torch.device("cpu")
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    if world > 1:
        dist.init_process_group("nccl" if kind == "cuda" else "gloo")
    torch.manual_seed(int(spec.get("seed", 0)))
    w = get(spec["workload"])
    size, b, accum = spec.get("size", "tiny"), int(spec["batch"]), int(spec.get("accum", 1))
    model: torch.nn.Module = w.build(size).to(dev)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if kind == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    g = torch.Generator().manual_seed(int(spec.get("seed", 0)) + rank)
    batches = [w.make_batch(size, b, g, dev) for _ in range(accum)]
    amp = bool(spec.get("amp", False))
    amp_dtype = torch.float16 if kind == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda") if (amp and kind == "cuda") else None

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        for i, batch in enumerate(batches):
            last = i == accum - 1
            ctx = model.no_sync() if (world > 1 and not last) else contextlib.nullcontext()
            with ctx, torch.autocast(kind, dtype=amp_dtype, enabled=amp):
                loss = w.loss(model, batch) / accum
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()

    return Trainer(step, model, opt, dev, kind, world, rank)


def run(spec: dict[str, Any], barrier: Optional[Barrier] = None) -> dict[str, Any]:
    """Execute the training loop described by ``spec`` and return the result dict."""
    t = build(spec)
    step, dev, kind, world, rank = t.step, t.dev, t.kind, t.world, t.rank
    b, accum = int(spec["batch"]), int(spec.get("accum", 1))
    for _ in range(int(spec.get("warmup", 3))):
        step()
    D.sync(dev)
    if barrier and rank == 0:
        barrier.arrive("ready")
        barrier.wait("ready")
    if world > 1:
        dist.barrier()
    D.reset_peak(dev)
    timer = D.IterTimer(dev)
    t_start = time.time()
    n_min, s_min, i = int(spec.get("iters", 10)), float(spec.get("min_seconds", 0.0)), 0
    while _agree(i < n_min or time.time() - t_start < s_min, dev):  # Castor's T_prof lower bound
        timer.start()
        step()
        timer.stop()
        i += 1
    D.sync(dev)
    t_end = time.time()
    times = timer.times_s()
    tail = 0
    if barrier:
        if rank == 0:
            barrier.arrive("done")
        while _agree(rank == 0 and barrier.count("done") < barrier.parties and not barrier.partner_failed()
                     and not barrier.stopped(), dev):
            step()
            tail += 1
        if rank == 0 and (barrier.partner_failed() or barrier.count("done") < barrier.parties):
            raise PartnerFailed("partner failed or stopped during the measured window")
    peak, mem_src = D.peak_memory(dev)
    mean = sum(times) / len(times)
    res = {"status": "ok", "iter_times_s": times, "window_start": t_start, "window_end": t_end,
           "peak_mem_bytes": peak, "mem_source": mem_src, "world_size": world, "tail_iters": tail,
           "throughput": b * accum * world / mean, "device": kind, "cores": sorted(os.sched_getaffinity(0)),
           **D.env_info(dev)}
    if world > 1:
        dist.destroy_process_group()
    return res


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _release(dev_kind: str) -> None:
    """Free what a finished or failed configuration left on the device before the next one."""
    gc.collect()
    if dev_kind == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _healthy(dev_kind: str) -> bool:
    """False when the CUDA context is unusable after an error (then the batch stops here)."""
    if dev_kind != "cuda":
        return True
    try:
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def run_batch(specs: list[dict[str, Any]], result: str, barrier: Optional[Barrier] = None,
              stop_at: Optional[float] = None, runner: Callable[..., dict[str, Any]] = run) -> int:
    """Run ``specs`` one after another in this process (one interpreter start, one CUDA context for the
    batch).  After each configuration rank 0 rewrites ``result`` atomically as
    ``{"results": [...], "current": k, "started": t}``, so a killed batch keeps what it finished and
    the sweep sees how long the current one has run.  No configuration starts after ``stop_at``
    (epoch s).  An out-of-memory or a Python error is that configuration's record and the batch goes
    on; a broken CUDA context ends the batch (the rest stay unmeasured)."""
    rank = int(os.environ.get("RANK", "0"))
    results: list[dict[str, Any]] = []
    code = 0
    for k, spec in enumerate(specs):
        if stop_at is not None and time.time() >= stop_at:
            if barrier:
                barrier.stop()
            break
        if rank == 0:
            write_json(result, {"results": results, "current": k, "started": time.time()})
        if barrier:
            barrier.k = k
        started = time.time()
        try:
            res = runner(spec, barrier)
        except PartnerFailed as exc:
            if barrier and barrier.stopped():
                break
            res = {"status": "error", "message": f"PartnerFailed: {exc}"}
        except BaseException as exc:  # recorded, then re-signalled through the exit code
            if isinstance(exc, KeyboardInterrupt):
                raise
            oom = _is_oom(exc)
            res = {"status": "oom" if oom else "error", "message": f"{type(exc).__name__}: {exc}"[:2000]}
            traceback.print_exc(file=sys.stderr)
            if barrier:
                barrier.fail()
            code = code or (EXIT_OOM if oom else 1)
            del exc
        res["wall_s"] = time.time() - started  # this configuration: model build, warm-up, window, tail
        results.append(res)
        kind = "cuda" if torch.cuda.is_available() and spec.get("device", "auto") != "cpu" else "cpu"
        _release(kind)
        if res["status"] == "error" and not _healthy(kind):
            if barrier:
                barrier.stop()
            break
    if rank == 0:
        write_json(result, {"results": results, "current": None, "started": None})
    return code


def main(argv: Optional[list[str]] = None, runner: Callable[..., dict[str, Any]] = run) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spec", required=True, help="JSON job spec, or a JSON list of them (a batch)")
    ap.add_argument("--result", required=True, help="where rank 0 writes the JSON results")
    ap.add_argument("--barrier", help="pair barrier directory")
    ap.add_argument("--name", default="a")
    ap.add_argument("--parties", type=int, default=2)
    ap.add_argument("--stop-at", type=float, default=None, help="start no configuration after this epoch time")
    a = ap.parse_args(argv)
    specs = json.loads(a.spec)
    specs = specs if isinstance(specs, list) else [specs]
    timeout = float(specs[0].get("barrier_timeout_s", 600)) if specs else 600.0
    bar = Barrier(a.barrier, a.name, a.parties, timeout) if a.barrier else None
    return run_batch(specs, a.result, bar, a.stop_at, runner)


if __name__ == "__main__":
    sys.exit(main())
