"""The reproduction report (``schedlab reproduce --report DIR``): static HTML a reader
can check without reading code.

``index.html`` names the run (the parent ``reproduce`` MLflow run, each experiment's comparison run,
the code version, the seeds) and links one page per paper table of ``conf/papers/tables.yaml`` that
the run compared with. A table's page has, per config compared with it, one line per (row, column):
the paper's value, ours as the mean ± sample std over seeds, ours / paper and whether that is within
:data:`BAND` (±30 %), the measured cause of a miss (``causes:``), the value ``measured:`` last recorded
(a separate, labelled column: never shown as ours), and the table's ``calibration:`` (parameters fitted
to one of its rows). Plots (PNG, embedded): the config's load sweep (average JCT by load, mean ± std
over seeds; the paper's ``load_sweep.points`` overlaid, or a note that the paper prints none, e.g.
Castor Fig. 16) and, for ``kind: ratios`` tables (Gimbal §7.2 Fig. 8-9, §7.3 Fig. 12 ablation), the
paper's ratios beside ours.

Every "ours" number is computed here from the job tables (``jobs.parquet``) of the MLflow replay runs
the page lists, with :func:`schedlab.sched.reporting.paper_tables.compare`, the function of the flow's
``reproduce.md``: the pooled table (every seed) gives the mean, the same table per seed the std.
Ratios of ``kind: ratios`` tables are, as in the paper and ``reproduce.md``, baseline / policy of the
seed means; their ± is the std of the per-seed ratios.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from schedlab import settings
from schedlab.sched.reporting import plots
from schedlab.sched.reporting.mlflow_view import run_url
from schedlab.sched.reporting.paper_tables import HOUR, RowOrder, compare, paper_tables, tables_for_experiment

#: ours / paper within 1 ± BAND counts as reproduced
BAND = 0.30

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.2em 1.6em;color:#222;max-width:1500px}
h1{font-size:1.35em;margin:0 0 .3em}h2{font-size:1.15em;margin:1.4em 0 .3em;border-bottom:2px solid #ccc}
h3{font-size:1em;margin:1em 0 .3em}p,li{font-size:.92em;line-height:1.4}.meta{color:#555}
table{border-collapse:collapse;font-size:13px;margin:.4em 0}
th,td{padding:3px 8px;border-bottom:1px solid #e3e3e3;vertical-align:top}
th{background:#f3f3f3;text-align:left;position:sticky;top:0}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.first td{border-top:2px solid #bbb}td.row{font-weight:600;white-space:nowrap}
.ok{color:#11692b;font-weight:600;white-space:nowrap}.miss{color:#b3261e;font-weight:600;white-space:nowrap}.na{color:#888}
td.cause{max-width:520px;font-size:12px;color:#333}.detail{font-weight:400;color:#555;font-size:12px}td.last{color:#777}code{font-size:.9em}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:.85em;color:#555;max-width:1100px}
.summary td{white-space:nowrap}
"""


@dataclass(frozen=True)
class Replay:
    """One finished replay: its grid coordinates, MLflow run id and job table."""

    label: str
    seed: int
    load: float
    trace: str
    cluster: str
    run_id: str
    jobs: pd.DataFrame = field(repr=False)


@dataclass
class ConfigResult:
    """One config of the run: what the report needs from its experiment and replays."""

    name: str
    description: str
    seeds: list[int]
    experiment_id: str
    parent_run_id: str | None
    replays: list[Replay]
    labels: list[str]

    @classmethod
    def collect(cls, config: Any, specs: list[Any], jobs: dict[str, pd.DataFrame], run_ids: dict[str, str],
                experiment_id: str, parent_run_id: str | None) -> ConfigResult:
        """From the config, its grid and the finished replays' job tables and run ids (by spec key)."""
        replays = [Replay(s.label, s.seed, s.load, s.trace, s.cluster, run_ids[s.key], jobs[s.key])
                   for s in specs if s.key in jobs]
        return cls(config.name, config.description or "", list(config.seeds), experiment_id, parent_run_id,
                   replays, list(dict.fromkeys(s.label for s in specs)))


@dataclass(frozen=True)
class Cell:
    """One compared number: a (row, column) of a paper table, ours over the seeds that have it."""

    row: str
    column: str
    paper: float
    ours: float
    std: float
    seeds: int
    last: float | None
    cause: str | None

    @property
    def ratio(self) -> float:
        ok = math.isfinite(self.ours) and math.isfinite(self.paper) and self.paper > 0
        return self.ours / self.paper if ok else math.nan

    @property
    def within(self) -> bool | None:
        """|ours / paper - 1| <= BAND; None when there is no ratio (not replayed, paper 0 or NA)."""
        return None if math.isnan(self.ratio) else abs(self.ratio - 1) <= BAND + 1e-12


def _metrics(frame: pd.DataFrame) -> list[str]:
    """The compared columns of a :func:`compare` table: each ``<m> ours`` with a ``<m> paper``."""
    return [c.removesuffix(" ours") for c in frame.columns
            if c.endswith(" ours") and f"{c.removesuffix(' ours')} paper" in frame.columns]


def _last_recorded(spec: dict, experiment: str, row: str, metric: str) -> float | None:
    """The value ``measured:`` last recorded for this cell (not this run's), when tables.yaml has one."""
    measured = spec.get("measured") or {}
    kind = spec.get("kind", "classes")
    columns = list(spec.get("columns") or [])
    try:
        if kind == "classes":
            value = measured[experiment]["rows"][row][columns.index(metric)]
        elif kind == "ratios":
            value = measured[row] if metric == "ratio" else None
        elif kind == "schemes":
            value = measured[row][columns.index(metric)]
        else:
            value = None
    except (KeyError, ValueError, IndexError, TypeError):
        return None
    return None if value is None else float(value)


def _cause(spec: dict, row: str, metric: str) -> str | None:
    causes = spec.get("causes") or {}
    return causes.get(f"{row}/{metric}") or causes.get(row)


def table_cells(table_name: str, result: ConfigResult) -> list[Cell]:
    """The cells of the flow's paper-vs-ours table for ``result`` (all seeds pooled, as in
    ``reproduce.md``), each with the std over seeds (the same :func:`compare` on each seed's replays alone)."""
    spec = paper_tables()[table_name]
    at_load = [r for r in result.replays if math.isclose(r.load, float(spec["load"]))]

    def jobs_by_label(replays: list[Replay]) -> dict[str, list[pd.DataFrame]]:
        out: dict[str, list[pd.DataFrame]] = {}
        for r in replays:
            out.setdefault(r.label, []).append(r.jobs)
        return out

    pooled = compare(table_name, jobs_by_label(at_load))
    per_seed = [compare(table_name, jobs_by_label([r for r in at_load if r.seed == seed]))
                for seed in sorted({r.seed for r in at_load})]
    cells = []
    for row in pooled.index:
        for metric in _metrics(pooled):
            paper, ours = float(pooled.loc[row, f"{metric} paper"]), float(pooled.loc[row, f"{metric} ours"])
            if math.isnan(paper) and math.isnan(ours):
                continue
            values = [float(t.loc[row, f"{metric} ours"]) for t in per_seed if row in t.index]
            values = [v for v in values if not math.isnan(v)]
            std = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
            cells.append(Cell(str(row), metric, paper, ours, std, len(values),
                              _last_recorded(spec, result.name, str(row), metric), _cause(spec, str(row), metric)))
    return cells


def load_sweep(result: ConfigResult) -> dict[tuple[str, str], pd.DataFrame]:
    """(trace, cluster) -> average JCT (hours) per label and load: columns ``mean``, ``std`` (sample,
    over seeds) and ``seeds``, from each replay's job table."""
    rows = pd.DataFrame([{"trace": r.trace, "cluster": r.cluster, "label": r.label, "load": r.load,
                          "seed": r.seed, "jct_h": float(r.jobs["jct_s"].mean()) / HOUR} for r in result.replays])
    out = {}
    if rows.empty:
        return out
    for (trace, cluster), part in rows.groupby(["trace", "cluster"], sort=True):
        stats = part.groupby(["label", "load"])["jct_h"].agg(["mean", "std", "count"])
        out[(str(trace), str(cluster))] = stats.rename(columns={"count": "seeds"})
    return out


# ---- plots ------------------------------------------------------------------------------------------

def _png(fig: Any) -> str:
    """The figure inlined: :func:`plots.figure_png` (the comparison page's PNG) as base64."""
    return base64.b64encode(plots.figure_png(fig)).decode()


def sweep_plot(stats: pd.DataFrame, labels: list[str], figure: str | None, points: dict | None) -> str:
    """Average JCT by load (mean ± std over seeds) per label, the paper's points (hollow markers) when
    it prints them, else a note saying that it does not; a PNG as base64."""
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
    if figure:
        note = ("paper's points: hollow markers" if points else
                "the paper prints no numbers for this figure: no paper points overlaid")
        ax.set_title(f"ours (mean ± std over seeds) vs {figure}\n{note}", fontsize=9)
    else:
        ax.set_title("ours: mean ± std over seeds (no paper figure for this config)", fontsize=9)
    return _png(fig)


def ratio_bars(cells: list[Cell], title: str) -> str:
    """The paper's ratio beside ours (± std over seeds) per row of a ``kind: ratios`` table, with the
    ±30 % band around the paper's; a PNG as base64."""
    cells = [c for c in cells if c.column == "ratio"]
    fig = plots._figure(max(6.0, 0.75 * len(cells) + 2), 4.2)
    ax = fig.add_subplot(111)
    x = np.arange(len(cells))
    paper = [c.paper for c in cells]
    ours = [c.ours for c in cells]
    # bars from 1 (parity with the baseline): their length is the gain the paper claims
    ax.bar(x - 0.2, [p - 1 for p in paper], 0.4, bottom=1.0, label="paper", color="#9e9e9e", edgecolor="#333")
    ax.bar(x + 0.2, [o - 1 for o in ours], 0.4, bottom=1.0, yerr=[0 if math.isnan(c.std) else c.std for c in cells],
           capsize=3, label="ours (mean, ± std over seeds)", color="#1f77b4", edgecolor="#333")
    for i, p in enumerate(paper):
        ax.plot([i - 0.4, i + 0.4], [p * (1 - BAND)] * 2, color="#b3261e", linewidth=0.8, linestyle=":")
        ax.plot([i - 0.4, i + 0.4], [p * (1 + BAND)] * 2, color="#b3261e", linewidth=0.8, linestyle=":")
    ax.axhline(1.0, color="#000", linewidth=0.8)
    ax.set_xticks(x, [c.row for c in cells], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ratio vs the baseline (>1: better)")
    ax.set_title(f"{title}: paper vs ours (dotted: paper ±{BAND:.0%})", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.subplots_adjust(bottom=0.25)
    return _png(fig)


# ---- HTML -------------------------------------------------------------------------------------------

def _num(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    return f"{value:.{3 if magnitude < 0.1 and value != 0 else digits}f}"


def _mean_std(mean: float, std: float) -> str:
    """``mean ± std``; the mean alone with one seed, — when not replayed."""
    if math.isnan(mean):
        return "—"
    return _num(mean) + ("" if math.isnan(std) else f" ± {_num(std)}")


def _gain(cell: Cell) -> str:
    """A ratio's gain over its baseline (ratio - 1, %), the paper's / ours."""
    def pct(v: float) -> str:
        return "—" if math.isnan(v) else f"{(v - 1) * 100:+.0f} %"

    return f"<td class='n'>{pct(cell.paper)} / {pct(cell.ours)}</td>"


def _mark(cell: Cell) -> str:
    if cell.within is None:
        return "<span class='na'>n/a</span>"
    return "<span class='ok'>✓ within</span>" if cell.within else "<span class='miss'>✗ miss</span>"


def _page(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>" + "\n".join(body)
            + "</body></html>\n")


def _run_list(result: ConfigResult, uri: str) -> str:
    """The replay runs the numbers come from, by label and seed."""
    items = []
    for r in sorted(result.replays, key=lambda r: (r.label, r.load, r.seed)):
        link = run_url(uri, result.experiment_id, r.run_id)
        items.append(f"<tr><td>{html.escape(r.label)}</td><td class='n'>{r.load:g}</td><td class='n'>{r.seed}</td>"
                     f"<td>{html.escape(r.trace)} / {html.escape(r.cluster)}</td>"
                     f"<td><a href='{html.escape(link)}'><code>{r.run_id}</code></a></td></tr>")
    return ("<details><summary>the " + str(len(result.replays)) + " replay runs these numbers come from (MLflow"
            f" experiment <code>{html.escape(result.name)}</code>, id {result.experiment_id})</summary>"
            "<table><thead><tr><th>label</th><th>load</th><th>seed</th><th>trace / cluster</th><th>MLflow run"
            "</th></tr></thead><tbody>" + "".join(items) + "</tbody></table></details>")


def _cells_table(cells: list[Cell], spec: dict, unit: str) -> str:
    rows_meta = spec.get("rows") or {}
    gains = spec.get("kind") == "ratios"
    out = [f"<table><thead><tr><th>row</th><th>column</th><th>paper</th><th>ours: mean ± std ({unit})</th>"
           "<th>seeds</th><th>ours / paper</th><th>±30 %</th>" + ("<th>gain: paper / ours</th>" if gains else "")
           + "<th>measured cause of the miss (tables.yaml"
           " <code>causes:</code>)</th><th>last recorded (tables.yaml <code>measured:</code>, not this run)</th>"
           "</tr></thead><tbody>"]
    previous = None
    for cell in cells:
        first = cell.row != previous
        previous = cell.row
        meta = rows_meta.get(cell.row)
        detail = ""
        if isinstance(meta, dict) and "metric" in meta:  # kind: ratios
            detail = f"<br><span class='detail'>{html.escape(meta['metric'])}: {html.escape(meta['baseline'])} vs" \
                     f" {html.escape(meta['policy'])}, {html.escape(meta.get('where', ''))}</span>"
        ours = "not replayed" if math.isnan(cell.ours) else _mean_std(cell.ours, cell.std)
        if cell.cause and cell.within is not False:  # recorded for a miss that this run does not show
            cause = f"<span class='na'>{'within' if cell.within else 'not compared'} here; recorded:" \
                    f" {html.escape(cell.cause)}</span>"
        elif cell.within is False:
            cause = html.escape(cell.cause) if cell.cause else "<span class='na'>no measured cause recorded</span>"
        else:
            cause = ""
        out.append(f"<tr class='{'first' if first else ''}' data-row='{html.escape(cell.row)}'"
                   f" data-column='{html.escape(cell.column)}'><td class='row'>{html.escape(cell.row) if first else ''}"
                   f"{detail if first else ''}</td><td>{html.escape(cell.column)}</td>"
                   f"<td class='n'>{_num(cell.paper)}</td><td class='n'>{ours}</td><td class='n'>{cell.seeds}</td>"
                   f"<td class='n'>{_num(cell.ratio)}</td><td>{_mark(cell)}</td>{_gain(cell) if gains else ''}"
                   f"<td class='cause'>{cause}</td><td class='n last'>{_num(cell.last)}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _calibration(spec: dict, experiment: str | None = None) -> str:
    """The calibrated parameters of the whole table (``experiment`` None) or of one config's set-up."""
    entries = [e for e in spec.get("calibration") or [] if e.get("experiment") == experiment]
    if not entries:
        if experiment is not None:
            return ""
        return ("<p><b>Calibrated parameters:</b> none recorded in <code>conf/papers/tables.yaml</code>"
                " (<code>calibration:</code>) for this table's common set-up.</p>")
    rows = "".join(f"<tr><td>{html.escape(str(e['name']))}</td><td>{html.escape(str(e['value']))}</td>"
                   f"<td>{html.escape(str(e['fitted_to']))}</td><td>{html.escape(str(e.get('note', '')))}</td></tr>"
                   for e in entries)
    scope = "" if experiment is None else f" of {html.escape(experiment)}"
    return (f"<p><b>Calibrated parameters{scope}</b> (fitted to the paper's numbers: a match on the row they were"
            " fitted to is by construction):</p><table><thead><tr><th>parameter</th><th>value</th><th>fitted to row"
            f"</th><th>how</th></tr></thead><tbody>{rows}</tbody></table>")


def _order(cells: list[Cell], spec: dict) -> str:
    """The rows' order on the table's first column (``classes`` tables: average JCT of all jobs), the
    paper's beside ours, and the longest run of rows kept in the paper's order."""
    if spec.get("kind", "classes") != "classes":
        return ""
    column = spec["columns"][0]
    first = [c for c in cells if c.column == column]
    order = RowOrder.of({c.row: c.paper for c in first}, {c.row: c.ours for c in first})
    if len(order.paper) < 2:
        return ""
    chain = lambda rows: " &lt; ".join(html.escape(r) for r in rows)  # noqa: E731
    return (f"<p class='meta'><b>Order</b> on {html.escape(column)}, lowest first: paper {chain(order.paper)};"
            f" ours {chain(order.ours)}. Longest run in the paper's order: {chain(order.kept)}"
            f" (<b>{len(order.kept)} of {len(order.paper)}</b> rows).</p>")


def _unit(spec: dict) -> str:
    kind = spec.get("kind", "classes")
    return {"classes": "hours", "ratios": "ratio", "schemes": "s, usage 0-1, ratios"}.get(kind, "")


@dataclass(frozen=True)
class Summary:
    """A config's standing on one table: numbers compared, within the band, misses with a recorded
    cause, not compared (not replayed, paper 0 or NA)."""

    judged: int
    within: int
    explained: int
    not_compared: int

    @classmethod
    def of(cls, cells: list[Cell]) -> Summary:
        judged = [c for c in cells if c.within is not None]
        return cls(len(judged), sum(bool(c.within) for c in judged),
                   sum(c.within is False and c.cause is not None for c in judged), len(cells) - len(judged))


def _sweep_section(result: ConfigResult, spec: dict | None) -> list[str]:
    sweep = (spec or {}).get("load_sweep") or {}
    out = []
    for (trace, cluster), stats in load_sweep(result).items():
        if len(stats.index.get_level_values("load").unique()) < 2:
            continue
        png = sweep_plot(stats, result.labels, sweep.get("figure"), sweep.get("points"))
        caption = (f"{html.escape(result.name)}: average JCT by load factor on trace {html.escape(trace)}, cluster"
                   f" {html.escape(cluster)}; ours = mean ± sample std over seeds of each replay's average JCT.")
        if sweep and not sweep.get("points"):
            caption += f" {html.escape(sweep['figure'])}: the paper prints no numbers, so none are overlaid."
        wide = stats["mean"].unstack("load")
        spread = stats["std"].unstack("load")
        head = "".join(f"<th>load {load:g}</th>" for load in wide.columns)
        body = "".join("<tr><td>" + html.escape(label) + "</td>" + "".join(
            f"<td class='n'>{_mean_std(wide.loc[label, load], spread.loc[label, load])}</td>"
            for load in wide.columns) + "</tr>" for label in result.labels if label in wide.index)
        out += [f"<figure><img alt='load sweep' src='data:image/png;base64,{png}'><figcaption>{caption}"
                "</figcaption></figure>",
                f"<table><thead><tr><th>average JCT (h), mean ± std</th>{head}</tr></thead>"
                f"<tbody>{body}</tbody></table>"]
    return out


def table_page(table_name: str, results: list[ConfigResult], uri: str,
               header: list[str]) -> tuple[str, dict[str, Summary]]:
    """One paper table's page and, per config, its :class:`Summary`."""
    spec = paper_tables()[table_name]
    body = [*header, f"<h1>{html.escape(table_name)} ({html.escape(spec.get('kind', 'classes'))}), load"
            f" {spec['load']}</h1>", _calibration(spec)]
    summary: dict[str, Summary] = {}
    for result in results:
        cells = table_cells(table_name, result)
        s = summary[result.name] = Summary.of(cells)
        parent = f" (comparison run <code>{result.parent_run_id}</code>)" if result.parent_run_id else ""
        body += [f"<h2>{html.escape(result.name)}: {html.escape(result.description)}</h2>",
                 f"<p class='meta'>Seeds {result.seeds}{parent}: {s.within} of {s.judged} compared numbers within"
                 f" ±{BAND:.0%} of the paper's; {s.judged - s.within} misses, {s.explained} of them with a measured"
                 f" cause recorded ({s.not_compared} not compared: not replayed, or the paper's value is 0 or"
                 " NA).</p>", _order(cells, spec), _calibration(spec, result.name),
                 _cells_table(cells, spec, _unit(spec))]
        if spec.get("kind") == "ratios":
            body.append(f"<p class='meta'>A ratio within ±{BAND:.0%} can still fall short of the paper's gain: the"
                        " column <i>gain</i> gives ratio − 1, the paper's and ours (the bars below start at 1).</p>")
        if spec.get("kind") == "ratios" and any(not math.isnan(c.ours) for c in cells):
            png = ratio_bars(cells, table_name)
            body.append(f"<figure><img alt='ratios' src='data:image/png;base64,{png}'><figcaption>"
                        f"{html.escape(table_name)}: the paper's ratios (grey) and ours (blue, seed means; whisker ±"
                        " std of the per-seed ratios).</figcaption></figure>")
        body += _sweep_section(result, spec)
        body.append(_run_list(result, uri))
    return _page(table_name, body), summary


def write_report(out: Path, results: list[ConfigResult], *, parent_run_id: str, experiment_id: str,
                 tracking_uri: str, code_version: str, stamp: datetime) -> list[Path]:
    """Write ``index.html`` and one page per paper table compared in this run (plus a load-sweep page
    per config without a paper table) into ``out``; the pages written, index first."""
    out.mkdir(parents=True, exist_ok=True)
    header = [f"<p class='meta'><a href='index.html'>index</a> · reproduce run <code>{parent_run_id}</code> ·"
              f" code {html.escape(code_version)} · {stamp:%Y-%m-%d %H:%M} UTC</p>"]
    by_table: dict[str, list[ConfigResult]] = {}
    for result in results:
        for name, spec in tables_for_experiment(result.name).items():
            if spec.get("kind") != "figures":
                by_table.setdefault(name, []).append(result)
    pages: list[Path] = []
    links = []
    for name, compared in by_table.items():
        text, summary = table_page(name, compared, tracking_uri, header)
        path = out / f"{settings.path_name(name)}.html"
        path.write_text(text)
        pages.append(path)
        figure = (paper_tables()[name].get("load_sweep") or {}).get("figure") or "average JCT by load"
        sweep = ", ".join(what for alt, what in (("load sweep", figure), ("ratios", "the ratios, paper vs ours"))
                          if f"alt='{alt}'" in text)
        for config, s in summary.items():
            links.append(f"<tr><td><a href='{path.name}'>{html.escape(name)}</a></td><td>{html.escape(config)}</td>"
                         f"<td class='n'>{s.within} / {s.judged}</td><td class='n'>{s.judged - s.within}</td>"
                         f"<td class='n'>{s.explained}</td><td class='n'>{s.not_compared}</td>"
                         f"<td>{html.escape(sweep)}</td></tr>")
    for result in results:
        if any(result in compared for compared in by_table.values()):
            continue
        path = out / f"{settings.path_name(result.name)}-load-sweep.html"
        path.write_text(_page(result.name, [*header, f"<h1>{html.escape(result.name)}: load sweep</h1>",
                                            *_sweep_section(result, None), _run_list(result, tracking_uri)]))
        pages.append(path)
        links.append(f"<tr><td><a href='{path.name}'>{html.escape(result.name)} load sweep</a></td>"
                     f"<td>{html.escape(result.name)}</td><td colspan='4'>no paper table</td><td>average JCT by load"
                     "</td></tr>")
    configs = "".join(
        f"<li><code>{html.escape(r.name)}</code>: seeds {r.seeds}, {len(r.replays)} finished replays, comparison"
        f" run <code>{r.parent_run_id or '—'}</code> (MLflow experiment id {r.experiment_id})</li>" for r in results)
    parent_link = run_url(tracking_uri, experiment_id, parent_run_id)
    index = [f"<h1>Paper vs ours: reproduction report ({stamp:%Y-%m-%d})</h1>",
             f"<p>Every <b>ours</b> number is computed from the <code>jobs.parquet</code> of the MLflow replay runs"
             f" of this invocation (each page lists them); the parent run is <code>{parent_run_id}</code> in"
             f" experiment <code>reproduce</code> (<a href='{html.escape(parent_link)}'>"
             f"MLflow</a>), tracking store <code>{html.escape(tracking_uri)}</code>, code version"
             f" <code>{html.escape(code_version)}</code>. Ours = mean ± sample std over seeds; a number is"
             f" <b>within</b> when ours / paper is within 1 ± {BAND:.0%}. Values under \"last recorded\" are"
             " <code>conf/papers/tables.yaml</code>'s <code>measured:</code> blocks, shown for drift only.</p>",
             f"<ul>{configs}</ul>",
             "<table class='summary'><thead><tr><th>page</th><th>config</th><th>within ±30 %</th><th>misses</th>"
             "<th>misses with a measured cause</th><th>not compared</th><th>plots on the page</th></tr></thead>"
             f"<tbody>{''.join(links)}</tbody></table>"]
    index_path = out / "index.html"
    index_path.write_text(_page("reproduction report", index))
    return [index_path, *pages]


__all__ = ["BAND", "Cell", "ConfigResult", "Replay", "load_sweep", "table_cells", "write_report"]
