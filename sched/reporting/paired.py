"""Paired comparisons over seeds.

Every seed of an experiment replays the *same* trace under every policy, so two policies are compared
seed by seed: the difference ``policy - other`` on each seed, its mean and a 95 % interval over seeds
(Student t by default; a percentile bootstrap as an option), the seeds where the policy wins, and a
verdict. This separates differences that the spread of each policy's own seeds hides (a seed with a hard
trace is hard for every policy). Rank intervals come from a bootstrap over seeds; the seeds a paired t
test would need to separate two policies (95 %, 80 % power) from the observed paired spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

BETTER, WORSE, NOT_SEPARATED, ONE_SEED = "better", "worse", "not separated at 95 %", "one seed: nothing separated"
METHODS = ("t", "bootstrap")
#: the columns of a paired comparison (one row per policy and the policy it is compared with)
COLUMNS = ["trace", "cluster", "policy", "vs", "paired_diff_mean", "ci95_low", "ci95_high", "wins", "seeds", "verdict"]


@dataclass(frozen=True)
class Paired:
    """``policy - vs`` over the seeds both have: ``mean`` with its interval ``[low, high]`` (metric units),
    ``wins``: seeds where the policy is better, and the verdict (:data:`BETTER`, :data:`WORSE`,
    :data:`NOT_SEPARATED`, :data:`ONE_SEED`)."""

    vs: str
    mean: float
    low: float
    high: float
    wins: int
    seeds: int
    verdict: str


def check_method(method: str) -> None:
    """A ValueError unless ``method`` is one of :data:`METHODS`."""
    if method not in METHODS:
        raise ValueError(f"paired interval: method must be one of {', '.join(METHODS)}, got {method!r}")


def interval(diffs: np.ndarray, method: str = "t", confidence: float = 0.95, boot: int = 2000,
             seed: int = 0) -> tuple[float, float]:
    """The ``confidence`` interval of the mean of ``diffs``: Student t (``t``) or the percentile bootstrap
    (``bootstrap``, ``boot`` resamples). Equal differences give a point; one difference, NaN."""
    check_method(method)
    n, mean = len(diffs), float(np.mean(diffs)) if len(diffs) else math.nan
    if n < 2:
        return math.nan, math.nan
    if np.all(diffs == diffs[0]):
        return mean, mean
    from scipy import stats  # here: a one-seed comparison (most) never loads scipy.stats (0.5 s)

    if method == "t":
        low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=stats.sem(diffs))
        return float(low), float(high)
    rng = np.random.default_rng(seed)
    means = rng.choice(diffs, size=(boot, n), replace=True).mean(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def paired(policy: Sequence[float], other: Sequence[float], vs: str = "", higher_is_better: bool = False,
           method: str = "t") -> Paired:
    """``policy`` against ``other``, value by value (the same seeds, in the same order)."""
    a, b = np.asarray(policy, dtype=float), np.asarray(other, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired comparison needs the same seeds on both sides: {len(a)} vs {len(b)} values")
    diffs = a - b
    low, high = interval(diffs, method)
    gain = diffs if higher_is_better else -diffs  # > 0: the policy is better on that seed
    gain_low, gain_high = (low, high) if higher_is_better else (-high, -low)
    wins = int(np.sum(gain > 0))
    if len(diffs) < 2:
        verdict = ONE_SEED
    elif gain_low > 0:
        verdict = BETTER
    elif gain_high < 0:
        verdict = WORSE
    else:
        verdict = NOT_SEPARATED
    return Paired(vs, float(diffs.mean()) if len(diffs) else math.nan, low, high, wins, len(diffs), verdict)


def seeds_needed(diffs: Sequence[float], alpha: float = 0.05, power: float = 0.8, most: int = 100_000) -> int | None:
    """The seeds a two-sided paired t test needs to separate two policies at ``alpha`` with ``power``,
    for the mean and spread of ``diffs`` (the noncentral t distribution, scipy.stats.nct). None: never
    (a zero mean difference, or more than ``most``); 2 when every difference is equal and non-zero."""
    d = np.asarray(diffs, dtype=float)
    if len(d) < 2 or float(np.mean(d)) == 0:
        return None
    sd = float(np.std(d, ddof=1))
    if sd == 0:
        return 2
    from scipy import stats
    effect = abs(float(np.mean(d))) / sd

    def achieved(n: int) -> float:
        crit = stats.t.ppf(1 - alpha / 2, n - 1)
        nc = effect * math.sqrt(n)
        return float(stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc))

    low, high = 2, 2
    while achieved(high) < power:
        low, high = high, high * 2
        if high > most:
            return None
    while low < high:  # the smallest n with enough power (power grows with n)
        mid = (low + high) // 2
        low, high = (mid + 1, high) if achieved(mid) < power else (low, mid)
    return low


def rank_intervals(values: pd.DataFrame, higher_is_better: bool = False, boot: int = 1000,
                   seed: int = 0) -> dict[str, tuple[int, int]]:
    """``values``: seeds x policies (one metric). Each policy's 95 % rank interval (1 = best) from a
    bootstrap over seeds (rows resampled, the policies ranked by their mean)."""
    data = values.dropna().to_numpy(dtype=float)
    if data.shape[0] == 0:
        return {}
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.shape[0], size=(boot, data.shape[0]))
    means = data[picks].mean(axis=1)  # boot x policies
    order = -means if higher_is_better else means
    ranks = order.argsort(axis=1).argsort(axis=1) + 1
    return {p: (int(np.quantile(ranks[:, i], 0.025, method="lower")), int(np.quantile(ranks[:, i], 0.975, method="higher")))
            for i, p in enumerate(values.columns)}


def by_seed(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per-replay rows (``policy``, ``seed``, ``metric``) of one trace and cluster as seeds x policies."""
    return rows.pivot_table(index="seed", columns="policy", values=metric, aggfunc="first")


def comparisons(rows: pd.DataFrame, ranked: pd.DataFrame, baseline: str, metric: str, higher_is_better: bool,
                method: str = "t") -> pd.DataFrame:
    """For each (trace, cluster) of ``ranked`` (a comparison best first) and each policy with finished
    replays: the paired comparison against ``baseline`` and against the policy ranked just above it
    (:data:`COLUMNS`), over the seeds both have."""
    out = []
    if rows.empty or metric not in rows:
        return pd.DataFrame(columns=COLUMNS)
    for (trace, cluster), part in ranked.groupby(["trace", "cluster"], sort=False):
        mine = rows[(rows["trace"] == trace) & (rows["cluster"] == cluster)]
        if mine.empty:
            continue
        table = by_seed(mine, metric)
        order = [p for p in part["policy"] if p in table.columns and table[p].notna().any()]
        for i, policy in enumerate(order):
            for other in dict.fromkeys([baseline, *(order[i - 1:i] if i else [])]):
                if other == policy or other not in table.columns:
                    continue
                both = table[[policy, other]].dropna()
                result = paired(both[policy], both[other], other, higher_is_better, method)
                out.append({"trace": trace, "cluster": cluster, "policy": policy, "vs": other,
                            "paired_diff_mean": result.mean, "ci95_low": result.low, "ci95_high": result.high,
                            "wins": result.wins, "seeds": result.seeds, "verdict": result.verdict})
    return pd.DataFrame(out, columns=COLUMNS)
