"""The reproduction report's figures (:mod:`schedlab.sched.reporting.paper_report`), each a PNG as
base64 for inlining: the load sweep (average JCT by load, ours and the paper's printed points), the
ratios of a ``kind: ratios`` table (the paper's beside ours), and, for a set-up at the paper table's
load or replayed at one load, average JCT over the baseline per policy with the paired 95 % interval as
the whisker and the paper's ratio beside it (the normalised bar chart the papers print), or, where the
baseline has no replay, the average JCT itself."""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from schedlab.sched.reporting import plots


def png(fig: Any) -> str:
    """The figure inlined: :func:`plots.figure_png` (the comparison page's PNG) as base64."""
    return base64.b64encode(plots.figure_png(fig)).decode()


def sweep_plot(stats: pd.DataFrame, labels: list[str], figure: str | None, points: dict | None) -> str:
    """Average JCT by load (mean ± std over seeds) per label, the paper's points (hollow markers) when
    it prints them, else a note saying that it does not."""
    fig = plots._figure(7.6, 4.4)
    ax = fig.add_subplot(111)
    shown = [label for label in labels if label in stats.index.get_level_values("label")]
    styles = plots.policy_styles(shown)
    for label in shown:
        part = stats.loc[label].sort_index()
        style = styles[label]
        ax.errorbar(part.index, part["mean"], yerr=part["std"].fillna(0), label=label, color=style["color"],
                    linestyle=style["linestyle"], marker=style["marker"], markersize=5, capsize=3, linewidth=1.5)
        for load, value in ((points or {}).get(label) or {}).items():
            ax.plot([float(load)], [float(value)], marker=style["marker"], markersize=9, markerfacecolor="none",
                    markeredgecolor=style["color"], markeredgewidth=1.8, linestyle="none")
    ax.set_xlabel("load factor (x the trace's submissions)")
    ax.set_ylabel("average JCT (hours)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="upper left")
    seeds = _seed_span(stats["seeds"])
    if figure:
        note = ("paper's points: hollow markers" if points else
                "the paper prints no numbers for this figure: no paper points overlaid")
        ax.set_title(f"ours (mean ± std over {seeds}) vs {figure}\n{note}", fontsize=9)
    else:
        ax.set_title(f"ours: mean ± std over {seeds} (no paper figure for this config)", fontsize=9)
    return png(fig)


def ratio_bars(rows: list[str], paper: list[float], ours: list[float], std: list[float], seeds: list[int],
               title: str, band: float) -> str:
    """The paper's ratio beside ours (± std over seeds) per row of a ``kind: ratios`` table, with the
    ±``band`` range around the paper's; bars start at 1 (parity with the baseline)."""
    fig = plots._figure(max(6.0, 0.75 * len(rows) + 2), 4.2)
    ax = fig.add_subplot(111)
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [p - 1 for p in paper], 0.4, bottom=1.0, label="paper", color="#9e9e9e", edgecolor="#333")
    ax.bar(x + 0.2, [o - 1 for o in ours], 0.4, bottom=1.0, yerr=[0 if math.isnan(s) else s for s in std],
           capsize=3, label=f"ours (mean, ± std over {_seed_span(pd.Series(seeds))})", color="#1f77b4",
           edgecolor="#333")
    for i, p in enumerate(paper):
        ax.plot([i - 0.4, i + 0.4], [p * (1 - band)] * 2, color="#b3261e", linewidth=0.8, linestyle=":")
        ax.plot([i - 0.4, i + 0.4], [p * (1 + band)] * 2, color="#b3261e", linewidth=0.8, linestyle=":")
    ax.axhline(1.0, color="#000", linewidth=0.8)
    ax.set_xticks(x, rows, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ratio vs the baseline (>1: better)")
    ax.set_title(f"{title}: paper vs ours (dotted: paper ±{band:.0%})", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.subplots_adjust(bottom=0.25)
    return png(fig)


@dataclass(frozen=True)
class Bar:
    """One policy of :func:`baseline_bars`: ours over the baseline (ratio of seed means) with the paired
    95 % interval mapped onto the ratio (``low``, ``high``; NaN with one seed), the seeds both have,
    and the paper's ratio (NaN when the paper has no such row)."""

    label: str
    ours: float
    low: float
    high: float
    seeds: int
    paper: float = math.nan
    paired: Any = None  # the paired comparison behind the whisker (paired.Paired)


def baseline_bars(bars: list[Bar], baseline: str, title: str, ylabel: str = "average JCT / baseline's") -> str:
    """Ours over the baseline per policy (the paired interval as the whisker; a dashed line at 1), and
    the paper's ratio beside it (grey) where it has one."""
    fig = plots._figure(max(5.5, 0.8 * len(bars) + 2.5), 4.2)
    ax = fig.add_subplot(111)
    x = np.arange(len(bars))
    has_paper = any(math.isfinite(b.paper) for b in bars)
    width = 0.4 if has_paper else 0.6
    shift = width / 2 if has_paper else 0.0
    styles = plots.policy_styles([b.label for b in bars])
    ours = np.array([b.ours for b in bars])
    lower = np.array([b.ours - b.low if math.isfinite(b.low) else 0.0 for b in bars])
    upper = np.array([b.high - b.ours if math.isfinite(b.high) else 0.0 for b in bars])
    ax.bar(x + shift, ours, width, yerr=np.vstack([lower, upper]), capsize=3,
           color=[styles[b.label]["color"] for b in bars], edgecolor="#333", label="ours (ratio of seed means; whisker: paired 95 % interval)")
    if has_paper:
        ax.bar(x - shift, [b.paper for b in bars], width, color="#9e9e9e", edgecolor="#333", label="paper")
    for i, b in enumerate(bars):
        if math.isfinite(b.ours):
            ax.annotate(f"{b.ours:.2f}", (x[i] + shift, b.ours), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=7)
    ax.axhline(1.0, color="#000", linewidth=0.8, linestyle="--")
    ax.set_xticks(x, [f"{b.label}\n(n={b.seeds})" for b in bars], rotation=0 if len(bars) < 7 else 30,
                  ha="center" if len(bars) < 7 else "right", fontsize=8)
    ax.set_ylabel(f"{ylabel} ({baseline} = 1)")
    ax.set_title(title, fontsize=9)
    tops = [v for b in bars for v in (b.ours, b.high, b.paper) if math.isfinite(v)]
    ax.set_ylim(0, max(tops + [1.0]) * 1.12)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.subplots_adjust(bottom=0.28)
    return png(fig)


def average_bars(labels: list[str], means: list[float], stds: list[float], seeds: list[int], title: str) -> str:
    """Average JCT (hours) per label, mean ± std over its seeds: a set-up where nothing can be paired
    with the baseline."""
    fig = plots._figure(max(5.5, 0.8 * len(labels) + 2.5), 4.2)
    ax = fig.add_subplot(111)
    styles = plots.policy_styles(labels)
    x = np.arange(len(labels))
    ax.bar(x, means, 0.6, yerr=[0 if math.isnan(s) else s for s in stds], capsize=3, edgecolor="#333",
           color=[styles[label]["color"] for label in labels])
    ax.set_xticks(x, [f"{label}\n(n={n})" for label, n in zip(labels, seeds)], fontsize=8)
    ax.set_ylabel("average JCT (hours)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.subplots_adjust(bottom=0.2)
    return png(fig)


def _seed_span(seeds: pd.Series) -> str:
    """``3 seeds`` or ``2-3 seeds`` (when some replays are missing)."""
    values = pd.to_numeric(seeds, errors="coerce").dropna().astype(int)
    if values.empty:
        return "seeds"
    low, high = int(values.min()), int(values.max())
    return f"{high} seed{'s' if high != 1 else ''}" if low == high else f"{low}-{high} seeds"


__all__ = ["Bar", "average_bars", "baseline_bars", "png", "ratio_bars", "sweep_plot"]
