"""The reproduction report's figures and tables per set-up (trace, cluster) of a config: the load sweep
(average JCT by load, mean ± std over seeds with their number) where a set-up has two loads or more,
and the bar chart the papers print (average JCT over the baseline's, paired over seeds, the paper's
ratio beside) at the paper table's load or at a set-up's one load; and the number formats the report's
pages share."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from schedlab.sched.reporting import paper_figures, paper_paired
from schedlab.sched.reporting.paper_tables import HOUR

if TYPE_CHECKING:
    from schedlab.sched.reporting.paper_report import ConfigResult


def num(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    return f"{value:.{3 if magnitude < 0.1 and value != 0 else digits}f}"


def mean_std(mean: float, std: float) -> str:
    """``mean ± std``; the mean alone with one seed, — when not replayed."""
    if math.isnan(mean):
        return "—"
    return num(mean) + ("" if math.isnan(std) else f" ± {num(std)}")


def load_sweep(result: ConfigResult) -> dict[tuple[str, str], pd.DataFrame]:
    """(trace, cluster) -> average JCT (hours) per label and load: columns ``mean``, ``std`` (sample,
    over seeds) and ``seeds``, from each replay's job table."""
    rows = _replay_jct(result)
    out = {}
    if rows.empty:
        return out
    for (trace, cluster), part in rows.groupby(["trace", "cluster"], sort=True):
        stats = part.groupby(["label", "load"])["jct_h"].agg(["mean", "std", "count"])
        out[(str(trace), str(cluster))] = stats.rename(columns={"count": "seeds"})
    return out


def _replay_jct(result: ConfigResult) -> pd.DataFrame:
    """One row per replay: its coordinates and average JCT in hours."""
    return pd.DataFrame([{"trace": r.trace, "cluster": r.cluster, "label": r.label, "load": r.load,
                          "seed": r.seed, "jct_h": float(r.jobs["jct_s"].mean()) / HOUR} for r in result.replays])


def baseline_bars(result: ConfigResult, trace: str, cluster: str, load: float,
                  paper: dict[str, float] | None = None) -> list[paper_figures.Bar]:
    """Each label's average JCT over the baseline's at ``load`` on one set-up, paired over seeds (the
    ratio is 1 + mean difference / the baseline's mean on the seeds both have; the interval likewise),
    with ``paper``'s ratio where given."""
    rows = _replay_jct(result)
    rows = rows[(rows["trace"] == trace) & (rows["cluster"] == cluster) & np.isclose(rows["load"], load)]
    values = {label: {(trace, cluster, int(s)): float(v) for s, v in zip(part["seed"], part["jct_h"])}
              for label, part in rows.groupby("label")}
    base = result.baseline_label
    bars = []
    for label in result.labels:
        if label not in values or base not in values:
            continue
        both = [u for u in values[label] if u in values[base]]
        if not both:
            continue
        base_mean = float(np.mean([values[base][u] for u in both]))
        p = paper_paired.pair(values[label], values[base], base, False, result.paired_method)
        scale = (lambda v: 1 + v / base_mean) if base_mean > 0 else (lambda v: math.nan)  # noqa: E731
        bars.append(paper_figures.Bar(label, scale(p.mean), scale(p.low), scale(p.high), p.seeds,
                                      (paper or {}).get(label, math.nan), p))
    return bars


def _paper_ratios(spec: dict | None, baseline: str, load: float) -> dict[str, float]:
    """The paper's average JCT over its baseline row's (a ``classes`` table's first column) at the table's
    load; empty for other tables and loads."""
    if not spec or spec.get("kind", "classes") != "classes" or not math.isclose(load, float(spec["load"])):
        return {}
    rows = spec["rows"]
    if baseline not in rows or not rows[baseline][0]:
        return {}
    return {label: row[0] / rows[baseline][0] for label, row in rows.items()}


def bars_section(result: ConfigResult, trace: str, cluster: str, load: float, spec: dict | None) -> list[str]:
    """A set-up's bar chart at one load (average JCT over the baseline's, paired) and its table."""
    base = result.baseline_label
    bars = baseline_bars(result, trace, cluster, load, _paper_ratios(spec, base, load))
    if len(bars) < 2:
        return _plain_bars(result, trace, cluster, load)
    method = paper_paired.METHOD_NAMES[result.paired_method]
    title = f"{result.name} at load {load:g} ({trace} / {cluster}): average JCT over {base}'s"
    png = paper_figures.baseline_bars(bars, base, title)
    with_paper = any(math.isfinite(b.paper) for b in bars)
    caption = (f"{html.escape(result.name)}, trace {html.escape(trace)}, cluster {html.escape(cluster)}, load"
               f" {load:g}: each policy's average JCT over {html.escape(base)}'s, paired over the seeds both have"
               f" (n under each bar): the bar is 1 + the mean paired difference / {html.escape(base)}'s mean, the"
               f" whisker the 95 % interval of that difference ({method}) on the same scale"
               + ("; grey: the paper's ratio on its first column." if with_paper else
                  "; the paper prints no such ratio for this set-up."))
    rows = "".join(
        f"<tr><td>{html.escape(b.label)}</td><td class='n'>{num(b.paper)}</td><td class='n'>{num(b.ours)}"
        + (f" [{num(b.low)}, {num(b.high)}]" if math.isfinite(b.low) else "")
        + f"</td><td>{html.escape(paper_paired.cell(b.paired, 'h'))}</td></tr>"
        for b in bars if b.label != base)
    return [f"<figure><img alt='baseline bars' src='data:image/png;base64,{png}'><figcaption>{caption}"
            "</figcaption></figure>",
            f"<table><thead><tr><th>policy</th><th>paper ÷ {html.escape(base)}</th><th>ours ÷ {html.escape(base)}"
            f" [95 %]</th><th>paired: average JCT − {html.escape(base)}'s, 95 % interval, wins / seeds, verdict"
            f"</th></tr></thead><tbody>{rows}</tbody></table>"]


def _plain_bars(result: ConfigResult, trace: str, cluster: str, load: float) -> list[str]:
    """A set-up without the baseline (or with one label) at ``load``: each label's average JCT in hours,
    mean ± std over its seeds, nothing paired."""
    stats = load_sweep(result).get((trace, cluster))
    if stats is None:
        return []
    at = stats[np.isclose(stats.index.get_level_values("load"), load)].droplevel("load")
    if at.empty:
        return []
    labels = [label for label in result.labels if label in at.index]
    png = paper_figures.average_bars(labels, [float(at.loc[x, "mean"]) for x in labels],
                                     [float(at.loc[x, "std"]) for x in labels], [int(at.loc[x, "seeds"]) for x in labels],
                                     f"{result.name} at load {load:g} ({trace} / {cluster}): average JCT")
    return [f"<figure><img alt='average bars' src='data:image/png;base64,{png}'><figcaption>"
            f"{html.escape(result.name)}, trace {html.escape(trace)}, cluster {html.escape(cluster)}, load {load:g}:"
            f" average JCT (hours), mean ± sample std over each label's seeds (n under each bar); the baseline"
            f" {html.escape(result.baseline_label)} has no replay here, so nothing is paired with it.</figcaption>"
            "</figure>"]


def setup_section(result: ConfigResult, spec: dict | None) -> list[str]:
    """A figure for every set-up (trace, cluster) of the config: the load sweep where it has two loads
    or more, and the bar chart over the baseline at the paper table's load (or at its one load)."""
    sweep = (spec or {}).get("load_sweep") or {}
    out = []
    for (trace, cluster), stats in load_sweep(result).items():
        loads = sorted(stats.index.get_level_values("load").unique())
        if len(loads) >= 2:
            png = paper_figures.sweep_plot(stats, result.labels, sweep.get("figure"), sweep.get("points"))
            caption = (f"{html.escape(result.name)}: average JCT by load factor on trace {html.escape(trace)}, cluster"
                       f" {html.escape(cluster)}; ours = mean ± sample std over seeds of each replay's average JCT.")
            if sweep and not sweep.get("points"):
                caption += f" {html.escape(sweep['figure'])}: the paper prints no numbers, so none are overlaid."
            wide, spread, seeds = (stats[c].unstack("load") for c in ("mean", "std", "seeds"))
            head = "".join(f"<th>load {load:g}</th>" for load in wide.columns)
            body = "".join("<tr><td>" + html.escape(label) + "</td>" + "".join(
                f"<td class='n'>{mean_std(wide.loc[label, load], spread.loc[label, load])}"
                f" <span class='detail'>({_seeds(seeds.loc[label, load])})</span></td>"
                for load in wide.columns) + "</tr>" for label in result.labels if label in wide.index)
            out += [f"<figure><img alt='load sweep' src='data:image/png;base64,{png}'><figcaption>{caption}"
                    "</figcaption></figure>",
                    f"<table><thead><tr><th>average JCT (h), mean ± std (seeds)</th>{head}</tr></thead>"
                    f"<tbody>{body}</tbody></table>"]
        at_table = [load for load in loads if spec and math.isclose(load, float(spec["load"]))]
        at = at_table[0] if at_table else loads[0] if len(loads) == 1 else None
        if at is not None:
            out += bars_section(result, trace, cluster, at, spec)
    return out


def _seeds(count: float) -> str:
    return "not replayed" if not count or math.isnan(count) else f"{int(count)} seed{'s' if count != 1 else ''}"


__all__ = ["baseline_bars", "load_sweep", "mean_std", "num", "setup_section"]
