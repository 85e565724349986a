"""An experiment's figures: each replay's own (its JCT, queueing and wait CDFs, GPU utilisation, SM
activity), and the full comparison's, drawn from every finished replay's jobs: per trace and cluster,
the JCT, wait and queueing CDFs (the best :data:`CDF_TOP` by rank and the baseline, and small multiples
of all), the JCT and queueing tails as CCDFs, the SM-activity CDF when the replays computed it, and
average JCT and wait against load when the load is swept. Times in hours; every comparison figure is
stamped with the replays it includes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from schedlab import settings
from schedlab.sched.reporting import plots
from schedlab.sched.reporting.live import group_suffix

#: the CDF plots draw the best this many policies and the baseline (small multiples draw all)
CDF_TOP = 6


def replay_figures(result: Any, folder: Path, title: str, total_gpus: int, label: str) -> None:
    """A replay's figures in ``folder`` (``result``: a :class:`~schedlab.sched.replay.ReplayResult` of
    policy ``label`` on ``total_gpus`` training GPUs)."""
    plots.cdf_plot(result.jobs["jct_s"], folder / "jct_cdf.png", f"JCT CDF: {title}", "JCT")
    plots.cdf_plot(result.jobs["queue_s"], folder / "queue_cdf.png", f"queueing delay CDF: {title}", "queueing delay")
    plots.cdf_plot(result.jobs["wait_s"], folder / "wait_cdf.png", f"wait (all time without GPUs) CDF: {title}", "wait")
    plots.utilization_plot(result.utilization, total_gpus, folder / "gpu_util.png", f"GPU utilisation: {title}")
    if result.smact is not None:
        plots.smact_cdf({label: [result.smact]}, folder / "smact_cdf.png", f"SM activity over all GPUs (idle = 0): {title}")


def _by_group(specs: list[Any], frames: dict[str, pd.DataFrame]) -> dict[tuple[str, str], dict[str, list]]:
    """(trace label, cluster) -> policy label -> the frames of its replays (seeds)."""
    groups: dict[tuple[str, str], dict[str, list]] = {}
    for spec in specs:
        if spec.key in frames:
            groups.setdefault((spec.trace_label, spec.cluster), {}).setdefault(spec.label, []).append(frames[spec.key])
    return groups


def comparison_figures(specs: list[Any], jobs: dict[str, pd.DataFrame], smact: dict[str, pd.DataFrame],
                       ranked: pd.DataFrame, rows: list[dict[str, Any]], baseline: str, styles: dict[str, dict],
                       sweeps_load: bool, folder: Path) -> list[Path]:
    """Draw the comparison's figures into ``folder`` from the replays' ``jobs`` (spec key -> ``jct_s``,
    ``queue_s``, ``wait_s``) and ``smact`` distributions, policies in the order of ``ranked``; ``rows``:
    the finished replays' metrics (for the load sweep). Returns the figures the run's note shows inline
    (the wait CDFs and their small multiples, the JCT CDFs and CCDFs, the queueing CCDFs)."""
    figures: list[Path] = []
    stamp = f"as of {len(jobs)} of {len(specs)} replays"
    for (trace_label, cluster), by_policy in _by_group(specs, jobs).items():
        suffix = group_suffix(trace_label, cluster)
        order = [p for p in ranked.loc[(ranked["trace"] == trace_label) & (ranked["cluster"] == cluster), "policy"]
                 if p in by_policy]
        where = f"{trace_label} on {cluster}"
        for column, name, what in (("wait_s", "wait", "wait: all time without GPUs"), ("jct_s", "jct", "JCT"),
                                   ("queue_s", "queue", "queueing delay to first start")):
            series = {k: [f[column] for f in frames] for k, frames in by_policy.items()}
            common = {"order": order, "baseline": baseline, "styles": styles, "stamp": stamp}
            top = plots.cdf_comparison(series, folder / f"{name}_cdf__{suffix}.png",
                                       f"{what}: {where}, seeds pooled", what, top=CDF_TOP, **common)
            grid = plots.cdf_grid(series, folder / f"{name}_cdf_all__{suffix}.png", f"{what}: {where}", what,
                                  **common)
            if column == "wait_s":
                figures += [top, grid]
            else:  # JCT and queueing: the tails as CCDFs too
                figures.append(plots.ccdf_comparison(series, folder / f"{name}_ccdf__{suffix}.png", f"{what}: {where}",
                                                     what, top=CDF_TOP, **common))
                if column == "jct_s":
                    figures.insert(-1, top)
    for (trace_label, cluster), by_policy in _by_group(specs, smact).items():
        plots.smact_cdf(by_policy, folder / f"smact_cdf__{group_suffix(trace_label, cluster)}.png",
                        f"SM activity over all GPUs, CDF per policy: {trace_label} on {cluster},"
                        f" as of {len(smact)} of {len(specs)} replays")
    if sweeps_load and rows:
        frame = pd.DataFrame(rows)
        means = frame.groupby(["trace_name", "cluster", "policy", "load"], sort=False)[
            ["avg_jct_s", "avg_wait_s"]].mean().reset_index()
        for (trace, cluster), group in means.groupby(["trace_name", "cluster"], sort=False):
            if group["load"].nunique() > 1:
                plots.load_sweep_plot(group, folder / f"vs_load__{settings.path_name(f'{trace}__{cluster}')}.png",
                                      f"{trace} on {cluster}: average JCT and wait vs load,"
                                      f" as of {len(rows)} of {len(specs)} replays")
    return figures
