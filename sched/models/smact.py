"""SM activity across the cluster's GPUs (Castor §9.2 "GPU Utilization", Fig. 9c/d and 12c/d).

Castor plots, per policy, the distribution of DCGM's SMACT (``DCGM_FI_PROF_SM_ACTIVE``) over all
GPUs of the cluster and the whole run: idle GPUs count as 0 % activated SMs, a GPU running one job
has that job's profiled solo SMACT, a GPU holding a co-located pair the pair's profiled SMACT. The
replay knows who held which GPU when (``Engine(record_occupancy=True)``); the SMACT figures come
from the profile store (:func:`schedlab.profiling.smact.smact_profile`).

Simplifications: a job's SMACT is that of the profiled configuration of the same workload nearest in
micro-batch (log scale) and GPU count; a pair's is that of the nearest profiled pair of the same two
workloads, whatever its sharing mode; restore stalls after a preemption count as running.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

#: share of GPU-time above this SMACT is Castor's "high-level activation" (§9.4, Fig. 12)
HIGH_SMACT = 0.5

Solo = tuple[float, int, float]  # (micro-batch, GPUs, SMACT)
Pair = tuple[float, float, float]  # (batch of the first workload, batch of the second, SMACT)


@dataclass(frozen=True)
class SmactProfile:
    """Profiled SMACT per workload (solo) and per unordered workload pair, for one GPU type."""

    solo: dict[str, list[Solo]]
    pairs: dict[tuple[str, str], list[Pair]]
    source: str = ""
    gpu_type: str = ""
    notes: list[str] = field(default_factory=list)

    def solo_value(self, workload: str | None, micro_batch: float, gpus: int) -> float | None:
        """SMACT of ``workload`` alone at the nearest profiled micro-batch and GPU count; None if unprofiled."""
        rows = self.solo.get(workload) if workload is not None else None
        if not rows:
            return None
        return min(rows, key=lambda r: (_log_gap(r[0], micro_batch), abs(r[1] - gpus)))[2]

    def pair_value(self, a: tuple[str | None, float], b: tuple[str | None, float]) -> float | None:
        """SMACT of a GPU holding workloads ``a`` and ``b`` (``(workload, micro-batch)``); None if unprofiled."""
        if a[0] is None or b[0] is None:
            return None
        if (a[0], b[0]) != tuple(sorted((a[0], b[0]))):
            a, b = b, a
        rows = self.pairs.get((a[0], b[0]))
        if not rows:
            return None
        if a[0] == b[0]:  # either member may be either job
            rows = rows + [(rb, ra, v) for ra, rb, v in rows]
        return min(rows, key=lambda r: _log_gap(r[0], a[1]) + _log_gap(r[1], b[1]))[2]


def _log_gap(x: float, y: float) -> float:
    if not (x > 0 and y > 0):
        return 0.0 if x == y or (math.isnan(x) and math.isnan(y)) else math.inf
    return abs(math.log2(x / y))


@dataclass
class SmactResult:
    """The time-weighted SMACT distribution, or why it is absent (``missing``)."""

    distribution: pd.DataFrame  # smact, gpu_s (GPU-seconds at that value), ascending
    missing: dict[str, float] = field(default_factory=dict)  # uncovered workload or pair -> GPU-seconds

    @property
    def complete(self) -> bool:
        return not self.missing

    def metrics(self) -> dict[str, float]:
        """``smact_mean`` (over all GPU-time, idle = 0), ``smact_p50``, ``smact_busy_mean`` (over busy
        GPU-time), ``smact_zero_share`` (GPU-time at 0, Castor §9.3) and ``smact_high_share`` (above 0.5)."""
        d = self.distribution
        values, weights = d["smact"].to_numpy(), d["gpu_s"].to_numpy()
        total = weights.sum()
        if total <= 0:
            return {}
        busy = values > 0
        cum = np.cumsum(weights) / total
        return {
            "smact_mean": float((values * weights).sum() / total),
            "smact_p50": float(values[min(int(np.searchsorted(cum, 0.5)), len(values) - 1)]),
            "smact_busy_mean": float((values[busy] * weights[busy]).sum() / weights[busy].sum()) if busy.any() else 0.0,
            "smact_zero_share": float(weights[values == 0].sum() / total),
            "smact_high_share": float(weights[values > HIGH_SMACT].sum() / total),
        }


def smact_distribution(occupancy: list[tuple[Any, float, float, tuple[int, ...], int]], total_gpus: int,
                       start: float, end: float, profile: SmactProfile) -> SmactResult:
    """Sweep every GPU's holders over ``[start, end]`` (the replay's makespan) and weigh each SMACT
    value by the GPU-seconds it held; GPUs with no job count as 0. ``occupancy`` is the engine's
    ``(job, from, to, GPUs, accumulation steps)`` stints."""
    per_gpu: dict[int, list[tuple[float, int, tuple[str | None, float], int]]] = {}
    for job, t0, t1, gpus, steps in occupancy:
        key = (job.model, job.batch_size / max(steps, 1))
        for g in gpus:
            events = per_gpu.setdefault(g, [])
            events.append((t0, 1, key, len(gpus)))
            events.append((t1, -1, key, len(gpus)))
    weights: dict[float, float] = {}
    missing: dict[str, float] = {}
    busy_s = 0.0
    for events in per_gpu.values():
        events.sort(key=lambda e: (e[0], e[1]))  # at one instant, leaving before joining
        held: list[tuple[tuple[str | None, float], int]] = []
        last = start
        for t, delta, key, n in events:
            if held and t > last:
                span = t - last
                busy_s += span
                value, name = _value(profile, held)
                if value is None:
                    missing[name] = missing.get(name, 0.0) + span
                else:
                    value = round(value, 9)  # one entry per SMACT level (profiled values carry 6 decimals)
                    weights[value] = weights.get(value, 0.0) + span
            last = t
            if delta > 0:
                held.append((key, n))
            else:
                held.remove((key, n))
    idle = max(0.0, total_gpus * (end - start) - busy_s)
    weights[0.0] = weights.get(0.0, 0.0) + idle
    items = sorted(weights.items())
    dist = pd.DataFrame({"smact": [v for v, _ in items], "gpu_s": [w for _, w in items]})
    return SmactResult(distribution=dist, missing=missing)


def _value(profile: SmactProfile, held: list[tuple[tuple[str | None, float], int]]) -> tuple[float | None, str]:
    if len(held) == 1:
        (workload, batch), gpus = held[0]
        return profile.solo_value(workload, batch, gpus), f"{workload or 'no workload'} (solo)"
    (a, _), (b, _) = held[0], held[1]
    names = " + ".join(sorted(str(w[0] or "no workload") for w in (a, b)))
    return profile.pair_value(a, b), f"{names} (pair)"


def replay_smact(result: Any, profile: SmactProfile) -> tuple[dict[str, float], pd.DataFrame | None, dict[str, Any]]:
    """(summary metrics, distribution, load-report notes) of an engine result recorded with
    ``record_occupancy``. When some busy GPU-time has no profile the metrics are absent (never 0) and
    the notes say which workloads or pairs lack SMACT."""
    smact = smact_distribution(result.occupancy or [], result.total_gpus, result.first_submit, result.last_end, profile)
    notes: dict[str, Any] = {"smact_profiles": profile.source, "smact_gpu_type": profile.gpu_type}
    if profile.notes:
        notes["smact_profile_notes"] = list(profile.notes)
    if not smact.complete:
        notes["smact_missing"] = {k: round(v, 3) for k, v in sorted(smact.missing.items())}
        notes["smact_note"] = ("SM-activity metrics absent: no profile gives SMACT for "
                               + ", ".join(sorted(smact.missing)))
        return {}, None, notes
    return smact.metrics(), smact.distribution, notes


__all__ = ["HIGH_SMACT", "SmactProfile", "SmactResult", "replay_smact", "smact_distribution"]
