"""What ``schedlab replay`` prints and writes beside each policy's results: the load's counts in words
and the policies' comparison (``comparison.csv``, and a fixed-width table for the terminal)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from schedlab.sched.reporting.compare import METRICS

#: a trace load's repair reasons (sched/traces/common.py) in words
REPAIR_WORDS = {"unsorted_sorted": "sorted by submit time", "oversize_clipped": "GPUs clipped to the cluster",
                "duplicate_id_renamed": "duplicate id renamed", "fractional_gpu_rounded_up": "fractional GPUs rounded up"}
COMPARISON_COLUMNS = ["policy", "jobs", *METRICS]  # the MLflow metric keys


def counted(reasons: dict[str, int]) -> str:
    """``{"oversize": 2, "unsorted_sorted": 1}`` as ``3 (2 oversize, 1 sorted by submit time)``; ``0`` when empty."""
    total = sum(reasons.values())
    if not total:
        return "0"
    return f"{total} (" + ", ".join(f"{n} {REPAIR_WORDS.get(why, why.replace('_', ' '))}"
                                    for why, n in reasons.items() if n) + ")"


def load_line(report: Any) -> str:
    """A trace load's report (:class:`~schedlab.sched.traces.common.LoadReport`) as one line."""
    return (f"trace: {report.source} ({report.format}): read {report.read}, kept {report.kept},"
            f" dropped {counted(report.dropped)}, repaired {counted(report.repaired)}")


def comparison_table(summaries: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per policy's summary: its label, jobs and the headline metrics (none: the header alone)."""
    return pd.DataFrame(summaries)[COMPARISON_COLUMNS] if summaries else pd.DataFrame(columns=COMPARISON_COLUMNS)


def format_table(frame: pd.DataFrame) -> str:
    """A plain fixed-width table (numbers rounded) for the terminal."""
    cells = [[str(c) for c in frame.columns]]
    for row in frame.itertuples(index=False):
        cells.append([f"{v:,.3f}" if isinstance(v, float) and abs(v) < 10 else
                      f"{v:,.0f}" if isinstance(v, (int, float)) else str(v) for v in row])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
