"""The reproduction report (``schedlab reproduce --report DIR``): static HTML a reader
can check without reading code.

``index.html`` names the run (the parent ``reproduce`` MLflow run, each experiment's comparison run,
the code version, the seeds) and links one page per paper table of ``conf/papers/tables.yaml`` that
the run compared with. A table's page has, per config compared with it, one line per (row, column):
the paper's value, ours as the mean ± sample std over seeds and their number, ours / paper and whether
that is within :data:`BAND` (±30 %), the ratio to the baseline row, the paper's beside ours
(``classes`` tables), the paired comparison with the baseline over seeds
(:mod:`schedlab.sched.reporting.paper_paired`), the measured cause of a miss (``causes:``) by number,
each cause printed once at the page's end (:class:`Causes`), the value ``measured:`` last recorded
with its seeds (a separate, labelled column: never shown as ours); the Order line (adjacent rows
separated at 95 % or not), and the table's ``calibration:`` (parameters fitted to one of its rows).
Plots (PNG, embedded): a figure for every set-up of the config
(:func:`schedlab.sched.reporting.paper_setups.setup_section`: the load sweep, the bars over the
baseline) and, for ``kind: ratios`` tables (Gimbal §7.2 Fig. 8-9, §7.3 Fig. 12 ablation), the
paper's ratios beside ours.

Every "ours" number is computed here from the job tables (``jobs.parquet``) of the MLflow replay runs
the page lists, with :func:`schedlab.sched.reporting.paper_tables.compare`, the function of the flow's
``reproduce.md``: the pooled table (every seed) gives the mean, the same table per seed the std.
Ratios of ``kind: ratios`` tables are, as in the paper and ``reproduce.md``, baseline / policy of the
seed means; their ± is the std of the per-seed ratios.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from schedlab import settings
from schedlab.sched.reporting import paper_figures, paper_paired
from schedlab.sched.reporting.mlflow_view import run_url
from schedlab.sched.reporting.paired import Paired
from schedlab.sched.reporting.paper_paired import Unit
from schedlab.sched.reporting.paper_setups import mean_std, num, setup_section
from schedlab.sched.reporting.paper_tables import RATIO_METRICS, RowOrder, compare, paper_tables, tables_for_experiment

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
td.pair{font-size:12px;white-space:nowrap}ol.causes li{max-width:1100px;margin:.3em 0}
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
    baseline: str | None = None  # the config's baseline label (None: its first label)
    paired_method: str = "t"  # the config's ``paired_interval``: t or bootstrap

    @property
    def baseline_label(self) -> str:
        return self.baseline or self.labels[0]

    @classmethod
    def collect(cls, config: Any, specs: list[Any], jobs: dict[str, pd.DataFrame], run_ids: dict[str, str],
                experiment_id: str, parent_run_id: str | None) -> ConfigResult:
        """From the config, its grid and the finished replays' job tables and run ids (by spec key)."""
        replays = [Replay(s.label, s.seed, s.load, s.trace, s.cluster, run_ids[s.key], jobs[s.key])
                   for s in specs if s.key in jobs]
        return cls(config.name, config.description or "", list(config.seeds), experiment_id, parent_run_id,
                   replays, list(dict.fromkeys(s.label for s in specs)), config.baseline_label,
                   config.paired_interval)


@dataclass(frozen=True)
class Cell:
    """One compared number: a (row, column) of a paper table, ours over the replay units (trace,
    cluster, seed) that have it; the baseline row's values on the same column (``classes`` tables), the
    paired comparison with the baseline, and the value ``measured:`` last recorded with its seeds."""

    row: str
    column: str
    paper: float
    ours: float
    std: float
    seeds: int
    last: float | None
    cause: str | None
    last_seeds: int | None = None
    base_paper: float = math.nan
    base_ours: float = math.nan
    vs_baseline: Paired | None = None
    units: dict[Unit, float] = field(default_factory=dict, repr=False, compare=False)
    base_units: dict[Unit, float] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ratio(self) -> float:
        ok = math.isfinite(self.ours) and math.isfinite(self.paper) and self.paper > 0
        return self.ours / self.paper if ok else math.nan

    @property
    def within(self) -> bool | None:
        """|ours / paper - 1| <= BAND; None when there is no ratio (not replayed, paper 0 or NA)."""
        return None if math.isnan(self.ratio) else abs(self.ratio - 1) <= BAND + 1e-12

    @property
    def paper_vs_base(self) -> float:
        """The paper's value over its baseline row's (NaN without one)."""
        return _over(self.paper, self.base_paper)

    @property
    def ours_vs_base(self) -> float:
        """Ours (mean over units) over the baseline's mean on the same units, as the paired difference
        reads it: 1 + mean difference / baseline mean."""
        both = [u for u in self.units if u in self.base_units]
        if self.vs_baseline is None or not both:
            return _over(self.ours, self.base_ours)
        base = float(np.mean([self.base_units[u] for u in both]))
        return _over(base + self.vs_baseline.mean, base)


def _over(value: float, base: float) -> float:
    return value / base if math.isfinite(value) and math.isfinite(base) and base > 0 else math.nan


def _metrics(frame: pd.DataFrame) -> list[str]:
    """The compared columns of a :func:`compare` table: each ``<m> ours`` with a ``<m> paper``."""
    return [c.removesuffix(" ours") for c in frame.columns
            if c.endswith(" ours") and f"{c.removesuffix(' ours')} paper" in frame.columns]


def _last_recorded(spec: dict, experiment: str, row: str, metric: str) -> tuple[float | None, int | None]:
    """The value ``measured:`` last recorded for this cell (not this run's), when tables.yaml has one,
    and the seeds it is a mean of (``measured.<config>.seeds``, or the table's ``measured_seeds``)."""
    measured = spec.get("measured") or {}
    kind = spec.get("kind", "classes")
    columns = list(spec.get("columns") or [])
    seeds = spec.get("measured_seeds")
    try:
        if kind == "classes":
            value = measured[experiment]["rows"][row][columns.index(metric)]
            seeds = measured[experiment].get("seeds")
        elif kind == "ratios":
            value = measured[row] if metric == "ratio" else None
        elif kind == "schemes":
            value = measured[row][columns.index(metric)]
        else:
            value = None
    except (KeyError, ValueError, IndexError, TypeError):
        return None, None
    return (None, None) if value is None else (float(value), seeds)


def _cause(spec: dict, row: str, metric: str) -> str | None:
    causes = spec.get("causes") or {}
    return causes.get(f"{row}/{metric}") or causes.get(row)


def _lower_is_better(spec: dict, row: str, metric: str) -> bool:
    """The direction of a compared number: times, counts of preemptions lower; GPU usage and deadlines
    met higher."""
    if spec.get("kind") == "ratios":
        return RATIO_METRICS[spec["rows"][row]["metric"]]
    return not metric.startswith("usage")


def unit_tables(table_name: str, replays: list[Replay]) -> dict[Unit, pd.DataFrame]:
    """The flow's table (:func:`compare`) of each replay unit (trace, cluster, seed) alone."""
    units: dict[Unit, dict[str, list[pd.DataFrame]]] = {}
    for r in replays:
        units.setdefault((r.trace, r.cluster, r.seed), {}).setdefault(r.label, []).append(r.jobs)
    return {unit: compare(table_name, by_label) for unit, by_label in sorted(units.items())}


def _values(units: dict[Unit, pd.DataFrame], row: str, column: str) -> dict[Unit, float]:
    out = {}
    for unit, table in units.items():
        if row in table.index and column in table.columns:
            value = float(table.loc[row, column])
            if not math.isnan(value):
                out[unit] = value
    return out


def table_cells(table_name: str, result: ConfigResult) -> list[Cell]:
    """The cells of the flow's paper-vs-ours table for ``result`` (all seeds pooled, as in
    ``reproduce.md``), each with the std over replay units (the same :func:`compare` on each unit's
    replays alone) and its paired comparison with the baseline: the config's baseline row on the same
    column (``classes``, ``schemes`` tables), the row's own baseline on its metric (``ratios``)."""
    spec = paper_tables()[table_name]
    at_load = [r for r in result.replays if math.isclose(r.load, float(spec["load"]))]
    by_label: dict[str, list[pd.DataFrame]] = {}
    for r in at_load:
        by_label.setdefault(r.label, []).append(r.jobs)
    pooled = compare(table_name, by_label)
    units = unit_tables(table_name, at_load)
    kind = spec.get("kind", "classes")
    base = spec.get("baseline", result.baseline_label) if kind == "schemes" else result.baseline_label
    cells = []
    for row in pooled.index:
        for metric in _metrics(pooled):
            paper, ours = float(pooled.loc[row, f"{metric} paper"]), float(pooled.loc[row, f"{metric} ours"])
            if math.isnan(paper) and math.isnan(ours):
                continue
            values = _values(units, str(row), f"{metric} ours")
            std = float(np.std(list(values.values()), ddof=1)) if len(values) > 1 else math.nan
            higher = not _lower_is_better(spec, str(row), metric)
            base_paper = base_ours = math.nan
            vs, base_units = None, {}
            if kind == "ratios":
                meta = spec["rows"][row]
                vs = paper_paired.pair(_values(units, str(row), "policy ours"), _values(units, str(row), "baseline ours"),
                                       meta["baseline"], higher, result.paired_method)
            elif " vs " not in metric and base in pooled.index:
                base_units = _values(units, base, f"{metric} ours")
                base_ours = float(pooled.loc[base, f"{metric} ours"])
                base_paper = float(pooled.loc[base, f"{metric} paper"]) if kind == "classes" else math.nan
                if str(row) != base:
                    vs = paper_paired.pair(values, base_units, base, higher, result.paired_method)
            last, last_seeds = _last_recorded(spec, result.name, str(row), metric)
            cells.append(Cell(str(row), metric, paper, ours, std, len(values), last, _cause(spec, str(row), metric),
                              last_seeds, base_paper, base_ours, vs, values, base_units))
    return cells


# ---- HTML -------------------------------------------------------------------------------------------

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


class Causes:
    """The measured causes of a page, each printed once (numbered, at the page's end) and referenced by
    number from every cell it explains (tables.yaml anchors one text to many cells)."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def ref(self, text: str) -> str:
        number = self.numbers.setdefault(text, len(self.numbers) + 1)
        return f"<a href='#cause-{number}'>[{number}]</a>"

    def section(self) -> str:
        if not self.numbers:
            return ""
        items = "".join(f"<li id='cause-{n}'>{html.escape(text)}</li>" for text, n in self.numbers.items())
        return ("<h2>Measured causes of misses</h2><p class='meta'>From <code>conf/papers/tables.yaml</code>"
                " (<code>causes:</code>); each is printed once and referenced by its number from the cells it"
                f" explains.</p><ol class='causes'>{items}</ol>")


def _paired_unit(spec: dict, row: str, metric: str) -> str:
    if spec.get("kind") == "ratios":
        return "jobs" if spec["rows"][row]["metric"] == "deadline_met" else "h"
    if spec.get("kind") == "schemes":
        return "s" if metric.endswith("_s") else ""
    return "h"


def _last(cell: Cell) -> str:
    if cell.last is None:
        return "—"
    return f"{num(cell.last)} ({cell.last_seeds} seeds)" if cell.last_seeds else f"{num(cell.last)} (seeds not recorded)"


def _cells_table(cells: list[Cell], spec: dict, unit: str, causes: Causes, baseline: str) -> str:
    rows_meta = spec.get("rows") or {}
    gains = spec.get("kind") == "ratios"
    classes = spec.get("kind", "classes") == "classes"
    vs = "the row's baseline" if gains else html.escape(spec.get("baseline", baseline) if spec.get("kind") == "schemes"
                                                         else baseline)
    out = [f"<table><thead><tr><th>row</th><th>column</th><th>paper</th><th>ours: mean ± std ({unit})</th>"
           "<th>seeds</th><th>ours / paper</th><th>±30 %</th>" + ("<th>gain: paper / ours</th>" if gains else "")
           + (f"<th>÷ {vs}: paper / ours</th>" if classes else "")
           + f"<th>paired vs {vs}: ours − {vs}, 95 % interval, wins / seeds, verdict</th>"
           "<th>measured cause of the miss (numbered below)</th>"
           "<th>last recorded (tables.yaml <code>measured:</code>, not this run; its seeds)</th></tr></thead><tbody>"]
    previous = None
    for cell in cells:
        first = cell.row != previous
        previous = cell.row
        meta = rows_meta.get(cell.row)
        detail = ""
        if isinstance(meta, dict) and "metric" in meta:  # kind: ratios
            detail = f"<br><span class='detail'>{html.escape(meta['metric'])}: {html.escape(meta['baseline'])} vs" \
                     f" {html.escape(meta['policy'])}, {html.escape(meta.get('where', ''))}</span>"
        ours = "not replayed" if math.isnan(cell.ours) else mean_std(cell.ours, cell.std)
        if cell.cause and cell.within is not False:  # recorded for a miss that this run does not show
            cause = f"<span class='na'>{'within' if cell.within else 'not compared'} here; recorded:" \
                    f" {causes.ref(cell.cause)}</span>"
        elif cell.within is False:
            cause = causes.ref(cell.cause) if cell.cause else "<span class='na'>no measured cause recorded</span>"
        else:
            cause = ""
        base = (f"<td class='n'>{num(cell.paper_vs_base)} / {num(cell.ours_vs_base)}</td>" if classes else "")
        pair = paper_paired.cell(cell.vs_baseline, _paired_unit(spec, cell.row, cell.column))
        out.append(f"<tr class='{'first' if first else ''}' data-row='{html.escape(cell.row)}'"
                   f" data-column='{html.escape(cell.column)}'><td class='row'>{html.escape(cell.row) if first else ''}"
                   f"{detail if first else ''}</td><td>{html.escape(cell.column)}</td>"
                   f"<td class='n'>{num(cell.paper)}</td><td class='n'>{ours}</td><td class='n'>{cell.seeds}</td>"
                   f"<td class='n'>{num(cell.ratio)}</td><td>{_mark(cell)}</td>{_gain(cell) if gains else ''}{base}"
                   f"<td class='pair'>{html.escape(pair)}</td>"
                   f"<td class='cause'>{cause}</td><td class='n last'>{_last(cell)}</td></tr>")
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


def _order(cells: list[Cell], spec: dict, method: str) -> str:
    """The rows' order on the table's first column (``classes`` tables: average JCT of all jobs), the
    paper's beside ours, ours with each adjacent pair marked separated (``<``) or not (``≈``) at 95 %,
    paired over seeds, and the longest run of rows kept in the paper's order."""
    if spec.get("kind", "classes") != "classes":
        return ""
    column = spec["columns"][0]
    first = [c for c in cells if c.column == column]
    order = RowOrder.of({c.row: c.paper for c in first}, {c.row: c.ours for c in first})
    if len(order.paper) < 2:
        return ""
    plain = lambda rows: " &lt; ".join(html.escape(r) for r in rows)  # noqa: E731
    ours, pairs = paper_paired.chain(order.ours, {c.row: c.units for c in first}, method)
    return (f"<p class='meta'><b>Order</b> on {html.escape(column)}, lowest first: paper {plain(order.paper)};"
            f" ours {ours} ({paper_paired.chain_note(pairs, method)}). Longest run in the paper's order:"
            f" {plain(order.kept)} (<b>{len(order.kept)} of {len(order.paper)}</b> rows).</p>")


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


def table_page(table_name: str, results: list[ConfigResult], uri: str,
               header: list[str]) -> tuple[str, dict[str, Summary]]:
    """One paper table's page and, per config, its :class:`Summary`."""
    spec = paper_tables()[table_name]
    body = [*header, f"<h1>{html.escape(table_name)} ({html.escape(spec.get('kind', 'classes'))}), load"
            f" {spec['load']}</h1>", _calibration(spec)]
    summary: dict[str, Summary] = {}
    causes = Causes()
    for result in results:
        cells = table_cells(table_name, result)
        s = summary[result.name] = Summary.of(cells)
        parent = f" (comparison run <code>{result.parent_run_id}</code>)" if result.parent_run_id else ""
        body += [f"<h2>{html.escape(result.name)}: {html.escape(result.description)}</h2>",
                 f"<p class='meta'>Seeds {result.seeds}{parent}: {s.within} of {s.judged} compared numbers within"
                 f" ±{BAND:.0%} of the paper's; {s.judged - s.within} misses, {s.explained} of them with a measured"
                 f" cause recorded ({s.not_compared} not compared: not replayed, or the paper's value is 0 or"
                 " NA).</p>", _order(cells, spec, result.paired_method), _calibration(spec, result.name),
                 _cells_table(cells, spec, _unit(spec), causes, result.baseline_label)]
        if spec.get("kind") == "ratios":
            body.append(f"<p class='meta'>A ratio within ±{BAND:.0%} can still fall short of the paper's gain: the"
                        " column <i>gain</i> gives ratio − 1, the paper's and ours (the bars below start at 1).</p>")
        if spec.get("kind") == "ratios" and any(not math.isnan(c.ours) for c in cells):
            shown = [c for c in cells if c.column == "ratio"]
            png = paper_figures.ratio_bars([c.row for c in shown], [c.paper for c in shown], [c.ours for c in shown],
                                           [c.std for c in shown], [c.seeds for c in shown], table_name, BAND)
            body.append(f"<figure><img alt='ratios' src='data:image/png;base64,{png}'><figcaption>"
                        f"{html.escape(table_name)}: the paper's ratios (grey) and ours (blue, seed means; whisker ±"
                        " std of the per-seed ratios; the seeds of each in the table above).</figcaption></figure>")
        body += setup_section(result, spec)
        body.append(_run_list(result, uri))
    body.append(causes.section())
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
        sweep = _plots_on(text, figure)
        for config, s in summary.items():
            links.append(f"<tr><td><a href='{path.name}'>{html.escape(name)}</a></td><td>{html.escape(config)}</td>"
                         f"<td class='n'>{s.within} / {s.judged}</td><td class='n'>{s.judged - s.within}</td>"
                         f"<td class='n'>{s.explained}</td><td class='n'>{s.not_compared}</td>"
                         f"<td>{html.escape(sweep)}</td></tr>")
    for result in results:
        if any(result in compared for compared in by_table.values()):
            continue
        path = out / f"{settings.path_name(result.name)}-load-sweep.html"
        text = _page(result.name, [*header, f"<h1>{html.escape(result.name)}: average JCT by set-up</h1>",
                                   *setup_section(result, None), _run_list(result, tracking_uri)])
        path.write_text(text)
        pages.append(path)
        links.append(f"<tr><td><a href='{path.name}'>{html.escape(result.name)} by set-up</a></td>"
                     f"<td>{html.escape(result.name)}</td><td colspan='4'>no paper table</td>"
                     f"<td>{html.escape(_plots_on(text, 'average JCT by load'))}</td></tr>")
    configs = "".join(
        f"<li><code>{html.escape(r.name)}</code>: seeds {r.seeds}, {len(r.replays)} finished replays, comparison"
        f" run <code>{r.parent_run_id or '—'}</code> (MLflow experiment id {r.experiment_id})</li>" for r in results)
    parent_link = run_url(tracking_uri, experiment_id, parent_run_id)
    index = [f"<h1>Paper vs ours: reproduction report ({stamp:%Y-%m-%d})</h1>",
             f"<p>Every <b>ours</b> number is computed from the <code>jobs.parquet</code> of the MLflow replay runs"
             f" of this invocation (each page lists them); the parent run is <code>{parent_run_id}</code> in"
             f" experiment <code>reproduce</code> (<a href='{html.escape(parent_link)}'>"
             f"MLflow</a>), tracking store <code>{html.escape(tracking_uri)}</code>, code version"
             f" <code>{html.escape(code_version)}</code>. Ours = mean ± sample std over seeds (their number beside"
             f" every mean); a number is <b>within</b> when ours / paper is within 1 ± {BAND:.0%}. Policies are"
             " compared <b>paired</b> over seeds (each seed replays the same trace under every policy): the mean"
             " difference, its 95 % interval (Student t, or the bootstrap where a config sets"
             " <code>paired_interval: bootstrap</code>), the seeds won and a verdict; the <b>Order</b> lines mark"
             " each adjacent pair &lt; (separated at 95 %) or ≈ (not). Values under \"last recorded\" are"
             " <code>conf/papers/tables.yaml</code>'s <code>measured:</code> blocks with their seeds, shown for"
             " drift only.</p>",
             f"<ul>{configs}</ul>",
             "<table class='summary'><thead><tr><th>page</th><th>config</th><th>within ±30 %</th><th>misses</th>"
             "<th>misses with a measured cause</th><th>not compared</th><th>plots on the page</th></tr></thead>"
             f"<tbody>{''.join(links)}</tbody></table>"]
    index_path = out / "index.html"
    index_path.write_text(_page("reproduction report", index))
    return [index_path, *pages]


def _plots_on(page: str, sweep: str) -> str:
    """The figures a page shows, named for the index."""
    return ", ".join(what for alt, what in (("load sweep", sweep), ("ratios", "the ratios, paper vs ours"),
                                            ("baseline bars", "average JCT over the baseline, paired"),
                                            ("average bars", "average JCT, no baseline replayed"))
                     if f"alt='{alt}'" in page)


__all__ = ["BAND", "Causes", "Cell", "ConfigResult", "Replay", "table_cells", "unit_tables", "write_report"]
