"""Where a testbed run and its model part: the systematic errors a run shows, measured from its own
job table and activity log against the node's models (Lyra §7.2 locates each gap the same way: a
modelling choice, an implementation detail, or noise). A pure function of those three; written into
``comparison.json`` as ``error_sources``.

- ``startup``: each first start's launch to its first iteration's end, less one modelled iteration,
  against the modelled stall (``node.startup_s``, or the start-up measured for its device count), and
  apart by kind: ``alone`` (one device, no partner), ``multi_device`` and ``beside_a_job`` (a device
  already running another job: on CPU devices the start-up competes with it for the same cores; the
  error is over a start alone's stall, which the CPU testbed's replay multiplies by the job's ξ,
  ``stall_at_shared_pace``); ``restart`` the same for later starts
  (``node.restart_s``); ``build`` is the part before the model was built (interpreter, imports,
  model), ``first_iteration_extra`` the first iteration's time beyond a modelled one (warm-up);
- ``speed``: seconds per iteration measured after the first iteration over the model's (the job
  table's ``duration / iterations``), for jobs that never shared (``exclusive``: load and fit error; and
  apart, ``exclusive_multi_device``: the DDP jobs on several devices, the most sensitive to other load,
  since a rank held up by any other process holds its partners at the next all-reduce) and for those
  that did (``shared_over_xi``: the ξ the model charged, ``avg_xi``, included);
- ``decision_lag``: from a job's end (as its process reported it) to the next start the policy made
  within 2 s of it (the loop's poll and the pass);
- ``launch_delay``: from a start decision to its processes being launched (earlier actions of the same
  pass: a preemption waits for its processes to stop);
- ``stop``: from a preemption to the stopped processes' checkpoint saved.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from schedlab.profiling.testbed.activity import ActivityLog


def _stats(values: Iterable[float]) -> dict[str, Any]:
    v = np.array([x for x in values if x is not None and math.isfinite(x)], float)
    if not len(v):
        return {"n": 0}
    return {"n": int(len(v)), "median": float(np.median(v)), "mean": float(v.mean()),
            "p10": float(np.percentile(v, 10)), "p90": float(np.percentile(v, 90)), "max": float(v.max())}


def error_sources(jobs: pd.DataFrame, log: ActivityLog, startup_s: float, restart_s: float,
                  startup_for: Callable[[int], float] | None = None) -> dict[str, Any]:
    """The module docstring's figures for one real run (``jobs``: its job table; ``log``: its activity;
    ``startup_for``: the start-up modelled on n devices, default ``startup_s`` for any n)."""
    modelled_for = startup_for or (lambda _n: startup_s)
    per_iteration: dict[str, float] = {}
    samples: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in log.of("progress"):
        samples.setdefault((r["job"], r["attempt"]), []).append(r)
        per_iteration.setdefault(r["job"], math.nan)
    table = jobs.set_index("job_id")
    for job in per_iteration:
        iterations = next(r["iterations"] for (j, _), rs in samples.items() if j == job for r in rs)
        per_iteration[job] = float(table.loc[job, "duration"]) / iterations
    first, later, build, extra = [], [], [], []
    kinds: dict[str, list[tuple[float, float]]] = {"alone": [], "multi_device": [], "beside_a_job": []}
    for start in log.of("start"):
        rs = samples.get((start["job"], start["attempt"]), [])
        ready = next((r for r in rs if r.get("ready")), None)
        done = next((r for r in rs if not r.get("ready")), None)
        if ready is None or done is None or "launched" not in start:
            continue
        t_iter = per_iteration[start["job"]]
        took = done["t"] - start["launched"] - t_iter
        if start["attempt"] == 0:
            n = len(start["gpus"])
            modelled = modelled_for(n)
            first.append((took, modelled))
            kind = "beside_a_job" if start.get("partners") else "multi_device" if n > 1 else "alone"
            kinds[kind].append((took, modelled))
        else:
            later.append(took)
        build.append(ready["t"] - start["launched"])
        extra.append(done["t"] - ready["t"] - t_iter * (done["done"] - ready["done"]))
    exclusive, multi, shared = [], [], []
    for (job, _), rs in samples.items():
        moving = [r for r in rs if not r.get("ready")]
        if len(moving) < 2 or moving[-1]["done"] == moving[0]["done"]:
            continue
        measured = (moving[-1]["t"] - moving[0]["t"]) / (moving[-1]["done"] - moving[0]["done"])
        ratio = measured / per_iteration[job]
        if table.loc[job, "shared_s"] > 0:
            shared.append(ratio / float(table.loc[job, "avg_xi"]))
        else:
            (multi if int(table.loc[job, "num_gpus"]) > 1 else exclusive).append(ratio)
    ends = sorted(float(r.get("exited", r["t"])) for r in log.of("end"))
    lags = []
    for start in log.of("start"):
        before = [e for e in ends if e <= start["t"]]
        if before and start["t"] - before[-1] <= 2.0:
            lags.append(start["t"] - before[-1])
    return {
        "startup": {"modelled_s": startup_s, "measured_s": _stats(x for x, _ in first), "error_s": _stats(x - m for x, m in first),
                    "by_kind": {kind: {"measured_s": _stats(x for x, _ in pairs), "error_s": _stats(x - m for x, m in pairs)}
                                for kind, pairs in kinds.items()}},
        "restart": {"modelled_s": restart_s, "measured_s": _stats(later), "error_s": _stats(x - restart_s for x in later)},
        "build_s": _stats(build),
        "first_iteration_extra_s": _stats(extra),
        "speed": {"exclusive": _stats(exclusive), "exclusive_multi_device": _stats(multi),
                  "shared_over_xi": _stats(shared)},
        "decision_lag_s": _stats(lags),
        "launch_delay_s": _stats(s["launched"] - s["t"] for s in log.of("start") if "launched" in s),
        "stop_s": _stats(p["stopped"] - p["t"] for p in log.of("preempt") if "stopped" in p),
    }
