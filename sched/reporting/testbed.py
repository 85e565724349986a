"""The testbed's comparison as a page (``comparison.html`` beside a policy's run) and as MLflow metrics:
pure functions of ``comparison.json`` (``profiling/testbed/compare.py``) and the two per-job tables."""

from __future__ import annotations

import html
import math
from typing import Any

import pandas as pd

from schedlab.sched.reporting.comparison_html import plain_page, plain_table

HEADLINE = ("avg_jct", "p95_jct", "makespan", "avg_queue")


def metrics(comparison: dict[str, Any]) -> dict[str, float]:
    """The comparison's numbers as MLflow metrics: ``testbed.<x>_s``, ``replay.<x>_s``, ``error.<x>``
    (relative, signed: replay over testbed minus 1), ``per_job_error.{median,p90,max,mean_signed}``,
    ``decisions_identical`` (1/0) and ``activities_within_tolerance`` (1/0)."""
    out: dict[str, float] = {}
    for side in ("real", "replay"):
        prefix = "testbed" if side == "real" else "replay"
        for name, value in comparison[side].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"{prefix}.{name}"] = float(value)
    out |= {f"error.{k}": float(v) for k, v in comparison["relative_error"].items()}
    pj = comparison["per_job_jct_error"]
    out |= {f"per_job_error.{k}": float(pj[k]) for k in ("median", "p90", "max", "mean_signed")}
    out["decisions_identical"] = float(comparison["decisions"]["first_difference"] is None)
    out["activities_within_tolerance"] = float(comparison["first_activity_apart"] is None)
    return {k: v for k, v in out.items() if math.isfinite(v)}


def page(policy: str, comparison: dict[str, Any], real_jobs: pd.DataFrame, replay_jobs: pd.DataFrame) -> str:
    """``comparison.html``: the headline figures of the real run and the replay with their relative errors,
    the per-job errors, the first decision that differs and the first activity more than the tolerance
    apart (Lyra §7.2's test), and every job's JCT on both sides. Self-contained (no network)."""
    real, replay, rel = comparison["real"], comparison["replay"], comparison["relative_error"]
    rows = "".join(f"<tr><th>{name.replace('_', ' ')} (s)</th><td>{real[name + '_s']:,.2f}</td>"
                   f"<td>{replay[name + '_s']:,.2f}</td><td>{rel[name]:+.1%}</td></tr>" for name in HEADLINE)
    pj = comparison["per_job_jct_error"]
    diff = comparison["decisions"]["first_difference"]
    apart = comparison["first_activity_apart"]
    facts = [f"{real['finished']}/{real['jobs']} jobs finished on the testbed, {replay['finished']}/{replay['jobs']} in"
             " the replay",
             f"per-job JCT error: median {pj['median']:.1%}, p90 {pj['p90']:.1%}, worst {pj['max']:.1%}",
             "decisions: identical" if diff is None else
             f"first decision that differs: #{diff['index']} ({', '.join(diff['differs_in'])})",
             f"activities: all within {comparison['tolerance_s']:g} s" if apart is None else
             f"first activity more than {comparison['tolerance_s']:g} s apart: job {apart['job']} {apart['event']}"
             f" #{apart['occurrence']}"]
    jobs = real_jobs[["job_id", "num_gpus", "submit_time", "start_time", "end_time", "jct_s"]].merge(
        replay_jobs[["job_id", "start_time", "end_time", "jct_s"]], on="job_id", suffixes=("_testbed", "_replay"))
    jobs["error"] = (jobs["jct_s_replay"] - jobs["jct_s_testbed"]) / jobs["jct_s_testbed"]
    body = (f"<ul>{''.join(f'<li>{html.escape(f)}</li>' for f in facts)}</ul>"
            f"<table><tr><th></th><th>testbed</th><th>replay</th><th>error</th></tr>{rows}</table>"
            f"<h2>Every job</h2>{plain_table(jobs, 2)}")
    return plain_page(f"{policy}: the testbed against the replay", body)
