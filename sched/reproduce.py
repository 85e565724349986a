"""Paper-vs-ours tables for the reproduction experiments (Castor Table 5, SJF-BSBF Tables III-IV).

The published numbers are in ``conf/papers/tables.yaml``; ours are computed from the replays' job
tables (averaged over seeds), split into large and small jobs at the paper's threshold and
aggregated the way the paper does (``class_average``: each class's own mean, or its share of the
all-jobs mean as in Castor Table 5, where All = Large + Small).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

TABLES = Path(__file__).resolve().parent.parent / "conf" / "papers" / "tables.yaml"
HOUR = 3600.0


def paper_tables() -> dict[str, dict]:
    return yaml.safe_load(TABLES.read_text())


CLASS_AVERAGES = ("mean", "share")


def tables_for_experiment(experiment: str) -> dict[str, dict]:
    """The published tables that ``experiment`` (a config name) is compared with."""
    return {name: spec for name, spec in paper_tables().items() if experiment in spec["experiments"]}


def our_row(jobs: pd.DataFrame, large_job_gpus: int, class_average: str = "mean") -> list[float]:
    """avg JCT and avg queueing (hours) for all / large / small jobs of one replay.
    Queueing is all time without GPUs (Castor §9.2), which equals time to first start without preemption.
    ``class_average="share"`` divides each class's sum by the number of ALL jobs (Castor Table 5)."""
    if class_average not in CLASS_AVERAGES:
        raise ValueError(f"class_average must be one of {CLASS_AVERAGES}, not {class_average!r}")
    large = jobs["num_gpus"] > large_job_gpus
    row = []
    for column in ("jct_s", "wait_s"):
        for part in (jobs, jobs[large], jobs[~large]):
            count = len(jobs) if class_average == "share" else len(part)
            row.append(float(part[column].sum()) / count / HOUR if len(part) else float("nan"))
    return row


def compare(table_name: str, jobs_by_policy: dict[str, list[pd.DataFrame]]) -> pd.DataFrame:
    """Rows: policy; columns: each metric as ``ours`` and ``paper`` (hours), averaged over seeds."""
    spec = paper_tables()[table_name]
    rows = {}
    for policy, replays in jobs_by_policy.items():
        ours = pd.DataFrame([our_row(j, spec["large_job_gpus"], spec.get("class_average", "mean"))
                             for j in replays]).mean().tolist()
        paper = spec["rows"].get(policy, [float("nan")] * len(spec["columns"]))
        rows[policy] = {f"{c} ours": o for c, o in zip(spec["columns"], ours)} | {
            f"{c} paper": p for c, p in zip(spec["columns"], paper)
        }
    for policy, paper in spec["rows"].items():
        if policy not in rows:  # in the paper, not implemented here (e.g. Pollux)
            rows[policy] = {f"{c} paper": p for c, p in zip(spec["columns"], paper)}
    ordered = [f"{c} {who}" for c in spec["columns"] for who in ("ours", "paper")]
    return pd.DataFrame.from_dict(rows, orient="index").reindex(columns=ordered)
