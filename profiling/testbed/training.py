"""One testbed job's training process: ``python -m schedlab.profiling.testbed.training --spec JSON --dir DIR
[--attempt N]`` (one process per device; the launcher, ``process.py``, sets ``RANK``/``WORLD_SIZE``).

It builds the profiler's training loop (``profiling/runner.py``'s :func:`~schedlab.profiling.runner.build`:
the same workload, micro-batch, accumulation steps and device handling the profile measured), resumes
from ``DIR/ckpt.pt`` when there is one, and runs until the job's ``iterations`` are done. Rank 0 reports:

- ``DIR/progress-N.jsonl``: one line ``{"t", "done", "event"}`` (epoch seconds, iterations done) when the
  model is built (``ready``, with the cores it may run on and its torch threads), after the first
  iteration, then at most every ``progress_s``, and at the end;
- ``DIR/result-N.json``: ``{"status": "done"|"preempted", "done", "t_end"}`` as it exits.

Preemption (Tiresias, SRTF): the engine creates ``DIR/stop-N``; at the next iteration boundary (all ranks
agree, as the profiler's runner does) rank 0 saves the model, the optimizer state and the iterations
done to ``DIR/ckpt.pt`` (a temporary file renamed) and every rank exits; the restart resumes from it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _append(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def train(spec: dict[str, Any], folder: Path, attempt: int) -> dict[str, Any]:
    """Run the job (or what is left of it) and return rank 0's result."""
    import torch

    from schedlab.profiling import device as D
    from schedlab.profiling.runner import _agree, build, write_json

    t = build(spec)
    total = int(spec["iterations"])
    progress_s = float(spec.get("progress_s", 0.5))
    ckpt, stop = folder / "ckpt.pt", folder / f"stop-{attempt}"
    progress = folder / f"progress-{attempt}.jsonl"
    done = 0
    if ckpt.exists():
        state = torch.load(ckpt, map_location=t.dev, weights_only=True)
        t.module.load_state_dict(state["model"])
        t.opt.load_state_dict(state["opt"])
        done = int(state["done"])
    lead = t.rank == 0
    if lead:  # what it runs on, for the activity log and the tests: the cores it may use, its threads
        _append(progress, {"t": time.time(), "done": done, "event": "ready", "cores": sorted(os.sched_getaffinity(0)),
                           "threads": torch.get_num_threads()})
    first, last = done, 0.0
    status = "done"
    if done < total and _agree(lead and stop.exists(), t.dev):  # stopped while it was starting
        status = "preempted"
    while done < total and status == "done":
        t.step()
        done += 1
        if lead and (done == first + 1 or time.time() - last >= progress_s):
            D.sync(t.dev)
            last = time.time()
            _append(progress, {"t": last, "done": done, "event": "progress"})
        if done < total and _agree(lead and stop.exists(), t.dev):
            status = "preempted"
            break
    D.sync(t.dev)
    result = {"status": status, "done": done, "t_end": time.time()}
    if lead:
        if status == "preempted":
            tmp = folder / f".ckpt.{os.getpid()}.tmp"
            torch.save({"model": t.module.state_dict(), "opt": t.opt.state_dict(), "done": done}, tmp)
            os.replace(tmp, ckpt)
            result["t_end"] = time.time()  # the checkpoint is part of the stop
        _append(progress, {"t": result["t_end"], "done": done, "event": status})
        write_json(str(folder / f"result-{attempt}.json"), result)
    if t.world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spec", required=True, help="JSON: workload, size, batch (micro-batch), accum, iterations, "
                    "device, threads, seed, progress_s")
    ap.add_argument("--dir", required=True, type=Path, help="the job's folder (progress, result, checkpoint)")
    ap.add_argument("--attempt", type=int, default=0, help="which start of the job this is (0: the first)")
    args = ap.parse_args(argv)
    train(json.loads(args.spec), args.dir, args.attempt)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the result is written: no interpreter teardown (seconds on a busy machine) holds the device


if __name__ == "__main__":
    main()
