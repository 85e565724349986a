"""The paper-reproduction tables of the ``reproduce`` flow, from the replays' job tables: per config the
paper-vs-ours table (:func:`schedlab.sched.reporting.paper_tables.compare`) where ``conf/papers/tables.yaml``
publishes numbers for it, and the load sweep (average JCT in hours, seed means, per policy and load
factor: Castor Fig. 16, SJF-BSBF Fig. 6a); and the markdown that shows them."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import pandas as pd

from schedlab import settings
from schedlab.sched.reporting import markdown
from schedlab.sched.reporting.paper_tables import HOUR, compare, paper_tables, tables_for_experiment


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




def tables_for(config: Any, specs: list[Any], jobs: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The config's tables: ``<paper table>`` (paper vs ours) when published numbers exist, and
    ``<config>__jct_by_load`` (average JCT in hours, policy x load; one per trace and cluster when
    the config has several)."""
    tables: dict[str, pd.DataFrame] = {}
    for name, spec in tables_for_experiment(config.name).items():
        at_load: dict[str, list[pd.DataFrame]] = {}
        for s in specs:
            if s.key in jobs and math.isclose(s.load, float(spec["load"])):
                at_load.setdefault(s.label, []).append(jobs[s.key])
        tables[name] = compare(name, at_load)
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
        suffix = "" if len(groups) == 1 else f"__{settings.path_name(trace)}__{settings.path_name(cluster)}"
        tables[f"{config.name}__jct_by_load{suffix}"] = frame
    return tables


def section(config: Any, tables: dict[str, pd.DataFrame], report: dict[str, Any] | None) -> str:
    description = markdown.text(config.description or "")
    lines = [f"## {markdown.text(config.name)}: {description}".rstrip(": "), "",
             f"Seeds {config.seeds}; interference {markdown.text(config.models.interference)}."]
    if report and report.get("failures"):
        lines.append(f"**{len(report['failures'])} replay(s) failed**; the tables use the others.")
    for name, frame in tables.items():
        lines.append("")
        if name.startswith(f"{config.name}__jct_by_load"):
            lines.append("Average JCT (hours, seed means) by load factor:")
            lines += ["", to_markdown(frame, "policy")]
        else:
            spec = paper_tables()[name]
            if spec.get("kind") == "ratios":
                lines.append(f"`{name}` at load {spec['load']} (ratios as the paper prints them: baseline / policy"
                             " for times in hours, policy / baseline for deadlines met; seed means):")
            else:
                lines.append(f"`{name}` at load {spec['load']} (hours; large = more than {spec['large_job_gpus']}"
                             " GPUs; `paper` = published, `ours` = this replay):")
            lines += ["", to_markdown(frame, "policy")]
    return "\n".join(lines) + "\n"


def document(sections: list[str], failures: dict[str, str], stamp: datetime) -> str:
    """The run's markdown document: every config's section, then the failures."""
    return (f"# Paper vs ours ({stamp:%Y-%m-%d})\n\n" + "\n".join(sections)
            + ("\n**Failures**:\n\n" + "\n".join(f"- {markdown.text(k)}: {markdown.text(v)}"
                                                   for k, v in failures.items()) + "\n"
               if failures else ""))
