"""The experiment comparison: every policy against the config's baseline, averaged over seeds.

Ratios are as the papers report them: **baseline ÷ policy** (a speed-up: ``2.00x`` = half the
baseline's average JCT; below 1 = worse than the baseline). GPU utilisation is the plain mean.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

#: averaged metric -> column title
METRICS = {
    "avg_jct_s": "avg JCT (s)",
    "p95_jct_s": "p95 JCT (s)",
    "avg_queue_s": "avg queue (s)",
    "makespan_s": "makespan (s)",
    "gpu_util": "GPU util",
    "preemptions": "preemptions",
}
#: metric whose baseline/policy ratio is reported -> column title ({b} = the baseline)
RATIOS = {
    "avg_jct_s": "avg JCT speed-up vs {b}",
    "p95_jct_s": "p95 JCT speed-up vs {b}",
    "makespan_s": "makespan speed-up vs {b}",
}
GROUP = ["trace", "cluster"]


def _ratio(base: float, value: float) -> float:
    if base is None or value is None or (isinstance(base, float) and math.isnan(base)):
        return math.nan
    if value == 0:
        return 1.0 if base == 0 else math.inf
    return base / value


def comparison(rows: list[dict[str, Any]], baseline: str, policy_order: list[str] | None = None) -> pd.DataFrame:
    """``rows``: one per finished replay with ``trace, cluster, policy`` (the label), ``seed`` and the
    metrics. Returns one row per (trace, cluster, policy): seeds, the seed means and the ratios."""
    columns = [*GROUP, "policy", "seeds", *METRICS, *RATIOS]
    if not rows:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(rows)
    for m in METRICS:
        if m not in frame:
            frame[m] = math.nan
    means = frame.groupby([*GROUP, "policy"], sort=False)[list(METRICS)].mean()
    means["seeds"] = frame.groupby([*GROUP, "policy"], sort=False)["seed"].nunique()
    means = means.reset_index()
    out = []
    for _, group in means.groupby(GROUP, sort=False):
        base = group[group["policy"] == baseline]
        for _, row in group.iterrows():
            rec = row.to_dict()
            for m in RATIOS:
                rec[f"ratio:{m}"] = _ratio(float(base[m].iloc[0]), float(row[m])) if len(base) else math.nan
            out.append(rec)
    table = pd.DataFrame(out)
    order = {p: i for i, p in enumerate(policy_order or [])}
    table["_order"] = table["policy"].map(lambda p: (p != baseline, order.get(p, len(order))))
    table = table.sort_values([*GROUP, "_order"], kind="stable").drop(columns="_order").reset_index(drop=True)
    return table[[*GROUP, "policy", "seeds", *METRICS, *(f"ratio:{m}" for m in RATIOS)]]


def titled(table: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """The table with human column titles (for CSV, markdown and the terminal)."""
    names = {**METRICS, **{f"ratio:{m}": t.format(b=baseline) for m, t in RATIOS.items()}}
    return table.rename(columns=names)


def _cell(value: Any, column: str) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if math.isinf(value):
            return "∞"
        if "vs" in column:
            return f"{value:.2f}x"
        if column == "GPU util":
            return f"{value:.3f}"
        return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def to_markdown(table: pd.DataFrame) -> str:
    head = list(table.columns)
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---" if i < 3 else "---:" for i, _ in enumerate(head)) + "|"]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v, c) for v, c in zip(row, head)) + " |")
    return "\n".join(lines)


def to_text(table: pd.DataFrame) -> str:
    """A fixed-width table for the terminal."""
    cells = [list(map(str, table.columns))]
    cells += [[_cell(v, c) for v, c in zip(row, table.columns)] for row in table.itertuples(index=False)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
