"""The simulator's error against the testbed: a pure function of the two job tables (the replay's
``jobs.parquet`` columns) and the two activity logs (``activity.py``), nothing else.

Errors are relative to the real run, ``(replay - real) / real`` (Castor §9.3 and SJF-BSBF report the
simulator "within 5 %" of the testbed on average JCT and makespan; Lyra §7.2 on average and 95th-
percentile JCT). Per job: ``|replay JCT - real JCT| / real JCT``, its median, 90th percentile and the
worst job. Lyra's calibration test (§7.2): the first scheduling decision that differs (which job
started or stopped, on which GPUs, beside whom, with how many accumulation steps), and the first
activity (a start, a preemption or an end, matched job by job and occurrence by occurrence) more
than ``tolerance_s`` (2 s) apart.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from schedlab.profiling.testbed.activity import ActivityLog, completeness

TOLERANCE_S = 2.0  # Lyra §7.2: no activity more than 2 s apart
#: what a decision is compared on (``activity.start_fields``)
DECISION_FIELDS = ("event", "job", "gpus", "partners", "accumulation_steps", "mode", "shares")


def run_figures(jobs: pd.DataFrame) -> dict[str, Any]:
    """Average, 95th-percentile JCT and makespan of a run's job table (finished jobs only)."""
    done = jobs[jobs["end_time"].notna()]
    jct = done["jct_s"].to_numpy(float)
    return {
        "jobs": int(len(jobs)), "finished": int(len(done)),
        "avg_jct_s": float(jct.mean()) if len(jct) else math.nan,
        "p95_jct_s": float(np.percentile(jct, 95)) if len(jct) else math.nan,
        "makespan_s": float(done["end_time"].max() - jobs["submit_time"].min()) if len(done) else math.nan,
        "avg_queue_s": float(done["queue_s"].mean()) if len(done) else math.nan,
    }


def _relative(replay: float, real: float) -> float:
    return (replay - real) / real if real and math.isfinite(real) and math.isfinite(replay) else math.nan


def _decision(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record.get(k) for k in DECISION_FIELDS}


def first_decision_difference(real: ActivityLog, replay: ActivityLog) -> dict[str, Any] | None:
    """The first decision (in the order taken) that differs, both sides' versions and what differs."""
    a, b = real.decisions(), replay.decisions()
    for i in range(max(len(a), len(b))):
        x = _decision(a[i]) if i < len(a) else None
        y = _decision(b[i]) if i < len(b) else None
        if x != y:
            fields = [k for k in DECISION_FIELDS if (x or {}).get(k) != (y or {}).get(k)]
            return {"index": i, "real": a[i] if x else None, "replay": b[i] if y else None, "differs_in": fields}
    return None


def _occurrences(log: ActivityLog) -> dict[tuple[str, str, int], float]:
    """``(job, event, n)`` -> time of the job's n-th event of that kind (start, preempt, end)."""
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for r in log.of("start", "preempt", "end"):
        key = (r["job"], r["event"])
        n = seen.get(key, 0)
        seen[key] = n + 1
        out[(r["job"], r["event"], n)] = float(r["t"])
    return out


def first_activity_apart(real: ActivityLog, replay: ActivityLog, tolerance_s: float = TOLERANCE_S) -> dict[str, Any] | None:
    """The earliest real activity whose replay counterpart is more than ``tolerance_s`` away (or absent)."""
    a, b = _occurrences(real), _occurrences(replay)
    for (job, event, n), t in sorted(a.items(), key=lambda kv: (kv[1], kv[0])):
        other = b.get((job, event, n))
        if other is None or abs(other - t) > tolerance_s:
            return {"job": job, "event": event, "occurrence": n, "real_t": t, "replay_t": other,
                    "apart_s": None if other is None else other - t}
    missing = sorted(set(b) - set(a), key=lambda k: b[k])
    if missing:
        job, event, n = missing[0]
        return {"job": job, "event": event, "occurrence": n, "real_t": None, "replay_t": b[missing[0]],
                "apart_s": None}
    return None


def per_job_errors(real: pd.DataFrame, replay: pd.DataFrame) -> pd.DataFrame:
    """``job_id, real_jct_s, replay_jct_s, error`` (relative, signed) of the jobs finished in both runs."""
    both = real[["job_id", "jct_s"]].merge(replay[["job_id", "jct_s"]], on="job_id", suffixes=("_real", "_replay"))
    both = both.dropna()
    return pd.DataFrame({"job_id": both["job_id"], "real_jct_s": both["jct_s_real"],
                         "replay_jct_s": both["jct_s_replay"],
                         "error": (both["jct_s_replay"] - both["jct_s_real"]) / both["jct_s_real"]})


def compare(real_jobs: pd.DataFrame, real_log: ActivityLog, replay_jobs: pd.DataFrame, replay_log: ActivityLog,
            tolerance_s: float = TOLERANCE_S) -> dict[str, Any]:
    """The comparison (module docstring) as plain data: ``comparison.json``."""
    real, replay = run_figures(real_jobs), run_figures(replay_jobs)
    errors = per_job_errors(real_jobs, replay_jobs)
    size = errors["error"].abs().to_numpy(float)
    worst = errors.iloc[int(np.argmax(size))] if len(size) else None
    ids = list(real_jobs["job_id"].astype(str))
    return {
        "real": real,
        "replay": replay,
        "relative_error": {name: _relative(replay[f"{name}_s"], real[f"{name}_s"])
                           for name in ("avg_jct", "makespan", "p95_jct", "avg_queue")},
        "per_job_jct_error": {
            "jobs": int(len(size)),
            "median": float(np.median(size)) if len(size) else math.nan,
            "p90": float(np.percentile(size, 90)) if len(size) else math.nan,
            "max": float(size.max()) if len(size) else math.nan,
            "mean_signed": float(errors["error"].mean()) if len(size) else math.nan,
            "worst_job": None if worst is None else {
                "job_id": str(worst["job_id"]), "real_jct_s": float(worst["real_jct_s"]),
                "replay_jct_s": float(worst["replay_jct_s"]), "error": float(worst["error"])},
        },
        "decisions": {"real": len(real_log.decisions()), "replay": len(replay_log.decisions()),
                      "first_difference": first_decision_difference(real_log, replay_log)},
        "first_activity_apart": first_activity_apart(real_log, replay_log, tolerance_s),
        "tolerance_s": tolerance_s,
        "activity_problems": {"real": completeness(real_log, ids), "replay": completeness(replay_log, ids)},
    }


def render(policy: str, comparison: dict[str, Any]) -> str:
    """The comparison as terminal lines."""
    real, replay, rel = comparison["real"], comparison["replay"], comparison["relative_error"]
    pj = comparison["per_job_jct_error"]
    lines = [f"{policy}: {real['finished']}/{real['jobs']} jobs finished on the testbed, "
             f"{replay['finished']}/{replay['jobs']} in the replay",
             f"  {'':14s} {'testbed':>10s} {'replay':>10s} {'error':>8s}"]
    for name in ("avg_jct", "p95_jct", "makespan", "avg_queue"):
        lines.append(f"  {name + ' (s)':14s} {real[name + '_s']:10.2f} {replay[name + '_s']:10.2f} {rel[name]:+8.1%}")
    lines.append(f"  per-job JCT error: median {pj['median']:.1%}, p90 {pj['p90']:.1%}, worst {pj['max']:.1%}"
                 + (f" (job {pj['worst_job']['job_id']})" if pj["worst_job"] else ""))
    d = comparison["decisions"]
    diff = d["first_difference"]
    lines.append(f"  decisions: {d['real']} testbed, {d['replay']} replay; "
                 + ("identical" if diff is None else f"first difference at decision {diff['index']}"
                    f" ({', '.join(diff['differs_in'])}: testbed {_brief(diff['real'])}, replay {_brief(diff['replay'])})"))
    apart = comparison["first_activity_apart"]
    lines.append(f"  activities: " + (f"all within {comparison['tolerance_s']:g} s" if apart is None else
                 f"first more than {comparison['tolerance_s']:g} s apart: job {apart['job']} {apart['event']}"
                 f" #{apart['occurrence']} (testbed {_t(apart['real_t'])}, replay {_t(apart['replay_t'])})"))
    sources = comparison.get("error_sources")
    if sources:
        start = sources["startup"]
        if start["measured_s"]["n"]:
            lines.append(f"  start-up: measured median {start['measured_s']['median']:.2f} s (p90"
                         f" {start['measured_s']['p90']:.2f}), modelled {start['modelled_s']:.2f} s")
        labels = {"alone": "alone", "multi_device": "on several devices",
                  "beside_a_job": "beside a running job (over a start alone; a CPU replay charges it xi times)"}
        kinds = [f"{labels[k]} {v['error_s']['median']:+.2f} s ({v['error_s']['n']})"
                 for k, v in start.get("by_kind", {}).items() if v["error_s"]["n"]]
        if kinds:
            lines.append(f"  start-up over the model's, median by kind: {', '.join(kinds)}")
        for key, what in (("exclusive", "unshared one-device jobs"), ("exclusive_multi_device", "unshared multi-device jobs")):
            speed = sources["speed"].get(key, {"n": 0})
            if speed["n"]:
                lines.append(f"  speed: iterations of {what} took {speed['median']:.2f}x the model's (median;"
                             f" p10-p90 {speed['p10']:.2f}-{speed['p90']:.2f}, max {speed['max']:.2f}; {speed['n']} jobs)")
    for side in ("real", "replay"):
        problems = comparison["activity_problems"][side]
        if problems:
            lines.append(f"  {side} activity log incomplete: {'; '.join(problems[:3])}"
                         + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""))
    return "\n".join(lines)


def _brief(record: dict[str, Any] | None) -> str:
    if record is None:
        return "none"
    extra = f" beside {','.join(record['partners'])}" if record.get("partners") else ""
    steps = f" x{record['accumulation_steps']}" if (record.get("accumulation_steps") or 1) > 1 else ""
    return f"{record['event']} {record['job']} on {record.get('gpus')}{extra}{steps} at {record['t']:.1f} s"


def _t(value: float | None) -> str:
    return "none" if value is None else f"{value:.1f} s"
