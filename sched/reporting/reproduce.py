"""The paper-reproduction tables of the ``reproduce`` flow, from the replays' job tables: per config the
paper-vs-ours table (:func:`schedlab.sched.reporting.paper_tables.compare`, with the seeds each row is a
mean of) where ``conf/papers/tables.yaml`` publishes numbers for it, for a ``classes`` table the paired
comparisons on its first column (``<table>__paired``: each policy against the baseline and against the
policy ranked just above it, over seeds: :func:`schedlab.sched.reporting.paired.comparisons`), and the
load sweep (average JCT in hours, seed means, per policy and load factor: Castor Fig. 16, SJF-BSBF
Fig. 6a, with the seeds); and the markdown that shows them."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import pandas as pd

from schedlab import settings
from schedlab.sched.reporting import markdown, paired
from schedlab.sched.reporting.paper_paired import METHOD_NAMES
from schedlab.sched.reporting.paper_tables import HOUR, compare, our_row, paper_tables, tables_for_experiment

PAIRED = "__paired"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.2f}"
    return str(value)


def to_markdown(frame: pd.DataFrame, index: str) -> str:
    """A plain markdown table (numbers to 2 decimals, missing as —) with the index as first column."""
    frame = frame.reset_index().rename(columns={"index": index})
    head = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(markdown.text(_fmt(v)) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)




def paired_on_first_column(config: Any, spec: dict, specs: list[Any], jobs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """A ``classes`` table's first column (average JCT of all jobs) per replay at the table's load,
    compared paired over seeds (:data:`paired.COLUMNS` and ``rank``, 1 = the lowest mean): each policy
    against the config's baseline and against the policy ranked just above it, with the config's
    ``paired_interval``; a policy compared with none (the baseline ranked first) once with ``vs`` empty."""
    column = spec["columns"][0]
    rows = pd.DataFrame([{"trace": s.trace, "cluster": s.cluster, "policy": s.label, "seed": s.seed,
                          column: our_row(jobs[s.key], spec["large_job_gpus"], spec.get("class_average", "mean"))[0]}
                         for s in specs if s.key in jobs and math.isclose(s.load, float(spec["load"]))])
    if rows.empty:
        return pd.DataFrame(columns=paired.COLUMNS)
    ranked = (rows.groupby(["trace", "cluster", "policy"], sort=False)[column].mean().reset_index()
              .sort_values(["trace", "cluster", column], kind="stable"))
    ranked["rank"] = ranked.groupby(["trace", "cluster"]).cumcount() + 1
    pairs = paired.comparisons(rows, ranked, config.baseline_label, column, False, config.paired_interval)
    alone = ranked.merge(pairs[["trace", "cluster", "policy"]].drop_duplicates(), how="left", indicator=True)
    alone = alone[alone["_merge"] == "left_only"][["trace", "cluster", "policy"]].assign(vs="")
    out = pd.concat([pairs, alone], ignore_index=True) if not alone.empty else pairs
    out = out.merge(ranked[["trace", "cluster", "policy", "rank"]], on=["trace", "cluster", "policy"])
    return out.sort_values(["trace", "cluster", "rank"], kind="stable").reset_index(drop=True)[
        [*paired.COLUMNS, "rank"]]


def with_seeds(frame: pd.DataFrame, spec: dict, at_load: dict[str, list[pd.DataFrame]]) -> pd.DataFrame:
    """``frame`` (:func:`compare`'s) with a first column ``seeds``: the replays each row of ours is a mean
    of (a ``kind: ratios`` row: the fewer of its baseline's and its policy's)."""
    rows = spec.get("rows") or {}
    frame.insert(0, "seeds", [
        min(len(at_load.get(rows[row]["baseline"], [])), len(at_load.get(rows[row]["policy"], [])))
        if spec.get("kind") == "ratios" else len(at_load.get(str(row), [])) for row in frame.index])
    return frame


def tables_for(config: Any, specs: list[Any], jobs: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The config's tables: ``<paper table>`` (paper vs ours, with a ``seeds`` column: the finished
    replays each row of ours is a mean of) when published numbers exist, ``<paper table>__paired`` for
    a ``classes`` table (:func:`paired_on_first_column`), and ``<config>__jct_by_load`` (average JCT in
    hours, policy x load, and ``seeds``: the replays per load, ``2-3`` when loads differ; one per trace
    and cluster when the config has several)."""
    tables: dict[str, pd.DataFrame] = {}
    for name, spec in tables_for_experiment(config.name).items():
        at_load: dict[str, list[pd.DataFrame]] = {}
        for s in specs:
            if s.key in jobs and math.isclose(s.load, float(spec["load"])):
                at_load.setdefault(s.label, []).append(jobs[s.key])
        if spec.get("kind") == "figures":
            continue
        tables[name] = with_seeds(compare(name, at_load), spec, at_load)
        if spec.get("kind", "classes") == "classes":
            tables[name + PAIRED] = paired_on_first_column(config, spec, specs, jobs)
    groups = sorted({(s.trace, s.cluster) for s in specs})
    for trace, cluster in groups:
        cells: dict[tuple[str, float], list[float]] = {}
        for s in specs:
            if s.key in jobs and (s.trace, s.cluster) == (trace, cluster):
                cells.setdefault((s.label, s.load), []).append(float(jobs[s.key]["jct_s"].mean()) / HOUR)
        if not cells:
            continue
        labels = list(dict.fromkeys(s.label for s in specs))
        loads = sorted({load for _, load in cells})
        frame = pd.DataFrame({f"load {load:g}": [sum(cells[(p, load)]) / len(cells[(p, load)])
                                                 if (p, load) in cells else math.nan for p in labels]
                              for load in loads}, index=labels)
        frame["seeds"] = [_span([len(cells.get((p, load), [])) for load in loads]) for p in labels]
        suffix = "" if len(groups) == 1 else f"__{settings.path_name(trace)}__{settings.path_name(cluster)}"
        tables[f"{config.name}__jct_by_load{suffix}"] = frame
    return tables


def _span(counts: list[int]) -> str:
    return str(counts[0]) if len(set(counts)) == 1 else f"{min(counts)}-{max(counts)}"


def order_line(frame: pd.DataFrame, column: str, method: str) -> str:
    """The policies of a ``__paired`` table lowest first, each adjacent pair marked ``<`` (separated at
    95 %, paired over seeds) or ``≈`` (not), per trace and cluster."""
    lines = []
    for (trace, cluster), part in frame.groupby(["trace", "cluster"], sort=False):
        order = list(dict.fromkeys(part.sort_values("rank", kind="stable")["policy"]))
        text, seeds = markdown.text(order[0]), set()
        for before, policy in zip(order, order[1:]):
            rows = part[(part["policy"] == policy) & (part["vs"] == before)]
            if rows.empty:
                text += f" ? {markdown.text(policy)}"
                continue
            row = rows.iloc[0]
            seeds.add(int(row["seeds"]))
            text += (" < " if row["verdict"] in (paired.BETTER, paired.WORSE) else " ≈ ") + markdown.text(policy)
        note = (f"paired over {'/'.join(str(s) for s in sorted(seeds))} seeds, {METHOD_NAMES[method]}: < separated at"
                " 95 %, ≈ not" if seeds and max(seeds) > 1 else "one seed: nothing can be separated")
        where = f" ({markdown.text(trace)} / {markdown.text(cluster)})" if frame[["trace", "cluster"]].drop_duplicates().shape[0] > 1 else ""
        lines.append(f"**Order** on {column}{where}, lowest first: {text} ({note}).")
    return "\n\n".join(lines)


def section(config: Any, tables: dict[str, pd.DataFrame], report: dict[str, Any] | None) -> str:
    description = markdown.text(config.description or "")
    lines = [f"## {markdown.text(config.name)}: {description}".rstrip(": "), "",
             f"Seeds {config.seeds}; interference {markdown.text(config.models.interference)}."]
    if report and report.get("failures"):
        lines.append(f"**{len(report['failures'])} replay(s) failed**; the tables use the others.")
    for name, frame in tables.items():
        lines.append("")
        if name.startswith(f"{config.name}__jct_by_load"):
            lines.append("Average JCT (hours, seed means; `seeds`: the finished replays each is a mean of) by load"
                         " factor:")
            lines += ["", to_markdown(frame, "policy")]
        elif name.endswith(PAIRED):
            spec = paper_tables()[name.removesuffix(PAIRED)]
            lines.append(order_line(frame, spec["columns"][0], config.paired_interval) if not frame.empty
                         else "No replays at the table's load: nothing compared.")
            if not frame.empty:
                lines += ["", f"Paired over seeds on {spec['columns'][0]} (hours; `vs`: the baseline and the policy"
                          " ranked just above; difference = policy − vs):", "",
                          to_markdown(frame.drop(columns=["trace", "cluster", "rank"]).set_index("policy"), "policy")]
        else:
            spec = paper_tables()[name]
            if spec.get("kind") == "ratios":
                lines.append(f"`{name}` at load {spec['load']} (ratios as the paper prints them: baseline / policy"
                             " for times in hours, policy / baseline for deadlines met; seed means):")
            else:
                lines.append(f"`{name}` at load {spec['load']} (hours; large = more than {spec['large_job_gpus']}"
                             " GPUs; `paper` = published, `ours` = this run's seed means over `seeds` replays):")
            lines += ["", to_markdown(frame, "policy")]
    return "\n".join(lines) + "\n"


def document(sections: list[str], failures: dict[str, str], stamp: datetime) -> str:
    """The run's markdown document: every config's section, then the failures."""
    return (f"# Paper vs ours ({stamp:%Y-%m-%d})\n\n" + "\n".join(sections)
            + ("\n**Failures**:\n\n" + "\n".join(f"- {markdown.text(k)}: {markdown.text(v)}"
                                                   for k, v in failures.items()) + "\n"
               if failures else ""))
