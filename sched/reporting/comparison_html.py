"""``comparison.html``: the experiment's comparison as one self-contained page.

No network: styles, the sorting script and the seed strips are inline (SVG), figures are PNG data
URIs. The ranked table is open on the page (not behind a "show more"), each policy's colour is the
one of its plots (:func:`schedlab.sched.reporting.plots.policy_styles`), and the ranking metric has a strip per
row on a scale shared by all rows: the seed mean (dot), ± the sample std (whisker), each seed (small
dot) and the baseline's mean (line).
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from schedlab.sched.reporting import compare

STRIP_W, STRIP_H = 240, 22
#: the strips' scale spans the policies within this fraction of the best (an arrow for the others)
LEADERS = 0.25

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.2em;color:#222}
h1{font-size:1.3em;margin:0 0 .3em}p.meta{color:#555;margin:.2em 0 .8em;font-size:.9em}
table{border-collapse:collapse;font-size:13px}th,td{padding:3px 8px;border-bottom:1px solid #e3e3e3;white-space:nowrap}
th{background:#f3f3f3;cursor:pointer;position:sticky;top:0;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr:hover td{background:#f7fbff}.sw{display:inline-block;width:11px;height:11px;border:1px solid #333;margin-right:5px;vertical-align:-1px}
tr.base td{font-weight:600}.tie{color:#b35c00}figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:.85em;color:#555}
"""

_JS = """
document.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
var tb=th.closest('table').tBodies[0],rows=Array.from(tb.rows),asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
rows.sort(function(a,b){var x=a.cells[i].dataset.v,y=b.cells[i].dataset.v;
var nx=parseFloat(x),ny=parseFloat(y);if(!isNaN(nx)&&!isNaN(ny))return asc?nx-ny:ny-nx;
x=a.cells[i].textContent;y=b.cells[i].textContent;return asc?x.localeCompare(y):y.localeCompare(x)});
rows.forEach(function(r){tb.appendChild(r)})})});
"""


def _strip(mean: float, std: float, seeds: Sequence[float], base: float, lo: float, hi: float, colour: str) -> str:
    """An inline SVG: mean dot, ± std whisker, seed dots, the baseline's line; x from ``lo`` to ``hi``."""
    if math.isnan(mean) or hi <= lo:
        return ""

    def x(v: float) -> float:
        return 6 + (STRIP_W - 12) * (min(max(v, lo), hi) - lo) / (hi - lo)

    mid = STRIP_H / 2
    parts = [f'<svg width="{STRIP_W}" height="{STRIP_H}" xmlns="http://www.w3.org/2000/svg">']
    if not math.isnan(base) and lo <= base <= hi:  # the baseline's line when it is on the scale
        parts.append(f'<line x1="{x(base):.1f}" x2="{x(base):.1f}" y1="1" y2="{STRIP_H - 1}" stroke="#000" '
                     'stroke-dasharray="2,2"/>')
    if std > 0:
        parts.append(f'<line x1="{x(mean - std):.1f}" x2="{x(mean + std):.1f}" y1="{mid}" y2="{mid}" '
                     'stroke="#333" stroke-width="1.5"/>')
    for v in seeds:
        parts.append(f'<circle cx="{x(v):.1f}" cy="{mid + 6}" r="2.2" fill="{colour}" stroke="#333" stroke-width=".5"/>')
    if mean > hi or mean < lo:  # off the leaders' scale: an arrow at the edge it is beyond
        tip, back = (STRIP_W - 1, STRIP_W - 9) if mean > hi else (1, 9)
        parts.append(f'<polygon points="{back},{mid - 5} {tip},{mid} {back},{mid + 5}" fill="{colour}" stroke="#111"/>')
    else:
        parts.append(f'<circle cx="{x(mean):.1f}" cy="{mid}" r="4.5" fill="{colour}" stroke="#111"/>')
    parts.append("</svg>")
    return "".join(parts)


def comparison_html(table: pd.DataFrame, rows: Sequence[Mapping[str, Any]], baseline: str, rank_by: str,
                    title: str, status: str, colours: Mapping[str, str],
                    figures: Sequence[tuple[str, bytes]] = (), links: Sequence[tuple[str, str]] = ()) -> str:
    """The page. ``table``: a ranked comparison (:func:`compare.rank`); ``rows``: one per finished
    replay (``trace, cluster, policy, seed`` and metrics) for the seed dots; ``colours``: label ->
    CSS colour; ``figures``: (caption, PNG bytes) shown under the table, each caption saying which
    replays its figure includes; ``links``: (text, relative address) of pages beside this one (the
    drill-down). The baseline's row comes first (:func:`compare.baseline_first`)."""
    table = compare.baseline_first(table, baseline)
    head = compare.shown_columns(table)
    seeds = pd.DataFrame(list(rows)) if rows else pd.DataFrame(columns=["trace", "cluster", "policy", rank_by])
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>",
           f"<p class='meta'>{html.escape(status)}<br>{html.escape(compare.legend(baseline))}; strip"
           f" ({html.escape(rank_by)}, on the scale of the policies within {LEADERS:.0%} of the best): dot = seed"
           f" mean, whisker = ± std, small dots = seeds, arrow = off that scale, dashed line ="
           f" {html.escape(baseline)}; click a column to sort.</p>"]
    if links:
        out.append("<p class='meta'>" + " · ".join(f"<a href='{html.escape(href, quote=True)}'>{html.escape(text)}</a>"
                                                   for text, href in links) + "</p>")
    for (trace, cluster), part in table.groupby(compare.GROUP, sort=False):
        part = part.reset_index(drop=True)
        mine = seeds[(seeds.get("trace") == trace) & (seeds.get("cluster") == cluster)] if len(seeds) else seeds
        scale = 3600.0 if compare.in_hours(rank_by) else 1.0
        means = part[rank_by].astype(float) / scale
        stds = part.get(compare.std_key(rank_by), pd.Series(0.0, index=part.index)).astype(float).fillna(0) / scale
        # the strips' scale spans the leaders (within LEADERS of the best): close policies separate,
        # the others are an arrow at the edge
        best = means.max() if compare.RANKABLE.get(rank_by) else means.min()
        near = (means >= best * (1 - LEADERS)) if compare.RANKABLE.get(rank_by) else (means <= best * (1 + LEADERS))
        values = [*(means - stds)[near].dropna(), *(means + stds)[near].dropna()]
        lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
        pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
        lo, hi = lo - pad, hi + pad
        base_rows = part[part["policy"] == baseline]
        base = float(base_rows[rank_by].iloc[0]) / scale if len(base_rows) and not pd.isna(base_rows[rank_by].iloc[0]) else math.nan
        out.append(f"<h2 style='font-size:1.05em'>trace {html.escape(str(trace))}, cluster {html.escape(str(cluster))}:"
                   f" {html.escape(baseline)} first, then best first by {html.escape(rank_by)}</h2><table><thead><tr>")
        for c in head:
            if c in compare.GROUP:
                continue
            out.append(f"<th>{html.escape(compare.header(c))}</th>")
            if c == "policy":
                unit = " h" if scale != 1.0 else ""
                out.append(f"<th>{html.escape(compare.header(rank_by))}: {lo:,.2f} to {hi:,.2f}{unit}"
                           f" (leaders)</th>")
        out.append("</tr></thead><tbody>")
        for row in part.to_dict("records"):
            label = row["policy"]
            colour = colours.get(label, "#888")
            cls = " class='base'" if label == baseline else ""
            out.append(f"<tr{cls}>")
            for c in head:
                if c in compare.GROUP:
                    continue
                text = html.escape(compare._cell(row, c))
                value = row.get(c)
                data = f" data-v='{value}'" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
                if c == "policy":
                    out.append(f"<td><span class='sw' style='background:{colour}'></span>{text}"
                               f"{' (baseline)' if label == baseline else ''}</td>")
                    dots = (mine.loc[mine["policy"] == label, rank_by].dropna().astype(float) / scale).tolist() \
                        if rank_by in mine else []
                    mean = float(row[rank_by]) / scale if not pd.isna(row.get(rank_by)) else math.nan
                    spread = row.get(compare.std_key(rank_by))
                    spread = 0.0 if spread is None or pd.isna(spread) else float(spread) / scale
                    out.append(f"<td data-v='{mean}'>{_strip(mean, spread, dots, base, lo, hi, colour)}</td>")
                elif c in (compare.VS_ABOVE, compare.VS_BASELINE):
                    out.append(f"<td class='tie'>{text}</td>")
                elif c in (compare.SAME_AS, compare.KNOBS, compare.PROGRESS):
                    out.append(f"<td>{text}</td>")
                else:
                    out.append(f"<td class='n'{data}>{text}</td>")
            out.append("</tr>")
        out.append("</tbody></table>")
    for caption, png in figures:
        out.append(f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,"
                   f"{base64.b64encode(png).decode()}'><figcaption>{html.escape(caption)}</figcaption></figure>")
    out.append(f"<script>{_JS}</script></body></html>")
    return "\n".join(out)


#: the style of the plain pages (``drilldown.html``, the testbed's ``comparison.html``)
PLAIN_STYLE = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{padding:2px 8px;text-align:right}"


def plain_page(title: str, body: str) -> str:
    """A self-contained page: ``title`` (plain text, escaped here) and ``body`` (HTML)."""
    title = html.escape(title)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{PLAIN_STYLE}</style>"
            f"</head><body><h1>{title}</h1>{body}</body></html>")


def plain_table(frame: pd.DataFrame, decimals: int = 3) -> str:
    """``frame`` as an HTML table (values escaped, numbers to ``decimals``)."""
    return frame.to_html(index=False, float_format=lambda v: f"{v:,.{decimals}f}", border=0, escape=True)
