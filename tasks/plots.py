"""Plots for replay runs and experiment comparisons (matplotlib, no display: Figure + Agg canvas)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def _figure(width: float = 6.4, height: float = 4.0) -> Figure:
    # fixed margins, not tight_layout: measuring tick labels costs more than the rest of a plot
    fig = Figure(figsize=(width, height), dpi=90)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.14, top=0.9, wspace=0.28)
    return fig


CDF_POINTS = 400  # a CDF is drawn through this many quantiles (plots stay cheap for 100k jobs)


def _cdf(ax, values: pd.Series | np.ndarray, label: str | None = None, log: bool = True) -> None:
    v = np.sort(np.asarray(pd.Series(values).dropna(), dtype=float))
    if v.size == 0:
        return
    y = np.arange(1, v.size + 1) / v.size
    if v.size > CDF_POINTS:
        idx = np.unique(np.linspace(0, v.size - 1, CDF_POINTS).round().astype(int))
        v, y = v[idx], y[idx]
    if log:
        v = np.maximum(v, 1.0)  # zero queueing on a log axis
    ax.step(v, y, where="post", label=label)
    if log:
        ax.set_xscale("log")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.0)
    ax.grid(True, alpha=0.3)


def cdf_plot(values: pd.Series, path: Path, title: str, xlabel: str) -> Path:
    fig = _figure()
    ax = fig.subplots()
    _cdf(ax, values)
    ax.set_xlabel(xlabel + " (log; values below 1 s shown at 1 s)")
    ax.set_title(title, fontsize=10)
    fig.savefig(path)
    return path


def utilization_plot(utilization: pd.DataFrame, total_gpus: int, path: Path, title: str) -> Path:
    fig = _figure(8.0, 3.2)
    ax = fig.subplots()
    if len(utilization):
        hours = utilization["time"].to_numpy(dtype=float) / 3600.0
        busy = utilization["busy_gpus"].to_numpy(dtype=float)
        ax.step(hours, busy / max(total_gpus, 1), where="post", linewidth=0.8)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("GPUs busy (fraction)")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=10)
    fig.savefig(path)
    return path


def cdf_comparison(series: Mapping[str, pd.Series], path: Path, title: str, xlabel: str) -> Path:
    fig = _figure(7.0, 4.4)
    ax = fig.subplots()
    for label, values in series.items():
        _cdf(ax, values, label=label)
    ax.set_xlabel(xlabel + " (log)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.savefig(path)
    return path


def load_sweep_plot(frame: pd.DataFrame, path: Path, title: str) -> Path:
    """Average JCT and average queueing delay against load, one line per policy.
    ``frame``: columns ``policy, load, avg_jct_s, avg_queue_s`` (already averaged over seeds)."""
    fig = _figure(10.0, 4.0)
    ax_jct, ax_queue = fig.subplots(1, 2)
    for label, group in frame.groupby("policy", sort=False):
        group = group.sort_values("load")
        ax_jct.plot(group["load"], group["avg_jct_s"] / 3600.0, marker="o", label=label)
        ax_queue.plot(group["load"], group["avg_queue_s"] / 3600.0, marker="o", label=label)
    for ax, name in ((ax_jct, "average JCT (h)"), (ax_queue, "average queueing delay (h)")):
        ax.set_xlabel("load (submit times / load)")
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    ax_jct.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path)
    return path
