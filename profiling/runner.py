"""Training-loop runner, one process per job (Castor §7: short profiling runs per
configuration).  ``python -m schedlab.profiling.runner --spec JSON --result FILE``.

Solo: warm-up, then N measured iterations (each = ``accum`` micro-batches + optimizer
step).  Multi-GPU runs are started by ``torchrun`` (``WORLD_SIZE`` > 1) and use DDP.
Pair member (``--barrier DIR``): after warm-up it waits until every member is warm,
measures, then keeps training until every member has finished measuring, so each
measured window lies entirely inside the partner's steady state.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
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


class Barrier:
    """File barrier between the members of a co-located pair."""

    def __init__(self, root: str, name: str, parties: int, timeout_s: float = 600.0) -> None:
        self.root, self.name, self.parties, self.timeout_s = Path(root), name, parties, timeout_s

    def arrive(self, phase: str) -> None:
        (self.root / f"{phase}.{self.name}").touch()

    def count(self, phase: str) -> int:
        return len(list(self.root.glob(f"{phase}.*")))

    def aborted(self) -> bool:
        return (self.root / "abort").exists()

    def wait(self, phase: str) -> None:
        deadline = time.time() + self.timeout_s
        while self.count(phase) < self.parties:
            if self.aborted():
                raise RuntimeError("pair aborted: partner failed")
            if time.time() > deadline:
                raise TimeoutError(f"barrier {phase!r} timed out")
            time.sleep(0.005)


def _agree(flag: bool, dev: torch.device) -> bool:
    """Rank 0's decision, broadcast to all ranks (identity when not distributed)."""
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    t = torch.tensor([1 if flag else 0], device=dev)
    dist.broadcast(t, 0)
    return bool(t.item())


def run(spec: dict[str, Any], barrier: Optional[Barrier] = None) -> dict[str, Any]:
    """Execute the training loop described by ``spec`` and return the result dict."""
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
        while _agree(rank == 0 and barrier.count("done") < barrier.parties and not barrier.aborted(), dev):
            step()
            tail += 1
    peak, mem_src = D.peak_memory(dev)
    mean = sum(times) / len(times)
    res = {"status": "ok", "iter_times_s": times, "window_start": t_start, "window_end": t_end,
           "peak_mem_bytes": peak, "mem_source": mem_src, "world_size": world, "tail_iters": tail,
           "throughput": b * accum * world / mean, "device": kind, **D.env_info(dev)}
    if world > 1:
        dist.destroy_process_group()
    return res


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def main(argv: Optional[list[str]] = None, runner: Callable[..., dict[str, Any]] = run) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spec", required=True, help="JSON job spec")
    ap.add_argument("--result", required=True, help="where rank 0 writes the JSON result")
    ap.add_argument("--barrier", help="pair barrier directory")
    ap.add_argument("--name", default="a")
    ap.add_argument("--parties", type=int, default=2)
    a = ap.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    spec = json.loads(a.spec)
    bar = Barrier(a.barrier, a.name, a.parties, float(spec.get("barrier_timeout_s", 600))) if a.barrier else None
    try:
        res = runner(spec, bar)
        code = 0
    except BaseException as exc:  # recorded, then re-signalled through the exit code
        oom = _is_oom(exc)
        res = {"status": "oom" if oom else "error", "message": f"{type(exc).__name__}: {exc}"[:2000]}
        traceback.print_exc(file=sys.stderr)
        if bar:
            (Path(a.barrier) / "abort").touch()
        code = EXIT_OOM if oom else 1
    if rank == 0:
        write_json(a.result, res)
    return code


if __name__ == "__main__":
    sys.exit(main())
