"""Plots for replay runs and experiment comparisons (matplotlib, no display: Figure + Agg canvas).

Comparison plots answer who wins at a glance: every policy gets its own colour, line
style + marker and bar hatch (:func:`policy_styles`), the headline bars show the speed-up over the
baseline sorted best first with the values written on them and a zoom on the leaders, the CDFs show
the top policies and the baseline with each tail named (p99, max, jobs over a day) or every policy as
small multiples, seed spread is drawn (bands, whiskers, seed dots), waiting times, often exactly 0,
are drawn on a symmetric-log axis with 0 on it, and figures are saved at 2x, cropped to what is drawn.
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

CDF_POINTS = 400  # a CDF is drawn through this many quantiles (plots stay cheap for 100k jobs)
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*", "d")  # 13: coprime with 4 styles
HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "--")
DAY_S = 86400.0
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


def tail(values: pd.Series | np.ndarray) -> dict[str, float]:
    """The tail of a wait or JCT distribution (seconds): p99, max, the jobs over a day and the
    share of jobs at exactly 0 (floored to whole percent by :func:`tail_text`, never rounded up to 100 %)."""
    v = np.asarray(pd.Series(values).dropna(), dtype=float)
    if v.size == 0:
        return {"p99": math.nan, "max": math.nan, "over_day": 0, "zero": math.nan, "n": 0}
    return {"p99": float(np.quantile(v, 0.99)), "max": float(v.max()), "over_day": int((v > DAY_S).sum()),
            "zero": float((v == 0).mean()), "n": int(v.size)}


def duration(seconds: float) -> str:
    """``12 s``, ``14 min``, ``3.2 h``, ``4.1 d``."""
    if math.isnan(seconds):
        return "—"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < DAY_S:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / DAY_S:.1f} d"


def tail_text(t: Mapping[str, float]) -> str:
    """``p99 3.2 h, max 4.1 d, 12 jobs > 1 d, 35% at 0 s`` (the zero share floored: 99.5 % is 99 %)."""
    if not t["n"]:
        return "no jobs"
    text = f"p99 {duration(t['p99'])}, max {duration(t['max'])}, {t['over_day']:,d} job{'' if t['over_day'] == 1 else 's'} > 1 d"
    if t["zero"] > 0:
        text += f", {math.floor(t['zero'] * 100):d}% at 0 s"
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


def _parts(values: Sequence[pd.Series] | pd.Series) -> list[np.ndarray]:
    parts = [values] if isinstance(values, pd.Series | np.ndarray) else list(values)
    return [np.asarray(p, dtype=float)[~np.isnan(np.asarray(p, dtype=float))] for p in parts]


def save(fig: Figure, path: Path, svg_width: int | None = SVG_WIDTH) -> Path:
    """At :data:`DPI_2X`, cropped to what is drawn (labels outside the axes are never clipped); with
    ``svg_width``, also ``<name>.svg`` sized to that many pixels wide (sharp at any zoom: the
    MLflow UI shows an image at its own size, and a run's description allows no ``width``)."""
    fig.savefig(path, dpi=DPI_2X, bbox_inches="tight", pad_inches=0.15)
    if svg_width:
        buffer = io.StringIO()
        with rc_context({"svg.fonttype": "none"}):  # text as text, not paths: a third of the size
            fig.savefig(buffer, format="svg", bbox_inches="tight", pad_inches=0.15)
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
                   xlabel: str, log: bool = True, order: Sequence[str] | None = None, top: int | None = None,
                   baseline: str | None = None, styles: Mapping[str, dict] | None = None) -> Path:
    """One CDF per policy, the seeds pooled; with several seeds a band between the lowest and the
    highest seed's curve. ``order`` (best first) and ``top``: only the first ``top`` policies and the
    ``baseline``. Each legend entry names the tail (:func:`tail_text`: p99, max, jobs over a day)."""
    order = list(order or series)
    labels = [lb for lb in shown_policies(order, baseline, top) if lb in series]
    styles = styles or policy_styles(list(series))
    fig, ncol = _wide(len(labels))
    ax = fig.subplots()
    vmax = 1.0
    levels = np.linspace(0.0, 1.0, 101)[1:]
    for label in labels:
        parts = [p for p in _parts(series[label]) if p.size]
        if not parts:
            continue
        pooled = np.concatenate(parts)
        vmax = max(vmax, float(pooled.max()))
        shown = f"{label}{' (baseline)' if label == baseline else ''}: {tail_text(tail(pooled))}"
        _cdf(ax, pooled, label=shown, log=log, linewidth=1.6 if label != baseline else 2.2,
             **line_style(styles[label]))
        if len(parts) > 1:
            curves = np.array([np.quantile(p, levels) for p in parts])
            ax.fill_betweenx(levels, curves.min(axis=0), curves.max(axis=0), color=styles[label]["color"],
                             alpha=0.12, linewidth=0)
    _axis(ax, log, vmax)
    ax.set_xlabel(f"{xlabel} ({'symmetric log: 0 s shown' if log else 'linear'}; > 1 d = over a day)")
    if log:
        ax.axvline(DAY_S, color="0.4", linewidth=0.8, linestyle=":")
    which = f"top {top} by rank + baseline" if top is not None and len(order) > len(labels) else "every policy"
    band = "; band: spread over seeds" if any(len(_parts(v)) > 1 for v in series.values()) else ""
    ax.set_title(f"{title}  ({which}{band})", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, ncol=1, frameon=False,
              title="policy: tail of its distribution", title_fontsize=8)
    return save(fig, path)


def cdf_grid(series: Mapping[str, Sequence[pd.Series] | pd.Series], path: Path, title: str, xlabel: str,
             order: Sequence[str] | None = None, baseline: str | None = None,
             styles: Mapping[str, dict] | None = None, columns: int = 4) -> Path:
    """Small multiples: one panel per policy (best first by ``order``), the baseline in grey on each,
    the panel's title naming the policy's tail (p99, max, jobs over a day); shared axes."""
    labels = [lb for lb in (order or series) if lb in series]
    styles = styles or policy_styles(list(series))
    rows = max(1, math.ceil(len(labels) / columns))
    height = 2.5 * rows + 0.9
    fig = _figure(3.4 * columns, height, dpi=100)
    axes = np.atleast_1d(fig.subplots(rows, columns, sharex=True, sharey=True)).ravel()
    fig.subplots_adjust(top=1 - 1.0 / height, bottom=0.4 / height, hspace=0.55, wspace=0.12)
    pooled = {lb: np.concatenate(_parts(series[lb]) or [np.empty(0)]) for lb in labels}
    vmax = max([1.0, *(float(v.max()) for v in pooled.values() if v.size)])
    for i, (ax, label) in enumerate(zip(axes, labels)):
        if baseline in pooled and label != baseline and pooled[baseline].size:
            _cdf(ax, pooled[baseline], color="0.6", linewidth=1.0, linestyle="--")
        if pooled[label].size:
            _cdf(ax, pooled[label], linewidth=1.5, color=styles[label]["color"])
        ax.axvline(DAY_S, color="0.4", linewidth=0.6, linestyle=":")
        _axis(ax, True, vmax)
        ax.set_ylabel("")
        ax.set_title(f"{i + 1}. {label}{' (baseline)' if label == baseline else ''}\n{tail_text(tail(pooled[label]))}",
                     fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(labels):]:
        ax.set_visible(False)
    fig.suptitle(f"{title}: one panel per policy, best first; grey dashed: {baseline}; dotted: 1 day;"
                 f" x: {xlabel} (symmetric log), y: fraction of jobs", fontsize=10, y=1 - 0.3 / height)
    return save(fig, path)


def speedup(base: float, value: float, higher_better: bool = False) -> float:
    """How many times better than the baseline (> 1: better): base ÷ value, or value ÷ base."""
    if higher_better:
        base, value = value, base
    if math.isnan(base) or math.isnan(value):
        return math.nan
    if value == 0:
        return 1.0 if base == 0 else math.inf
    return base / value


def headline_bars(table: pd.DataFrame, metrics: Sequence[str], baseline: str, path: Path, title: str,
                  seeds: pd.DataFrame | None = None, styles: Mapping[str, dict] | None = None,
                  higher_better: Sequence[str] = ("gpu_util",)) -> Path:
    """:func:`headline_bars_figure` saved at 2x (:func:`save`)."""
    return save(headline_bars_figure(table, metrics, baseline, title, seeds, styles, higher_better), path)


def headline_bars_figure(table: pd.DataFrame, metrics: Sequence[str], baseline: str, title: str,
                         seeds: pd.DataFrame | None = None, styles: Mapping[str, dict] | None = None,
                         higher_better: Sequence[str] = ("gpu_util",)) -> Figure:
    """One panel per metric (two a row), one horizontal bar per policy, best at the top: the speed-up
    over ``baseline`` on a log axis (bars start at the baseline's line at 1x: right = better), the
    seed spread as a whisker (mean ± std mapped to the speed-up), each seed as a dot (``seeds``: one
    row per replay with ``policy`` and the metrics), and the value written on the bar: speed-up, mean
    ± std (hours for seconds) and ``≈`` when within the seed spread of the bar above it."""
    labels_all = [lb for lb in table["policy"]]
    styles = styles or policy_styles(labels_all)
    panels = [metrics[0], LEADERS, *metrics[1:]] if metrics else []
    n = len(panels)
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    bars_h = 0.3 * max(len(labels_all), 3)  # inches of bars per panel; 1.4 in for its title and x axis
    height = (bars_h + 1.4) * rows + 0.6
    fig = _figure(8.0 * cols, height, dpi=100)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    fig.subplots_adjust(top=1 - 0.9 / height, bottom=0.7 / height, hspace=1.4 / bars_h, wspace=0.7)
    by = table.set_index("policy")
    for ax, key in zip(axes, panels):
        if key == LEADERS:
            _leaders(ax, table, metrics[0], seeds, styles, metrics[0] in higher_better)
            continue
        better_high = key in higher_better
        if baseline not in by.index or key not in by.columns or pd.isna(by.loc[baseline, key]):
            ax.set_title(f"{key}: no {baseline} value yet", fontsize=10)
            ax.set_axis_off()
            continue
        base = float(by.loc[baseline, key])
        std_col = f"{key}_std"
        rows_ = []
        for label in labels_all:
            mean = float(by.loc[label, key]) if not pd.isna(by.loc[label, key]) else math.nan
            if math.isnan(mean):
                continue
            std = float(by.loc[label, std_col]) if std_col in by.columns and not pd.isna(by.loc[label, std_col]) else 0.0
            rows_.append((label, mean, std, speedup(base, mean, better_high)))
        rows_.sort(key=lambda r: (-r[3] if not math.isnan(r[3]) else math.inf))
        finite = [r[3] for r in rows_ if math.isfinite(r[3]) and r[3] > 0]
        hi_cap = max([1.0, *finite]) * 1.6
        lo_cap = min([1.0, *finite]) / 1.6
        scale = 3600.0 if key.endswith("_s") else 1.0
        unit = " h" if scale != 1.0 else ""
        y = np.arange(len(rows_))[::-1]  # best at the top
        for yi, (label, mean, std, ratio), prev in zip(y, rows_, [None, *rows_[:-1]]):
            shown = min(max(ratio, lo_cap), hi_cap) if not math.isnan(ratio) else 1.0
            st = styles[label]
            ax.barh(yi, shown - 1.0, left=1.0, height=0.72, color=st["color"], hatch=st["hatch"],
                    edgecolor="0.25", linewidth=0.6)
            lo_v, hi_v = mean - std, mean + std
            ends = sorted(speedup(base, v, better_high) if v > 0 or better_high else hi_cap for v in (lo_v, hi_v))
            ends = [min(max(e, lo_cap), hi_cap) if not math.isnan(e) else shown for e in ends]
            if std > 0:
                ax.plot(ends, [yi, yi], color="0.1", linewidth=1.2, solid_capstyle="butt")
                ax.plot([ends[0]] * 2, [yi - 0.18, yi + 0.18], color="0.1", linewidth=1.0)
                ax.plot([ends[1]] * 2, [yi - 0.18, yi + 0.18], color="0.1", linewidth=1.0)
            if seeds is not None and key in seeds.columns:
                values = seeds.loc[seeds["policy"] == label, key].dropna().to_numpy(dtype=float)
                if values.size:
                    dots = [min(max(speedup(base, v, better_high), lo_cap), hi_cap) for v in values]
                    jitter = np.linspace(-0.2, 0.2, len(dots)) if len(dots) > 1 else [0.0]
                    ax.scatter(dots, yi + np.asarray(jitter), s=10, color="white", edgecolors="0.1",
                               linewidths=0.7, zorder=3)
            tie = ""
            if prev is not None and abs(mean - prev[1]) <= max(std, prev[2]):
                tie = f"  ≈ {prev[0]}"
            ratio_text = "∞" if math.isinf(ratio) else "—" if math.isnan(ratio) else f"{ratio:.2f}x"
            if scale != 1.0 and mean < 36.0:  # under 0.01 h: seconds
                value = f"{mean:,.1f}" + (f" ± {std:,.1f}" if std > 0 else "") + " s"
            else:
                value = f"{mean / scale:,.2f}" + (f" ± {std / scale:,.2f}" if std > 0 else "") + unit
            text = f"{ratio_text}  {value}{tie}"
            right = max(shown, *ends) if std > 0 else shown
            ax.text(max(right, 1.0) * 1.03, yi, text, va="center", ha="left", fontsize=8)
        wide = hi_cap / lo_cap > 2 ** 10  # base-2 ticks would crowd: base 10
        ax.set_xscale("log", base=10 if wide else 2)
        ax.set_xlim(lo_cap, hi_cap * 2.2)  # room for the labels right of the longest bar
        ax.axvline(1.0, color="black", linewidth=1.4)
        ax.set_yticks(y, [r[0] + (" (baseline)" if r[0] == baseline else "") for r in rows_], fontsize=9)
        ax.set_ylim(-0.7, len(rows_) - 0.3)
        ax.grid(True, axis="x", alpha=0.3, which="both")
        ax.xaxis.set_major_formatter(_times_formatter())
        ax.set_xlabel(f"speed-up over {baseline} (log scale; black line: {baseline} = 1x; right = better)", fontsize=9)
        how = f"policy ÷ {baseline}" if better_high else f"{baseline} ÷ policy"
        ax.set_title(f"{key}: {how}, best first; label: speed-up, mean ± std{unit}", fontsize=10)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(f"{title}  (bars: seed means; whiskers: ± std; dots: seeds; ≈: within the seed spread of the bar above)",
                 fontsize=11, y=1 - 0.25 / height)
    return fig


LEADERS = "__leaders__"  # the zoomed panel of headline_bars_figure


def _leaders(ax, table: pd.DataFrame, key: str, seeds: pd.DataFrame | None, styles: Mapping[str, dict],
             higher_better: bool, within: float = 0.25) -> None:
    """A zoomed dot plot of the policies within ``within`` (25 %) of the best by ``key``: mean (dot),
    ± std (whisker), seeds (small dots), on a linear axis spanning only them, so close leaders separate."""
    part = table[["policy", key, *([f"{key}_std"] if f"{key}_std" in table else [])]].dropna(subset=[key])
    if part.empty:
        ax.set_axis_off()
        return
    best = part[key].max() if higher_better else part[key].min()
    close = part[(part[key] >= best * (1 - within))] if higher_better else part[part[key] <= best * (1 + within)]
    close = close.sort_values(key, ascending=not higher_better).reset_index(drop=True)
    scale = 3600.0 if key.endswith("_s") else 1.0
    y = np.arange(len(close))[::-1]
    for yi, row in zip(y, close.to_dict("records")):
        mean, std = row[key] / scale, (row.get(f"{key}_std") or 0.0) / scale
        std = 0.0 if math.isnan(std) else std
        colour = styles[row["policy"]]["color"]
        ax.errorbar(mean, yi, xerr=std, fmt=styles[row["policy"]]["marker"], color=colour, markersize=7,
                    markeredgecolor="0.1", ecolor="0.2", capsize=3)
        if seeds is not None and key in seeds.columns:
            values = seeds.loc[seeds["policy"] == row["policy"], key].dropna().to_numpy(dtype=float) / scale
            ax.scatter(values, np.full(values.size, yi - 0.25), s=9, color=colour, edgecolors="0.2", linewidths=0.5)
        ax.text(1.01, yi, f"{mean:,.3f} ± {std:,.3f}", transform=ax.get_yaxis_transform(), va="center", fontsize=8)
    ax.axvline(best / scale, color="0.3", linewidth=0.8, linestyle=":")
    ax.set_yticks(y, list(close["policy"]), fontsize=9)
    ax.set_ylim(-0.7, len(close) - 0.3)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlabel(f"{key}{' (h)' if scale != 1.0 else ''}, linear, zoomed to these policies", fontsize=9)
    ax.set_title(f"leaders by {key} (within {within:.0%} of the best): mean ± std, small dots: seeds", fontsize=10)


def _times_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:g}x")


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
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"JCT under {a} (h)")
    ax.set_ylabel(f"JCT under {b} (h)")
    ax.set_title(f"{len(both):,} jobs: above the diagonal, {a} was faster", fontsize=9)
    bar = fig.colorbar(points, ax=ax)
    bar.set_label("GPUs (log2)")
    return save(fig, path)
