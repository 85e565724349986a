"""Plots for replay runs and experiment comparisons (matplotlib, no display: Figure + Agg canvas).

Comparison plots answer who wins at a glance: every policy gets its own colour, line
style + marker and bar hatch (:func:`policy_styles`); times are in hours everywhere. The CDFs show the
top policies and the baseline with each tail named (p95, p99, max, jobs over a day) or every policy as
small multiples, seed spread as bands; JCTs on a log axis, waits, often exactly 0, on a symmetric-log
axis with 0 on it; the tails as CCDFs on a log y axis with p95 and p99 marked. Figures are saved at 2x,
cropped to what is drawn. The headline bars are :mod:`~schedlab.sched.reporting.bars`.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps, rc_context
from matplotlib.colors import hsv_to_rgb, to_hex
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

CDF_POINTS = 400  # a CDF is drawn through this many quantiles (plots stay cheap for 100k jobs)
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*", "d")  # 13: coprime with 4 styles
HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "--")
DAY_H = 24.0
#: a symmetric-log axis in hours is linear below this (36 s): waits of 0 are on it
SYMLOG_H = 0.01
#: figures for the MLflow UI are saved at twice the screen resolution
DPI_2X = 200
#: the width (pixels) of a comparison figure's SVG copy: about the width of MLflow's run page
SVG_WIDTH = 1150


def _figure(width: float = 6.4, height: float = 4.0, dpi: int = 90) -> Figure:
    # fixed margins, not tight_layout: measuring tick labels costs more than the rest of a plot
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.14, top=0.9, wspace=0.28)
    return fig


class PlainLogFormatter(LogFormatter):
    """Log-axis tick labels as plain numbers (0.01, 0.1, 1, 10 h; 1e-05 of jobs), where matplotlib's
    default writes mathtext (10^-2): the same ticks, read at a glance, and no mathtext to parse (a
    quarter of a comparison figure's cost)."""

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return f"{x:g}"


def _log_scale(ax, which: str, scale: str = "log", **options) -> None:
    """``ax``'s ``which`` axis (``x`` or ``y``) on ``scale`` (``log`` or ``symlog``), labelled by
    :class:`PlainLogFormatter` (minor ticks too, on a ``log`` axis spanning little more than a decade)."""
    getattr(ax, f"set_{which}scale")(scale, **options)
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(PlainLogFormatter(linthresh=options.get("linthresh")))
    if scale == "log":
        axis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))


def policy_styles(labels: Sequence[str]) -> dict[str, dict]:
    """label -> ``color``, ``linestyle``, ``marker`` and ``hatch``: a distinct colour for each of up
    to 60 labels (tab20, then tab20b and tab20c; golden-angle hues beyond), and, for colour-blind
    readers and grey-scale prints, a (line style, marker) pair distinct for up to 52 labels
    (4 styles x 13 markers, coprime cycles) and a hatch for bars (7 patterns)."""
    palette = [*(colormaps["tab20"].colors[(i % 10) * 2 + i // 10] for i in range(20)),
               *colormaps["tab20b"].colors, *colormaps["tab20c"].colors]

    def colour(i: int) -> str:
        if i < len(palette):
            return to_hex(palette[i])
        return to_hex(hsv_to_rgb(((i * 0.618034) % 1.0, 0.75, 0.8 if i % 2 else 0.6)))

    return {label: {"color": colour(i), "linestyle": LINE_STYLES[i % len(LINE_STYLES)],
                    "marker": MARKERS[i % len(MARKERS)], "hatch": HATCHES[i % len(HATCHES)]}
            for i, label in enumerate(labels)}


def line_style(style: Mapping[str, str]) -> dict:
    """The keywords of ``ax.plot``/``ax.step`` for a :func:`policy_styles` entry (a few markers per line)."""
    return {"color": style["color"], "linestyle": style["linestyle"], "marker": style["marker"],
            "markevery": 0.1, "markersize": 4}


def tail(hours: pd.Series | np.ndarray) -> dict[str, float]:
    """The tail of a wait or JCT distribution (hours): p95, p99, max, the jobs over a day and the
    share of jobs at exactly 0 (floored to whole percent by :func:`tail_text`, never rounded up to 100 %)."""
    v = np.asarray(pd.Series(hours).dropna(), dtype=float)
    if v.size == 0:
        return {"p95": math.nan, "p99": math.nan, "max": math.nan, "over_day": 0, "zero": math.nan, "n": 0}
    return {"p95": float(np.quantile(v, 0.95)), "p99": float(np.quantile(v, 0.99)), "max": float(v.max()),
            "over_day": int((v > DAY_H).sum()), "zero": float((v == 0).mean()), "n": int(v.size)}


def hours_text(hours: float) -> str:
    """``0.004 h``, ``3.21 h``, ``98.5 h``, ``1,234 h``: every time in hours, as the tables show them."""
    if math.isnan(hours):
        return "—"
    if hours == 0:
        return "0 h"
    if abs(hours) < 0.1:
        return f"{hours:.3f} h"
    return f"{hours:,.2f} h" if abs(hours) < 10 else f"{hours:,.1f} h" if abs(hours) < 1000 else f"{hours:,.0f} h"


def tail_text(t: Mapping[str, float]) -> str:
    """``p95 1.20 h, p99 3.21 h, max 98.5 h, 12 jobs > 24 h, 35% at 0`` (the zero share floored: 99.5 % is 99 %)."""
    if not t["n"]:
        return "no jobs"
    text = (f"p95 {hours_text(t['p95'])}, p99 {hours_text(t['p99'])}, max {hours_text(t['max'])},"
            f" {t['over_day']:,d} job{'' if t['over_day'] == 1 else 's'} > 24 h")
    if t["zero"] > 0:
        text += f", {math.floor(t['zero'] * 100):d}% at 0"
    return text


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


def x_scale(hours: np.ndarray) -> str:
    """``log`` when every value is above 0 (JCTs), else ``symlog`` (waits: 0 is on the axis)."""
    return "log" if hours.size and float(np.min(hours)) > 0 else "symlog"


def _cdf(ax, hours: pd.Series | np.ndarray, label: str | None = None, scale: str = "symlog", **style) -> None:
    v, y = _quantiles(hours)
    if v.size == 0:
        return
    # on a symlog axis, start at (0, 0): jobs that waited 0 are a visible step at 0
    x0 = min(0.0, float(v[0])) if scale != "log" else float(v[0])
    ax.step(np.r_[x0, v], np.r_[0.0, y], where="post", label=label, **style)
    _axis(ax, scale, float(v.max()), float(v[0]))


def _axis(ax, scale: str, vmax: float, vmin: float = 0.0) -> None:
    """x in hours: ``symlog`` (0 on the axis, linear below 0.01 h = 36 s), ``log`` or ``linear``."""
    if scale == "symlog":
        _log_scale(ax, "x", "symlog", linthresh=SYMLOG_H)
        ax.set_xlim(left=0.0, right=max(vmax * 1.3, 0.1))
    elif scale == "log":
        _log_scale(ax, "x")
        ax.set_xlim(left=max(vmin, 1e-4) / 1.3, right=max(vmax * 1.3, 0.1))
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)  # a policy whose jobs all waited 0 is a line at 1, above the frame's edge
    ax.grid(True, alpha=0.3)


def _scale_words(scale: str) -> str:
    return {"symlog": "symmetric log: 0 shown, linear below 36 s", "log": "log"}.get(scale, "linear")


def cdf_plot(seconds: pd.Series, path: Path, title: str, what: str) -> Path:
    """One replay's CDF of ``what`` (``seconds``: a job-table column), x in hours."""
    fig = _figure(7.0, 4.2)
    ax = fig.subplots()
    hours = np.asarray(pd.Series(seconds).dropna(), dtype=float) / 3600.0
    scale = x_scale(hours)
    _cdf(ax, hours, scale=scale)
    zero = float((hours == 0).mean()) if hours.size else 0.0
    ax.set_xlabel(f"{what} (h; {_scale_words(scale)}" + (f"; {zero:.0%} of jobs at 0)" if zero else ")"))
    ax.set_title(f"{title}\n{tail_text(tail(hours))}", fontsize=10)
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


def _parts(values: Sequence[pd.Series] | pd.Series) -> list[np.ndarray]:
    parts = [values] if isinstance(values, pd.Series | np.ndarray) else list(values)
    return [np.asarray(p, dtype=float)[~np.isnan(np.asarray(p, dtype=float))] for p in parts]


def save(fig: Figure, path: Path, svg_width: int | None = SVG_WIDTH) -> Path:
    """At :data:`DPI_2X`, cropped to what is drawn (labels outside the axes are never clipped); with
    ``svg_width``, also ``<name>.svg`` sized to that many pixels wide (sharp at any zoom: the
    MLflow UI shows an image at its own size, and a run's description allows no ``width``)."""
    # the crop measured once (what bbox_inches="tight" does with an extra draw in every savefig)
    crop = fig.get_tightbbox(fig.canvas.get_renderer()).padded(0.15)
    fig.savefig(path, dpi=DPI_2X, bbox_inches=crop)
    if svg_width:
        buffer = io.StringIO()
        with rc_context({"svg.fonttype": "none"}):  # text as text, not paths: a third of the size
            fig.savefig(buffer, format="svg", bbox_inches=crop)
        path.with_suffix(".svg").write_text(sized_svg(buffer.getvalue(), svg_width))
    return path


def sized_svg(text: str, width: int) -> str:
    """An SVG document whose root is ``width`` pixels wide (height in proportion, from its viewBox)."""
    head = re.search(r"<svg\b[^>]*>", text)
    box = re.search(r'viewBox="([\d.\-]+) ([\d.\-]+) ([\d.]+) ([\d.]+)"', head.group(0)) if head else None
    if box is None:
        raise ValueError("not an SVG document with a viewBox")
    height = width * float(box.group(4)) / float(box.group(3))
    tag = re.sub(r'\s(width|height)="[^"]*"', "", head.group(0))
    tag = tag.replace("<svg", f'<svg width="{width}px" height="{height:.0f}px"', 1)
    return text[:head.start()] + tag + text[head.end():]


def shown_policies(order: Sequence[str], baseline: str | None, top: int | None) -> list[str]:
    """The first ``top`` of ``order`` (best first) and the baseline (all of ``order`` without ``top``)."""
    shown = list(order) if top is None else list(order)[:top]
    if baseline is not None and baseline in order and baseline not in shown:
        shown.append(baseline)
    return shown


def cdf_comparison(series: Mapping[str, Sequence[pd.Series] | pd.Series], path: Path, title: str,
                   what: str, order: Sequence[str] | None = None, top: int | None = None,
                   baseline: str | None = None, styles: Mapping[str, dict] | None = None, stamp: str = "") -> Path:
    """One CDF per policy (``series``: label -> its seeds' values in seconds), x in hours, the seeds
    pooled; with several seeds a band between the lowest and the highest seed's curve. ``order`` (best
    first) and ``top``: only the first ``top`` policies and the ``baseline``. Each legend entry names the
    tail (:func:`tail_text`); ``stamp``: the replays the figure includes."""
    order = list(order or series)
    labels = [lb for lb in shown_policies(order, baseline, top) if lb in series]
    styles = styles or policy_styles(list(series))
    pooled = {lb: np.concatenate([p / 3600.0 for p in _parts(series[lb]) if p.size] or [np.empty(0)]) for lb in labels}
    every = np.concatenate([*pooled.values(), np.empty(0)])
    scale = x_scale(every)
    fig, ncol = _wide(len(labels))
    ax = fig.subplots()
    levels = np.linspace(0.0, 1.0, 101)[1:]
    for label in labels:
        if not pooled[label].size:
            continue
        shown = f"{label}{' (baseline)' if label == baseline else ''}: {tail_text(tail(pooled[label]))}"
        _cdf(ax, pooled[label], label=shown, scale=scale, linewidth=1.6 if label != baseline else 2.2,
             **line_style(styles[label]))
        parts = [p / 3600.0 for p in _parts(series[label]) if p.size]
        if len(parts) > 1:
            curves = np.array([np.quantile(p, levels) for p in parts])
            ax.fill_betweenx(levels, curves.min(axis=0), curves.max(axis=0), color=styles[label]["color"],
                             alpha=0.12, linewidth=0)
    _axis(ax, scale, float(every.max()) if every.size else 1.0, float(every[every > 0].min()) if (every > 0).any() else 1.0)
    ax.set_xlabel(f"{what} (h; {_scale_words(scale)}; dotted: 24 h)")
    ax.axvline(DAY_H, color="0.4", linewidth=0.8, linestyle=":")
    which = f"top {top} by rank + baseline" if top is not None and len(order) > len(labels) else "every policy"
    band = "; band: spread over seeds" if any(len(_parts(v)) > 1 for v in series.values()) else ""
    ax.set_title(f"{title}  ({which}{band}){', ' + stamp if stamp else ''}", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, ncol=1, frameon=False,
              title="policy: tail of its distribution", title_fontsize=8)
    return save(fig, path)


def ccdf_comparison(series: Mapping[str, Sequence[pd.Series] | pd.Series], path: Path, title: str, what: str,
                    order: Sequence[str] | None = None, top: int | None = None, baseline: str | None = None,
                    styles: Mapping[str, dict] | None = None, stamp: str = "") -> Path:
    """The tails: one CCDF per policy (the fraction of jobs above x; seeds pooled) on a log y axis, x in
    hours, the p95 and p99 levels drawn and labelled (a curve crosses them at its p95 and p99, marked
    on each curve and written in its legend entry). ``order``, ``top``, ``baseline``: as :func:`cdf_comparison`."""
    order = list(order or series)
    labels = [lb for lb in shown_policies(order, baseline, top) if lb in series]
    styles = styles or policy_styles(list(series))
    fig, ncol = _wide(len(labels))
    ax = fig.subplots()
    floor, vmax = 1.0, 0.0
    for label in labels:
        hours = np.sort(np.concatenate([p / 3600.0 for p in _parts(series[label]) if p.size] or [np.empty(0)]))
        if not hours.size:
            continue
        above = 1.0 - np.arange(1, hours.size + 1) / hours.size  # the fraction of jobs above each value
        keep = above > 0
        x, y = _thin(hours[keep], above[keep])
        floor, vmax = min(floor, 1.0 / hours.size), max(vmax, float(hours[-1]))
        st = styles[label]
        p95, p99 = float(np.quantile(hours, 0.95)), float(np.quantile(hours, 0.99))
        ax.step(np.r_[0.0, x], np.r_[1.0, y], where="post", color=st["color"], linestyle=st["linestyle"],
                linewidth=1.6 if label != baseline else 2.2,
                label=f"{label}{' (baseline)' if label == baseline else ''}: p95 {hours_text(p95)},"
                      f" p99 {hours_text(p99)}, max {hours_text(float(hours[-1]))}")
        ax.plot([p95, p99], [0.05, 0.01], linestyle="none", marker=st["marker"], color=st["color"],
                markeredgecolor="0.1", markersize=6)
    _log_scale(ax, "y")
    ax.set_ylim(max(floor, 1e-6) / 1.5, 1.05)
    ax.set_xlim(0.0, max(vmax * 1.03, 0.1))
    for level, name in ((0.05, "p95"), (0.01, "p99")):
        ax.axhline(level, color="0.3", linewidth=0.8, linestyle="--")
        ax.text(1.0, level, f" {name}", transform=ax.get_yaxis_transform(), va="center", fontsize=8)
    ax.set_xlabel(f"{what} (h, linear)")
    ax.set_ylabel("fraction of jobs above x (log)")
    ax.grid(True, alpha=0.3, which="both")
    which = f"top {top} by rank + baseline" if top is not None and len(order) > len(labels) else "every policy"
    ax.set_title(f"{title}: the tail ({which}; seeds pooled; marks: each policy's p95, p99)"
                 f"{', ' + stamp if stamp else ''}", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.04, 1.0), fontsize=8, ncol=1, frameon=False,
              title="policy: p95, p99, max", title_fontsize=8)
    return save(fig, path)


def _thin(x: np.ndarray, y: np.ndarray, points: int = CDF_POINTS * 2) -> tuple[np.ndarray, np.ndarray]:
    """At most ``points`` steps of a curve, denser in the tail (the last 5 % of points kept whole)."""
    if x.size <= points:
        return x, y
    cut = int(x.size * 0.95)
    head = np.unique(np.linspace(0, cut, points // 2).round().astype(int))
    tail_ = np.unique(np.linspace(cut, x.size - 1, points // 2).round().astype(int))
    idx = np.unique(np.r_[head, tail_])
    return x[idx], y[idx]


def cdf_grid(series: Mapping[str, Sequence[pd.Series] | pd.Series], path: Path, title: str, what: str,
             order: Sequence[str] | None = None, baseline: str | None = None,
             styles: Mapping[str, dict] | None = None, columns: int = 4, stamp: str = "") -> Path:
    """Small multiples: one panel per policy (best first by ``order``; values in seconds, drawn in hours),
    the baseline in grey on each, the panel's title naming the policy's tail; shared axes."""
    labels = [lb for lb in (order or series) if lb in series]
    styles = styles or policy_styles(list(series))
    rows = max(1, math.ceil(len(labels) / columns))
    height = 2.5 * rows + 0.9
    fig = _figure(3.4 * columns, height, dpi=100)
    axes = np.atleast_1d(fig.subplots(rows, columns, sharex=True, sharey=True)).ravel()
    fig.subplots_adjust(top=1 - 1.0 / height, bottom=0.4 / height, hspace=0.55, wspace=0.12)
    pooled = {lb: np.concatenate([p / 3600.0 for p in _parts(series[lb])] or [np.empty(0)]) for lb in labels}
    every = np.concatenate([*pooled.values(), np.empty(0)])
    scale = x_scale(every)
    vmax, vmin = (float(every.max()), float(every[every > 0].min())) if (every > 0).any() else (1.0, 1.0)
    for i, (ax, label) in enumerate(zip(axes, labels)):
        if baseline in pooled and label != baseline and pooled[baseline].size:
            _cdf(ax, pooled[baseline], scale=scale, color="0.6", linewidth=1.0, linestyle="--")
        if pooled[label].size:
            _cdf(ax, pooled[label], scale=scale, linewidth=1.5, color=styles[label]["color"])
        ax.axvline(DAY_H, color="0.4", linewidth=0.6, linestyle=":")
        _axis(ax, scale, vmax, vmin)
        ax.set_ylabel("")
        ax.set_title(f"{i + 1}. {label}{' (baseline)' if label == baseline else ''}\n{tail_text(tail(pooled[label]))}",
                     fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in axes[len(labels):]:
        ax.set_visible(False)
    fig.suptitle(f"{title}: one panel per policy, best first; grey dashed: {baseline}; dotted: 24 h;"
                 f" x: {what} (h, {_scale_words(scale)}), y: fraction of jobs{', ' + stamp if stamp else ''}",
                 fontsize=10, y=1 - 0.3 / height)
    return save(fig, path)


def figure_png(fig: Figure) -> bytes:
    """A figure as PNG bytes at :data:`DPI_2X` (for inlining in HTML)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI_2X, bbox_inches="tight", pad_inches=0.15)
    return buffer.getvalue()


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
        style = {**line_style(styles[label]), "markevery": 1}
        ax_jct.plot(group["load"], group["avg_jct_s"] / 3600.0, label=label, **style)
        ax_wait.plot(group["load"], group["avg_wait_s"] / 3600.0, label=label, **style)
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
                **line_style(styles[label]))
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


def job_scatter(both: pd.DataFrame, a: str, b: str, path: Path) -> Path:
    """Each job's JCT under ``a`` against under ``b`` (hours, log-log), coloured by its GPU count, the
    diagonal drawn: above it, ``a`` was faster for the job (``both``: :func:`drilldown.paired_jobs` rows)."""
    fig = _figure(6.4, 5.6)
    ax = fig.add_subplot()
    x, y = both["jct_s_a"].to_numpy(float) / 3600, both["jct_s_b"].to_numpy(float) / 3600
    points = ax.scatter(x, y, c=np.log2(both["num_gpus_a"].to_numpy(float)), cmap="viridis", s=6, alpha=0.6,
                        linewidths=0)
    low, high = max(min(x.min(), y.min()), 1e-4), max(x.max(), y.max())
    ax.plot([low, high], [low, high], color="0.4", linewidth=0.8, linestyle="--")
    _log_scale(ax, "x")
    _log_scale(ax, "y")
    ax.set_xlabel(f"JCT under {a} (h)")
    ax.set_ylabel(f"JCT under {b} (h)")
    ax.set_title(f"{len(both):,} jobs: above the diagonal, {a} was faster", fontsize=9)
    bar = fig.colorbar(points, ax=ax)
    bar.set_label("GPUs (log2)")
    return save(fig, path)
