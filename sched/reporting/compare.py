"""The experiment comparison: every policy against the config's baseline, mean and spread over seeds.

Column names are the MLflow metric keys (a replay run's ``avg_jct_s``; a policy run's ``avg_jct_s``
= the seed mean and ``avg_jct_s_std`` = the sample standard deviation over seeds), so that the
terminal, the CSV and the MLflow UI read alike. Ratios are as the papers report them: **baseline ÷
policy** (a speed-up: ``2.00x`` = half the baseline's average JCT; below 1 = worse than the baseline).

``avg_queue_s`` is submission to *first* start; ``avg_wait_s`` is all the time a job spends without
GPUs, re-queueing after preemptions included: the papers' "queueing time" for preemptive policies
(Castor §9.2) is the latter.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from schedlab.sched.reporting import markdown, paired

if TYPE_CHECKING:
    from schedlab.sched.policy_needs import Fallback

#: headline metrics (MLflow keys), averaged over seeds, with their spread in ``<key>_std``
METRICS = ("avg_jct_s", "p95_jct_s", "avg_wait_s", "avg_queue_s", "makespan_s", "gpu_util", "preemptions")
#: metrics only some experiments have (the SM-activity distribution needs ``smact_profiles``; the
#: fairness figures of sched/reporting/drilldown.py come with tracked replays, Jain's index over users
#: and VCs only from traces that name them): columns only when a replay reported them
OPTIONAL = ("slowdown_p99", "ftf_rho_mean", "jain_users", "jain_vcs", "smact_mean", "smact_high_share")
#: metric -> key of its baseline ÷ policy ratio
RATIOS = {"avg_jct_s": "avg_jct_speedup", "p95_jct_s": "p95_jct_speedup", "makespan_s": "makespan_speedup"}
#: metrics shown as whole numbers
INTEGER = frozenset({"preemptions"})
GROUP = ["trace", "cluster"]
SAME_AS = "same_as"
#: a ranked table's columns: the paired comparison over seeds (:mod:`~schedlab.sched.reporting.paired`) with
#: the policy ranked just above and with the baseline, as a cell (``better than fifo: -0.16 [-0.25, -0.08] h,
#: wins 10/10``)
VS_ABOVE, VS_BASELINE = "vs_above", "vs_baseline"
#: optional columns of a live comparison: parameters that differ from the policy's defaults, and the
#: policy's replays done / running / queued
KNOBS, PROGRESS = "knobs", "done/running/queued"
#: a ranked table's position of each row within its (trace, cluster) group (1 = best)
RANK = "rank"
#: metrics a comparison can be ranked by, and whether higher is better
RANKABLE = {"avg_jct_s": False, "p95_jct_s": False, "avg_wait_s": False, "avg_queue_s": False,
            "makespan_s": False, "gpu_util": True}


def std_key(metric: str) -> str:
    return f"{metric}_std"


def _ratio(base: float, value: float) -> float:
    if base is None or value is None or math.isnan(base) or math.isnan(value):
        return math.nan
    if value == 0:
        return 1.0 if base == 0 else math.inf
    return base / value


def columns(optional: tuple[str, ...] = ()) -> list[str]:
    return [*GROUP, "policy", "seeds", SAME_AS, *(c for m in (*METRICS, *optional) for c in (m, std_key(m))),
            *RATIOS.values()]


def headline(columns_present) -> tuple[str, ...]:
    """The headline metrics of a table or row: :data:`METRICS` plus the :data:`OPTIONAL` ones it has."""
    return (*METRICS, *(m for m in OPTIONAL if m in columns_present))


def _identical(frame: pd.DataFrame, labels: list[str]) -> dict[str, str]:
    """label -> an earlier label whose per-seed headline metrics are all equal (same results)."""
    vectors: dict[str, tuple] = {}
    for label in labels:
        part = frame[frame["policy"] == label].sort_values("seed")
        vectors[label] = tuple(part["seed"]) + tuple(
            round(float(v), 6) if not pd.isna(v) else None for m in METRICS for v in part[m])
    same: dict[str, str] = {}
    for i, label in enumerate(labels):
        for earlier in labels[:i]:
            if earlier not in same and vectors[earlier] == vectors[label]:
                same[label] = earlier
                break
    return same


def comparison(rows: list[dict[str, Any]], baseline: str, policy_order: list[str] | None = None,
               fallbacks: dict[tuple[str, str, str], Fallback] | None = None) -> pd.DataFrame:
    """``rows``: one per finished replay with ``trace, cluster, policy`` (the label), ``seed`` and the
    metrics. Returns one row per (trace, cluster, policy): seeds, seed means and standard deviations,
    the ratios against the baseline and ``same_as`` (a policy whose results are identical, seed by seed),
    with the reason when either of the two falls back to the other's behaviour on that set-up
    (``fallbacks``: :meth:`ExperimentSpec.fallbacks`)."""
    if not rows:
        return pd.DataFrame(columns=columns())
    frame = pd.DataFrame(rows)
    for m in METRICS:
        if m not in frame:
            frame[m] = math.nan
    metrics = [*METRICS, *(m for m in OPTIONAL if m in frame and frame[m].notna().any())]
    order = {p: i for i, p in enumerate(policy_order or [])}
    out = []
    for _, group in frame.groupby(GROUP, sort=False):
        labels = sorted(group["policy"].unique(), key=lambda p: (p != baseline, order.get(p, len(order))))
        same = _identical(group, labels)
        key = tuple(group.iloc[0][GROUP])
        for label, earlier in same.items():
            reason = (fallbacks or {}).get((*key, label)) or (fallbacks or {}).get((*key, earlier))
            if reason is not None:
                same[label] = f"{earlier}: {reason.short}"
        by_policy = group.groupby("policy", sort=False)
        means, stds = by_policy[metrics].mean(), by_policy[metrics].std(ddof=1)
        for label in labels:
            first = group[group["policy"] == label].iloc[0]
            rec: dict[str, Any] = {"trace": first["trace"], "cluster": first["cluster"], "policy": label,
                                   "seeds": int(group.loc[group["policy"] == label, "seed"].nunique()),
                                   SAME_AS: same.get(label, "")}
            for m in metrics:
                rec[m], rec[std_key(m)] = float(means.loc[label, m]), float(stds.loc[label, m])
            for m, key in RATIOS.items():
                rec[key] = _ratio(float(means.loc[baseline, m]), rec[m]) if baseline in means.index else math.nan
            out.append(rec)
    return pd.DataFrame(out, columns=columns(tuple(metrics[len(METRICS):])))


def rank(table: pd.DataFrame, metric: str, rows: list[dict[str, Any]] | None = None, baseline: str | None = None,
         method: str = "t") -> pd.DataFrame:
    """Each (trace, cluster) group's rows best first by ``metric`` (:data:`RANKABLE`), rows without
    a value last, groups in their order; with the per-replay ``rows``, each row's paired comparison with
    the row above and with ``baseline`` (:data:`VS_ABOVE`, :data:`VS_BASELINE`; ``method``: ``t`` or
    ``bootstrap``)."""
    if metric not in RANKABLE:
        raise ValueError(f"cannot rank by {metric!r}: one of {', '.join(RANKABLE)}")
    paired.check_method(method)
    if table.empty:
        return table.assign(**{RANK: pd.Series(dtype=int), VS_ABOVE: pd.Series(dtype=str), VS_BASELINE: pd.Series(dtype=str)})
    order = table.assign(_group=table.groupby(GROUP, sort=False).ngroup())
    order = order.sort_values(["_group", metric], ascending=[True, not RANKABLE[metric]], na_position="last",
                              kind="stable").drop(columns="_group").reset_index(drop=True)
    order[RANK] = order.groupby(GROUP, sort=False).cumcount() + 1
    pairs = pairs_of(order, rows, baseline, metric, method)
    cells = {(r["trace"], r["cluster"], r["policy"], r["vs"]): verdict_cell(r, metric) for r in pairs.to_dict("records")}
    above = [None] + [order["policy"].iloc[i - 1] if tuple(order.iloc[i - 1][GROUP]) == tuple(order.iloc[i][GROUP])
                      else None for i in range(1, len(order))]
    keys = list(zip(order["trace"], order["cluster"], order["policy"]))
    order[VS_ABOVE] = [cells.get((*k, a), "") if a else "" for k, a in zip(keys, above)]
    order[VS_BASELINE] = [cells.get((*k, baseline), "") for k in keys]
    return order


def pairs_of(ranked: pd.DataFrame, rows: list[dict[str, Any]] | None, baseline: str | None, metric: str,
             method: str = "t") -> pd.DataFrame:
    """The paired comparisons of a ranked table (:func:`paired.comparisons`; none without ``rows``)."""
    if not rows or baseline is None:
        return pd.DataFrame(columns=paired.COLUMNS)
    return paired.comparisons(pd.DataFrame(rows), ranked, baseline, metric, RANKABLE[metric], method)


def verdict_cell(pair: dict[str, Any], metric: str) -> str:
    """A paired comparison as a table cell."""
    vs = pair["vs"]
    if pair["verdict"] == paired.ONE_SEED:
        return f"vs {vs}: one seed, nothing separated"
    unit = " h" if in_hours(metric) else ""
    numbers = (f"{_signed(pair['paired_diff_mean'], metric)} [{_signed(pair['ci95_low'], metric)},"
               f" {_signed(pair['ci95_high'], metric)}]{unit}, wins {pair['wins']}/{pair['seeds']}")
    word = {paired.BETTER: "better than", paired.WORSE: "worse than"}.get(pair["verdict"], "not separated from")
    return f"{word} {vs}: {numbers}"


def _signed(value: float, metric: str) -> str:
    text = _number(abs(value), metric, None)
    return text if math.isnan(value) or value >= 0 else f"−{text}"


def csv_frame(ranked: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """The comparison CSV: each policy's row once per paired comparison (``vs``: the baseline, the policy
    ranked above), with ``paired_diff_mean``, ``ci95_low``, ``ci95_high``, ``wins``, ``seeds`` (the seeds
    both have) and ``verdict``; a row without comparisons (the baseline ranked first, a policy without
    replays) once with ``vs`` empty."""
    keep = [c for c in ranked.columns if c not in (VS_ABOVE, VS_BASELINE)]
    merged = ranked[keep].merge(pairs.rename(columns={"seeds": "paired_seeds"}), on=[*GROUP, "policy"], how="left",
                                sort=False)
    merged["seeds"] = merged["paired_seeds"].fillna(merged["seeds"]).astype(int)
    merged["vs"] = merged["vs"].fillna("")
    return merged.drop(columns="paired_seeds")


def seeds_needed_lines(ranked: pd.DataFrame, rows: list[dict[str, Any]] | None, metric: str) -> list[str]:
    """Per (trace, cluster): the seeds a paired t test would need to separate the two best policies at
    95 % with 80 % power, from their observed paired differences."""
    if not rows:
        return []
    frame, lines = pd.DataFrame(rows), []
    for (trace, cluster), part in ranked.groupby(GROUP, sort=False):
        top = [p for p in part.dropna(subset=[metric])["policy"]][:2]
        if len(top) < 2:
            continue
        mine = frame[(frame["trace"] == trace) & (frame["cluster"] == cluster)]
        both = paired.by_seed(mine, metric)[top].dropna()
        if len(both) < 2:
            lines.append(f"{trace} / {cluster}: {top[0]} vs {top[1]}: one seed, no spread to size a test from")
            continue
        need = paired.seeds_needed((both[top[0]] - both[top[1]]).to_numpy())
        text = ("never: their mean paired difference is 0" if need is None
                else f"{need} seeds to separate them at 95 % with 80 % power")
        lines.append(f"{trace} / {cluster}: {top[0]} vs {top[1]}, {len(both)} seeds so far: {text}")
    return lines


def baseline_first(table: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """A ranked table as it is shown: in each (trace, cluster) group the ``baseline``'s row first (the
    row every other is read against), then the others in rank order (:data:`RANK` keeps the rank)."""
    if baseline is None or table.empty:
        return table
    group = table.groupby(GROUP, sort=False).ngroup()
    key = pd.DataFrame({"g": group, "b": table["policy"] != baseline, "i": range(len(table))}, index=table.index)
    return table.loc[key.sort_values(["g", "b", "i"]).index].reset_index(drop=True)


def in_hours(metric: str) -> bool:
    """Seconds metrics are shown in hours (``avg_jct_s`` -> column ``avg_jct_s (h)``)."""
    return metric.endswith("_s") and (metric in METRICS or metric in OPTIONAL)


def header(column: str) -> str:
    return f"{column} (h)" if in_hours(column) else "#" if column == RANK else column


def _number(value: float, metric: str, like: float | None = None) -> str:
    """``value`` as a cell shows it; ``like``: the mean a spread goes with (same decimals)."""
    if math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞"
    like = value if like is None or math.isnan(like) or math.isinf(like) else like
    if in_hours(metric):
        hours = value / 3600.0
        return f"{hours:,.2f}" if abs(like / 3600.0) < 100 else f"{hours:,.0f}"
    if metric in INTEGER:
        return f"{round(value):,d}"
    if metric == "gpu_util" or metric.startswith(("smact_", "jain_")):  # fractions of 1
        return f"{value:.3f}"
    return f"{value:,.1f}" if abs(like) < 100 else f"{value:,.0f}"


def _cell(row: dict[str, Any], column: str) -> str:
    value = row[column]
    if column in RATIOS.values():
        return "—" if math.isnan(value) else "∞" if math.isinf(value) else f"{value:.2f}x"
    if column in METRICS or column in OPTIONAL:
        spread = row.get(std_key(column), math.nan)
        text = _number(value, column)
        return text if pd.isna(spread) or math.isnan(value) else f"{text} ± {_number(spread, column, value)}"
    if column == SAME_AS:
        return f"= {value}" if value else ""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def shown_columns(table: pd.DataFrame) -> list[str]:
    """The columns printed (std columns folded into their metric's cell; ``same_as`` only when used)."""
    cols = [*GROUP, *([RANK] if RANK in table.columns else []), "policy", "seeds", *headline(table.columns),
            *RATIOS.values()]
    if len(table) and (table[SAME_AS] != "").any():
        cols.insert(cols.index("seeds") + 1, SAME_AS)
    if PROGRESS in table.columns:
        cols.insert(cols.index("seeds") + 1, PROGRESS)
    cols += [c for c in (VS_ABOVE, VS_BASELINE) if c in table.columns and (table[c].fillna("") != "").any()]
    if KNOBS in table.columns and (table[KNOBS] != "").any():
        cols.append(KNOBS)
    return cols


def legend(baseline: str) -> str:
    return (f"cells: mean ± sample std over seeds, times in hours; *_speedup = {baseline} ÷ policy (> 1: better than {baseline});"
            " avg_wait_s = all time without GPUs (incl. after preemptions), avg_queue_s = to first start;"
            " same_as: identical results, seed by seed (and which policy lacks what its mechanism needs);"
            " vs_above, vs_baseline: the paired difference (policy - other) on each seed, its mean, 95 % interval and"
            " the seeds the policy wins; better / worse when the interval excludes 0, else not separated")


def to_markdown(table: pd.DataFrame, baseline: str | None = None) -> str:
    """A Markdown table, the ``baseline``'s row first in each group (:func:`baseline_first`)."""
    table = baseline_first(table, baseline)
    head = shown_columns(table)
    lines = ["| " + " | ".join(header(c) for c in head) + " |",
             "|" + "|".join("---" if c in (*GROUP, "policy", SAME_AS, KNOBS, VS_ABOVE, VS_BASELINE) else "---:" for c in head) + "|"]
    for row in table.to_dict("records"):
        lines.append("| " + " | ".join(markdown.text(_cell(row, c)) for c in head) + " |")
    return "\n".join(lines)


def to_text(table: pd.DataFrame, baseline: str | None = None) -> str:
    """A fixed-width table for the terminal (trace and cluster columns only when there are several), the
    ``baseline``'s row first in each group (:func:`baseline_first`)."""
    table = baseline_first(table, baseline)
    head = shown_columns(table)
    if len(table) and len(table[GROUP].drop_duplicates()) == 1:
        head = [c for c in head if c not in GROUP]
    cells = [[header(c) for c in head]] + [[_cell(row, c) for c in head] for row in table.to_dict("records")]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    left = {*GROUP, "policy", SAME_AS, KNOBS, VS_ABOVE, VS_BASELINE}
    lines = ["  ".join(c.ljust(w) if h in left else c.rjust(w) for c, w, h in zip(r, widths, head)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if GROUP[0] not in head and len(table):
        lines.insert(0, f"trace {table['trace'].iloc[0]}, cluster {table['cluster'].iloc[0]}")
    return "\n".join(lines)


def replay_line(metrics: dict[str, float]) -> str:
    """A finished replay's headline as the terminal shows it (hours, as every view)."""
    hours = {k: _number(float(metrics.get(k, math.nan)), k) for k in ("avg_jct_s", "avg_wait_s", "avg_queue_s")}
    return f"avg JCT {hours['avg_jct_s']} h, avg wait {hours['avg_wait_s']} h, avg queue {hours['avg_queue_s']} h"
