"""Plots for replay runs and experiment comparisons (matplotlib, no display: Figure + Agg canvas).

Comparison plots are meant to be read in the MLflow UI at a glance: every policy gets its own
colour *and* line style (20 colours x 4 styles: 80 distinct policies), the legend sits outside the
axes, seed spread is drawn (a band between the seeds' curves, error bars on the bars), and waiting
times, which are often exactly 0, are drawn on a symmetric-log axis with 0 on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

CDF_POINTS = 400  # a CDF is drawn through this many quantiles (plots stay cheap for 100k jobs)
LINE_STYLES = ("-", "--", "-.", ":")


def _figure(width: float = 6.4, height: float = 4.0, dpi: int = 90) -> Figure:
    # fixed margins, not tight_layout: measuring tick labels costs more than the rest of a plot
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.14, top=0.9, wspace=0.28)
    return fig


def policy_styles(labels: Sequence[str]) -> dict[str, dict]:
    """label -> ``color`` and ``linestyle``, distinct for up to 80 labels (tab20 x 4 line styles;
    the style changes only after all 20 colours are used, so small comparisons are solid lines)."""
    colours = colormaps["tab20"].colors
    return {label: {"color": colours[(i % 10) * 2 + (i // 10) % 2], "linestyle": LINE_STYLES[(i // 20) % 4]}
            for i, label in enumerate(labels)}


def _quantiles(values: pd.Series | np.ndarray, points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    v = np.sort(np.asarray(pd.Series(values).dropna(), dtype=float))
    if v.size == 0:
        return v, v
    y = np.arange(1, v.size + 1) / v.size
    last = np.r_[v[1:] != v[:-1], True]  # one point per distinct value: the fraction at or below it
    v, y = v[last], y[last]
    if v.size > points:
        idx = np.unique(np.linspace(0, v.size - 1, points).round().astype(int))
        v, y = v[idx], y[idx]
    return v, y


def _cdf(ax, values: pd.Series | np.ndarray, label: str | None = None, log: bool = True, **style) -> None:
    v, y = _quantiles(values)
    if v.size == 0:
        return
    # start at (0, 0): jobs that waited 0 s are a visible step at 0 (the symlog axis has 0 on it)
    x0 = min(0.0, float(v[0]))
    ax.step(np.r_[x0, v], np.r_[0.0, y], where="post", label=label, **style)
    _axis(ax, log, float(v.max()) if v.size else 1.0)


def _axis(ax, log: bool, vmax: float) -> None:
    if log:
        # symmetric log: 0 s is on the axis (zero waits are common), linear below 1 s
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(left=0.0, right=max(vmax * 1.3, 10.0))
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)  # a policy whose jobs all waited 0 s is a line at 1, above the frame's edge
    ax.grid(True, alpha=0.3)


def cdf_plot(values: pd.Series, path: Path, title: str, xlabel: str) -> Path:
    fig = _figure(7.0, 4.2)
    ax = fig.subplots()
    _cdf(ax, values)
    zero = float((pd.Series(values).dropna() == 0).mean()) if len(values) else 0.0
    ax.set_xlabel(f"{xlabel} (symmetric log: 0 s shown; {zero:.0%} of jobs at 0 s)")
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


def _wide(n_labels: int, height: float = 6.0) -> tuple[Figure, float]:
    """A figure with room on the right for a legend of ``n_labels`` entries (one or two columns)."""
    ncol = 1 if n_labels <= 16 else 2
    fig = _figure(12.0 + 1.6 * (ncol - 1), height, dpi=100)
    right = 0.74 if ncol == 1 else 0.66
    fig.subplots_adjust(left=0.07, right=right, bottom=0.11, top=0.91)
    return fig, ncol


def cdf_comparison(series: Mapping[str, Sequence[pd.Series] | pd.Series], path: Path, title: str,
                   xlabel: str, log: bool = True) -> Path:
    """One CDF per policy: the seeds pooled as the line; with several seeds, a band between the
    lowest and the highest seed's curve (at equal fractions of jobs) shows the seed spread."""
    labels = list(series)
    styles = policy_styles(labels)
    fig, ncol = _wide(len(labels))
    ax = fig.subplots()
    vmax, zeros = 1.0, []
    levels = np.linspace(0.0, 1.0, 101)[1:]
    for label in labels:
        parts = series[label]
        parts = [parts] if isinstance(parts, pd.Series | np.ndarray) else list(parts)
        pooled = pd.concat([pd.Series(np.asarray(p, dtype=float)) for p in parts], ignore_index=True).dropna()
        if pooled.empty:
            continue
        vmax = max(vmax, float(pooled.max()))
        zero = float((pooled == 0).mean())
        zeros.append(zero)
        shown = f"{label} ({zero:.0%} at 0 s)" if zero > 0 else label
        _cdf(ax, pooled, label=shown, log=log, linewidth=1.4, **styles[label])
        if len(parts) > 1:
            curves = np.array([np.quantile(np.asarray(p, dtype=float)[~np.isnan(np.asarray(p, dtype=float))], levels)
                               for p in parts if len(p)])
            ax.fill_betweenx(levels, curves.min(axis=0), curves.max(axis=0), color=styles[label]["color"],
                             alpha=0.12, linewidth=0)
    _axis(ax, log, vmax)
    note = "symmetric log: 0 s shown" if log else "linear"
    if zeros and max(zeros) > 0:
        note += f"; up to {max(zeros):.0%} of a policy's jobs at 0 s"
    ax.set_xlabel(f"{xlabel} ({note})")
    ax.set_title(title + ("  (band: spread over seeds)" if any(not isinstance(v, pd.Series) and len(v) > 1
                                                                for v in series.values()) else ""), fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, ncol=ncol, frameon=False)
    fig.savefig(path)
    return path


def metric_bars(table: pd.DataFrame, metrics: Mapping[str, str], path: Path, title: str) -> Path:
    """:func:`metric_bars_figure` saved to ``path``."""
    metric_bars_figure(table, metrics, title).savefig(path)
    return path


def metric_bars_figure(table: pd.DataFrame, metrics: Mapping[str, str], title: str) -> Figure:
    """One panel per metric (``metrics``: key -> panel title; two panels a row), one bar per policy:
    the seed mean with the seed standard deviation as an error bar (``<key>_std`` columns of the
    comparison table); seconds are shown in hours."""
    labels = list(table["policy"])
    styles = policy_styles(labels)
    n = len(metrics)
    rows = (n + 1) // 2
    fig = _figure(max(12.0, 0.5 * len(labels)), 4.6 * rows + 0.6, dpi=100)
    axes = np.atleast_1d(fig.subplots(rows, min(n, 2))).ravel()
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.12 / rows, top=1 - 0.9 / (4.6 * rows + 0.6),
                        hspace=0.55, wspace=0.18)
    x = np.arange(len(labels))
    for ax, (key, name) in zip(axes, metrics.items()):
        scale = 3600.0 if key.endswith("_s") else 1.0
        mean = table[key].to_numpy(dtype=float) / scale
        std = table.get(f"{key}_std", pd.Series(np.nan, index=table.index)).to_numpy(dtype=float) / scale
        std = np.nan_to_num(std)
        low = np.minimum(std, np.maximum(mean, 0))  # a whisker never goes below 0
        ax.bar(x, mean, yerr=[low, std], capsize=3, color=[styles[lb]["color"] for lb in labels],
               error_kw={"linewidth": 1.0})
        ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=9)
        ax.set_title(name + (" (h)" if scale != 1.0 else ""), fontsize=11)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(title + "  (bars: mean over seeds; whiskers: ± std)", fontsize=12)
    return fig


def load_sweep_plot(frame: pd.DataFrame, path: Path, title: str) -> Path:
    """Average JCT and average wait (all time without GPUs) against load, one line per policy.
    ``frame``: columns ``policy, load, avg_jct_s, avg_wait_s`` (already averaged over seeds)."""
    labels = list(dict.fromkeys(frame["policy"]))
    styles = policy_styles(labels)
    ncol = 1 if len(labels) <= 16 else 2
    fig = _figure(14.0, 5.5, dpi=100)
    fig.subplots_adjust(left=0.06, right=0.78 if ncol == 1 else 0.7, bottom=0.12, top=0.88, wspace=0.25)
    ax_jct, ax_wait = fig.subplots(1, 2)
    for label, group in frame.groupby("policy", sort=False):
        group = group.sort_values("load")
        ax_jct.plot(group["load"], group["avg_jct_s"] / 3600.0, marker="o", label=label, **styles[label])
        ax_wait.plot(group["load"], group["avg_wait_s"] / 3600.0, marker="o", label=label, **styles[label])
    for ax, name in ((ax_jct, "avg_jct_s (h)"), (ax_wait, "avg_wait_s (h): all time without GPUs")):
        ax.set_xlabel("load (submit times / load)")
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    ax_wait.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, ncol=ncol, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.savefig(path)
    return path


def smact_cdf(series: Mapping[str, Sequence[pd.DataFrame]], path: Path, title: str) -> Path:
    """Castor Fig. 12c/d: per policy, the CDF of SM activity (SMACT, 0-1) over all GPUs' time, idle
    GPUs at 0. ``series``: label -> one ``smact, gpu_s`` distribution per seed (``smact.parquet``); the
    line is the seeds' mean fraction of GPU-time at or below each SMACT, the band their spread."""
    labels = list(series)
    styles = policy_styles(labels)
    fig, ncol = _wide(len(labels))
    ax = fig.subplots()
    grid = np.linspace(0.0, 1.0, 201)
    for label in labels:
        curves = []
        for d in series[label]:
            values, weights = d["smact"].to_numpy(dtype=float), d["gpu_s"].to_numpy(dtype=float)
            if weights.sum() > 0:
                curves.append(np.array([weights[values <= x].sum() for x in grid]) / weights.sum())
        if not curves:
            continue
        stack = np.vstack(curves)
        mean = stack.mean(axis=0)
        ax.step(grid, mean, where="post", linewidth=1.4, label=f"{label} ({mean[0]:.0%} of GPU-time idle)",
                **styles[label])
        if len(curves) > 1:
            ax.fill_between(grid, stack.min(axis=0), stack.max(axis=0), step="post", color=styles[label]["color"],
                            alpha=0.12, linewidth=0)
    ax.axvline(0.5, color="0.5", linewidth=0.8, linestyle=":")  # Castor's "high-level" activation above 0.5
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("SMACT (DCGM_FI_PROF_SM_ACTIVE; idle GPUs at 0; dotted: 0.5)")
    ax.set_ylabel("fraction of GPU-time")
    ax.grid(True, alpha=0.3)
    ax.set_title(title + ("  (band: spread over seeds)" if any(len(v) > 1 for v in series.values()) else ""),
                 fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, ncol=ncol, frameon=False)
    fig.savefig(path)
    return path
