"""Replay one canonical job table through one policy on one cluster: the unit every experiment fans out."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from schedlab.sched.cluster import ClusterSpec, ClusterState, load_cluster
from schedlab.sched.engine import Engine
from schedlab.sched.job import jobs_from_table
from schedlab.sched.metrics import job_table, summarize
from schedlab.sched.policies import make_policy


@dataclass
class ReplayResult:
    policy: str
    jobs: pd.DataFrame
    summary: dict[str, Any]
    utilization: pd.DataFrame = field(default_factory=pd.DataFrame)  # time, busy_gpus

    def write(self, out_dir: str | Path) -> Path:
        """Write ``jobs.parquet``, ``summary.json`` and ``utilization.parquet`` (atomically, file by file)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        _atomic(out / "jobs.parquet", lambda p: self.jobs.to_parquet(p, index=False))
        _atomic(out / "utilization.parquet", lambda p: self.utilization.to_parquet(p, index=False))
        _atomic(out / "summary.json", lambda p: p.write_text(json.dumps(_jsonable(self.summary), indent=2)))
        return out


def replay(
    table: pd.DataFrame,
    cluster: ClusterSpec | str,
    policy: str,
    params: dict[str, Any] | None = None,
    *,
    placement: str = "consolidated",
    seed: int = 0,
    preemption_overhead_s: float | None = None,
    load_report: dict[str, Any] | None = None,
    progress: bool = False,
) -> ReplayResult:
    spec = load_cluster(cluster) if isinstance(cluster, str) else cluster
    engine = Engine(
        jobs_from_table(table),
        ClusterState(spec),
        make_policy(policy, params),
        placement=placement,
        preemption_overhead_s=preemption_overhead_s,
        seed=seed,
        progress=progress,
    )
    result = engine.run()
    jobs = job_table(result)
    summary = summarize(jobs, result)
    summary = {
        "policy": policy,
        "cluster": spec.name,
        "placement": placement,
        "seed": seed,
        **summary,
        "jobs_read": (load_report or {}).get("read", summary["jobs"]),
        "jobs_dropped": sum((load_report or {}).get("dropped", {}).values()),
        "load_report": load_report or {},
    }
    utilization = pd.DataFrame(result.utilization_timeline, columns=["time", "busy_gpus"])
    return ReplayResult(policy=policy, jobs=jobs, summary=summary, utilization=utilization)


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    tmp.replace(path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
