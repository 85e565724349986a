"""Paired comparisons for the paper-reproduction reports (``reproduce.md`` and the HTML report).

Every seed of a reproduction config replays the same trace under every policy, so two policies are
compared replay unit by replay unit, a unit being one (trace, cluster, seed): the difference on each
unit, its mean and 95 % interval (:func:`schedlab.sched.reporting.paired.paired`: Student t, or the
percentile bootstrap when the config says ``paired_interval: bootstrap``), the units where a policy
wins, and a verdict. The "Order" of a table's rows separates each adjacent pair with ``<`` when the
paired interval excludes 0 and ``≈`` when it does not.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping

from schedlab.sched.reporting import paired
from schedlab.sched.reporting.paired import Paired

#: one replay unit of a set-up: (trace, cluster, seed)
Unit = tuple[str, str, int]
METHOD_NAMES = {"t": "Student t", "bootstrap": "percentile bootstrap, 2,000 resamples"}


def pair(mine: Mapping[Unit, float], other: Mapping[Unit, float], vs: str, higher_is_better: bool = False,
         method: str = "t") -> Paired | None:
    """``mine - other`` over the units both have a finite value for; None when they share none."""
    units = sorted(u for u in mine if u in other and math.isfinite(mine[u]) and math.isfinite(other[u]))
    if not units:
        return None
    return paired.paired([mine[u] for u in units], [other[u] for u in units], vs, higher_is_better, method)


def chain(rows: list[str], values: Mapping[str, Mapping[Unit, float]], method: str = "t",
          escape: bool = True) -> tuple[str, list[Paired | None]]:
    """``rows`` (lowest first) joined by ``<`` where a row is separated from the one before it at 95 %
    (paired over the units both have) and ``≈`` where it is not, and each adjacent pair's comparison."""
    if not rows:
        return "", []
    text = html.escape(rows[0]) if escape else rows[0]
    pairs = []
    for before, row in zip(rows, rows[1:]):
        result = pair(values.get(row, {}), values.get(before, {}), before, False, method)
        pairs.append(result)
        separated = result is not None and result.verdict in (paired.BETTER, paired.WORSE)
        sign = ("&lt;" if escape else "<") if separated else "≈"
        text += f" {sign} " + (html.escape(row) if escape else row)
    return text, pairs


def chain_note(pairs: list[Paired | None], method: str) -> str:
    """What a :func:`chain` rests on: the seeds paired and the interval's method."""
    seeds = sorted({p.seeds for p in pairs if p is not None})
    if not seeds:
        return "no pair shares a seed: nothing separated"
    if seeds[-1] < 2:
        return "one seed: nothing can be separated"
    span = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    return (f"paired over {span} seeds, {METHOD_NAMES[method]}: &lt; separated at 95 %, ≈ not separated")


def cell(result: Paired | None, unit: str = "h", digits: int = 2) -> str:
    """A paired comparison as text: ``−0.12 [−0.20, −0.05] h, wins 3/3, better``."""
    if result is None:
        return "—"
    if result.verdict == paired.ONE_SEED:
        return f"{_signed(result.mean, digits)} {unit}, one seed: nothing separated".replace(" ,", ",")
    return (f"{_signed(result.mean, digits)} [{_signed(result.low, digits)}, {_signed(result.high, digits)}]"
            f"{' ' + unit if unit else ''}, wins {result.wins}/{result.seeds}, {result.verdict}")


def _signed(value: float, digits: int) -> str:
    if math.isnan(value):
        return "—"
    text = f"{abs(value):,.{digits if abs(value) >= 0.1 or value == 0 else 3}f}"
    return text if value >= 0 else f"−{text}"


__all__ = ["METHOD_NAMES", "Unit", "cell", "chain", "chain_note", "pair"]
