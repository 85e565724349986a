"""The headline figure of a comparison: the papers' normalised bar chart.

One panel per metric that separates the policies, one horizontal bar per policy (best at the top, its
name on the axis beside the bar):

- JCT and makespan (:data:`NORMALISED`) as the papers draw them: each policy's mean **over the
  baseline's** (1 = the baseline, left = better), the whisker the 95 % interval of that ratio from the
  paired differences over seeds (:mod:`~schedlab.sched.reporting.paired`): ``1 + [low, high] / mean of
  the baseline``, the baseline's mean taken as fixed, so a whisker excludes 1 exactly when the paired
  verdict is *better* or *worse*;
- waits and queueing (:data:`HOURS`) as absolute hours, never as a ratio (a ratio of near-zero waits
  reads thousands of times better and means nothing), the whisker ``mean of the baseline + [low, high]``;
- GPU utilisation as its value, with the same whisker.

With one seed there is no interval and no whisker (the caption says so). A metric gets no panel when it
does not separate the policies (:func:`left_out`): no policy differs from the baseline by
:data:`MIN_EFFECT` or more (of the larger of the two) with a paired verdict of *better* or *worse* (one
seed: by :data:`MIN_EFFECT` or more at all); the figure says which metrics were left out and why. The
ranking metric is always drawn. Every figure is stamped with the replays it includes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from schedlab.sched.reporting import compare, paired, plots

#: drawn as the policy's mean over the baseline's (the papers' normalised bars)
NORMALISED = ("avg_jct_s", "p95_jct_s", "makespan_s")
#: drawn as absolute hours
HOURS = ("avg_wait_s", "avg_queue_s")
#: the candidate panels, in this order after the ranking metric
PANELS = ("avg_jct_s", "p95_jct_s", "avg_wait_s", "makespan_s", "gpu_util")
#: a policy separates from the baseline on a metric when it differs by at least this fraction of the
#: larger of the two values (and, with several seeds, its paired verdict is better or worse)
MIN_EFFECT = 0.02


@dataclass(frozen=True)
class Bar:
    """One policy's bar: ``value`` (ratio, hours or the metric), its whisker ``[low, high]`` (NaN: none),
    the relative difference from the baseline ``effect`` and the paired comparison with the baseline."""

    policy: str
    value: float
    low: float
    high: float
    effect: float
    versus: paired.Paired


def _shown(metric: str, value: float, base: float) -> float:
    if metric in NORMALISED:
        return value / base if base else math.nan
    return value / 3600.0 if metric in HOURS else value


def bars_of(rows: pd.DataFrame, order: Sequence[str], baseline: str, metric: str,
            method: str = "t") -> list[Bar]:
    """The bars of ``metric`` for the policies of ``order`` with finished replays, from ``rows`` (one
    trace and cluster, one row per replay: ``policy``, ``seed``, the metric), each over the seeds it
    shares with ``baseline``; none without a baseline replay."""
    if metric not in rows or baseline not in set(rows["policy"]):
        return []
    table = paired.by_seed(rows, metric)
    higher = compare.RANKABLE.get(metric, False)
    out = []
    for policy in order:
        if policy not in table.columns or baseline not in table.columns:
            continue
        both = table[[policy, baseline]].dropna() if policy != baseline else table[[baseline]].dropna()
        if both.empty:
            continue
        base, mean = float(both[baseline].mean()), float(both[policy].mean())
        versus = paired.paired(both[policy], both[baseline], baseline, higher, method)
        low = high = math.nan
        if policy != baseline and not math.isnan(versus.low):
            low, high = _shown(metric, base + versus.low, base), _shown(metric, base + versus.high, base)
        larger = max(abs(mean), abs(base))
        effect = abs(mean - base) / larger if larger else 0.0
        out.append(Bar(policy, _shown(metric, mean, base), low, high, effect, versus))
    return out


def left_out(bars: Sequence[Bar], baseline: str) -> str | None:
    """Why a metric's panel is left out (None: it separates the policies)."""
    others = [b for b in bars if b.policy != baseline]
    if not others:
        return f"no policy but {baseline} yet"
    big = [b for b in others if b.effect >= MIN_EFFECT]
    if not big:
        return f"every policy within {MIN_EFFECT:.0%} of {baseline}"
    if any(b.versus.seeds >= 2 for b in big) and not any(
            b.versus.verdict in (paired.BETTER, paired.WORSE) for b in big):
        return f"no policy {MIN_EFFECT:.0%} or more from {baseline} is separated from it at 95 % (paired over seeds)"
    return None


def _label(metric: str, bar: Bar) -> str:
    if metric in NORMALISED:
        value = f"{bar.value:.2f}"  # a fraction of the baseline's, not a speed-up
    elif metric in HOURS:
        value = f"{bar.value:,.2f} h" if bar.value < 100 else f"{bar.value:,.0f} h"
    else:
        value = f"{bar.value:.3f}"
    v = bar.versus
    if v.seeds < 2 or v.vs == bar.policy:
        return value
    word = {paired.BETTER: "better", paired.WORSE: "worse"}.get(v.verdict, "not separated")
    return f"{value}  {word}, wins {v.wins}/{v.seeds}"


def _panel(ax, metric: str, bars: Sequence[Bar], baseline: str, styles: Mapping[str, dict]) -> None:
    higher = compare.RANKABLE.get(metric, False)
    ordered = sorted(bars, key=lambda b: -b.value if higher else b.value)
    y = np.arange(len(ordered))[::-1]  # best at the top
    for yi, bar in zip(y, ordered):
        st = styles.get(bar.policy, {"color": "0.5", "hatch": ""})
        ax.barh(yi, bar.value, height=0.72, color=st["color"], hatch=st["hatch"], edgecolor="0.25", linewidth=0.6)
        right = bar.value
        if not math.isnan(bar.low) and bar.high > bar.low:
            ax.errorbar(bar.value, yi, xerr=[[bar.value - bar.low], [bar.high - bar.value]], fmt="none",
                        ecolor="0.1", elinewidth=1.2, capsize=3)
            right = max(right, bar.high)
        ax.text(right, yi, "  " + _label(metric, bar), va="center", ha="left", fontsize=8)
    base = next((b.value for b in bars if b.policy == baseline), math.nan)
    if not math.isnan(base):
        ax.axvline(base, color="black", linewidth=1.2)
    ax.set_yticks(y, [b.policy + (" (baseline)" if b.policy == baseline else "") for b in ordered], fontsize=9)
    ax.set_ylim(-0.7, len(ordered) - 0.3)
    top = max([b.value for b in bars] + [b.high for b in bars if not math.isnan(b.high)] + [1e-9])
    ax.set_xlim(0.0, top * 1.45)  # room for the labels right of the longest bar
    ax.grid(True, axis="x", alpha=0.3)
    if metric in NORMALISED:
        ax.set_xlabel(f"{metric} ÷ {baseline}'s ({baseline} = 1, black line; {'right' if higher else 'left'} = better)",
                      fontsize=9)
        ax.set_title(f"normalised {metric}: mean over {baseline}'s", fontsize=10)
    else:
        unit = " (h)" if metric in HOURS else ""
        ax.set_xlabel(f"{compare.header(metric) if metric not in HOURS else metric}{unit}, absolute; black line:"
                      f" {baseline}; {'right' if higher else 'left'} = better", fontsize=9)
        ax.set_title(f"{metric}{unit}: mean over seeds", fontsize=10)


def bars_figure(rows: pd.DataFrame, order: Sequence[str], baseline: str, title: str, stamp: str,
                metrics: Sequence[str] = PANELS, rank_by: str = "avg_jct_s",
                styles: Mapping[str, dict] | None = None, method: str = "t") -> tuple[Figure, dict[str, str]]:
    """The figure of one trace and cluster (``rows``: its finished replays; ``order``: its policies best
    first) and the metrics left out, metric -> why. ``stamp``: which replays it includes ("as of 40 of
    42 replays"), written in its title."""
    styles = styles or plots.policy_styles(list(order))
    candidates = list(dict.fromkeys([rank_by, *metrics]))
    drawn: list[tuple[str, list[Bar]]] = []
    omitted: dict[str, str] = {}
    for metric in candidates:
        bars = bars_of(rows, order, baseline, metric, method)
        why = left_out(bars, baseline) if metric != rank_by else (None if bars else f"no {baseline} replay yet")
        if why is None:
            drawn.append((metric, bars))
        else:
            omitted[metric] = why
    seeds = int(rows.groupby("policy")["seed"].nunique().max()) if len(rows) else 0
    n = max(len(drawn), 1)
    cols = min(n, 2)
    rows_n = math.ceil(n / cols)
    bars_h = 0.3 * max(len(order), 3)  # inches of bars per panel; 1.4 in for its title and x axis
    foot = 0.17 * (len(omitted) + 1) + 0.1 if omitted else 0.0  # the lines naming what was left out (inches)
    height = (bars_h + 1.4) * rows_n + 0.6 + foot
    fig = plots._figure(8.0 * cols, height, dpi=100)
    axes = np.atleast_1d(fig.subplots(rows_n, cols)).ravel()
    fig.subplots_adjust(top=1 - 0.9 / height, bottom=(0.7 + foot) / height, hspace=1.4 / bars_h,
                        wspace=0.55)
    for ax, (metric, bars) in zip(axes, drawn):
        _panel(ax, metric, bars, baseline, styles)
    for ax in axes[len(drawn):]:
        ax.set_visible(False)
    whisker = ("whisker: 95 % interval of the paired difference with the baseline over seeds"
               if seeds >= 2 else "one seed: no interval, no whisker")
    fig.suptitle(f"{title}, {stamp}  (bars: seed means; {whisker})", fontsize=11, y=1 - 0.25 / height)
    if omitted:
        fig.text(0.01, 0.1 / height, "\n".join(["left out (they do not separate the policies):",
                                                 *(f"  {m}: {why}" for m, why in omitted.items())]),
                 fontsize=8, va="bottom")
    return fig, omitted
