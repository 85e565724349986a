"""Two policies of a comparison, job by job: which jobs a policy helps and which it hurts, and the fairness
and tail figures the papers report.

The jobs of the same trace and seed are paired by ``job_id``; ``ratio`` = the job's JCT under B over its
JCT under A (> 1: A is faster for it). A job is *helped* by A when the ratio exceeds ``1 + tolerance``,
*hurt* below ``1 - tolerance``, *unchanged* otherwise (default tolerance 1e-9: only equal JCTs).

Per policy, from a replay's ``jobs.parquet`` (:func:`fairness`):

- **slowdown** = JCT / the job's solo run time, its ``duration``: the seconds of work the trace gives it
  alone on the GPUs it asked for (a goodput job's nominal run time, the unit its progress is counted in),
  known for every job. Not ``exclusive_jct_estimate``, which is NaN for most jobs by design: it is Castor
  eq. 24's t_solo-location, the JCT the job would have had waiting for GPUs of its own (queueing
  included), which the engine sets only for a job that starts beside another (the sharing policies'
  "sharing benefit"), so it is neither a run time nor known for the others;
- **finish-time fairness** ρ (Themis, NSDI'20 §3.1) = JCT / T_id, where T_id is the time the job would
  take on an equal share of the cluster: with N jobs in the system on average while it was (from its
  submission to its end) and G training GPUs, a share of G / N GPUs; a job of g GPUs runs at full speed
  on it when g <= G / N, else at (G / N) / g of it, so T_id = solo x max(1, g N / G). ρ <= 1: the job
  did no worse than on its fair share;
- **Jain's fairness index** (Jain, Chiu and Hawe, DEC-TR-301, 1984) across users and across virtual
  clusters: J = (Σ x_i)² / (n Σ x_i²) over the n users (VCs) of the replay, x_i the mean slowdown of
  user (VC) i's jobs. J = 1 when every user's jobs are slowed down alike, 1 / n when one user bears it all.
  From the job table's ``user`` and ``vc`` columns (the trace's, carried to ``jobs.parquet``): absent, not
  NaN, when the trace has no such column or fewer than two users (VCs); jobs without one are left out;
- tails of JCT and queueing by job-size bucket (GPUs: 1, 2-4, 5-8, > 8).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

GPU_BUCKETS = [(1, 1, "1 GPU"), (2, 4, "2-4 GPUs"), (5, 8, "5-8 GPUs"), (9, 10**9, ">8 GPUs")]
DURATION_BUCKETS = [(0, 3600, "< 1 h"), (3600, 6 * 3600, "1-6 h"), (6 * 3600, 24 * 3600, "6-24 h"),
                    (24 * 3600, float("inf"), ">= 24 h")]
JOB_COLUMNS = ["job_id", "submit_time", "start_time", "end_time", "num_gpus", "duration", "jct_s", "queue_s",
               "preemptions", "shared_s"]


def gpu_bucket(gpus: pd.Series) -> pd.Series:
    out = pd.Series("", index=gpus.index, dtype=object)
    for low, high, name in GPU_BUCKETS:
        out[(gpus >= low) & (gpus <= high)] = name
    return out


def duration_bucket(seconds: pd.Series) -> pd.Series:
    out = pd.Series("", index=seconds.index, dtype=object)
    for low, high, name in DURATION_BUCKETS:
        out[(seconds >= low) & (seconds < high)] = name
    return out


def solo_s(jobs: pd.DataFrame) -> pd.Series:
    """Each job's run time alone on the GPUs it asked for: its ``duration`` (module docstring)."""
    return jobs["duration"].astype(float)


def jobs_in_system(jobs: pd.DataFrame) -> pd.Series:
    """For each job, the time-average number of jobs in the system (submitted, not ended) from its
    submission to its end, itself included."""
    times = np.concatenate([jobs["submit_time"].to_numpy(float), jobs["end_time"].to_numpy(float)])
    steps = np.concatenate([np.ones(len(jobs)), -np.ones(len(jobs))])
    order = np.lexsort((-steps, times))  # at equal times, arrivals first
    t, count = times[order], np.cumsum(steps[order])
    # integral of the count from t[0]: area[i] up to t[i]
    area = np.concatenate([[0.0], np.cumsum(count[:-1] * np.diff(t))])

    def integral(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(t, x, side="right") - 1
        return area[i] + count[i] * (x - t[i])

    start, end = jobs["submit_time"].to_numpy(float), jobs["end_time"].to_numpy(float)
    span = end - start
    mean = np.where(span > 0, (integral(end) - integral(start)) / np.where(span > 0, span, 1), 1.0)
    return pd.Series(np.maximum(mean, 1.0), index=jobs.index)


def finish_time_fairness(jobs: pd.DataFrame, cluster_gpus: int) -> pd.Series:
    """Themis' ρ per job (module docstring) on a cluster of ``cluster_gpus`` training GPUs."""
    share = cluster_gpus / jobs_in_system(jobs)
    ideal = solo_s(jobs) * np.maximum(1.0, jobs["num_gpus"].astype(float) / share)
    return jobs["jct_s"].astype(float) / ideal


#: Jain's index metric -> the job-table column it groups by
JAIN = {"jain_users": "user", "jain_vcs": "vc"}


def jain_index(values: pd.Series) -> float:
    """Jain's fairness index of ``values`` (one per user or VC): (Σ x)² / (n Σ x²)."""
    x = values.to_numpy(dtype=float)
    return float(x.sum() ** 2 / (len(x) * (x**2).sum()))


def group_slowdown(jobs: pd.DataFrame, column: str) -> pd.Series | None:
    """The mean slowdown of each group's jobs (``column``: ``user`` or ``vc``), None when the table has no
    such column or fewer than two groups."""
    if column not in jobs.columns:
        return None
    slowdown = jobs["jct_s"].astype(float) / solo_s(jobs)
    means = slowdown.groupby(jobs[column], dropna=True).mean()
    return means if len(means) >= 2 else None


def fairness(jobs: pd.DataFrame, cluster_gpus: int) -> dict[str, float]:
    """A replay's slowdown and finish-time-fairness figures, Jain's index over users and VCs where the
    job table has them (:data:`JAIN`), and p95/p99 JCT and queueing by GPU bucket (keys as MLflow metrics)."""
    slowdown = jobs["jct_s"].astype(float) / solo_s(jobs)
    rho = finish_time_fairness(jobs, cluster_gpus)
    out = {"slowdown_mean": float(slowdown.mean()), "slowdown_p95": float(slowdown.quantile(0.95)),
           "slowdown_p99": float(slowdown.quantile(0.99)), "slowdown_max": float(slowdown.max()),
           "ftf_rho_mean": float(rho.mean()), "ftf_rho_max": float(rho.max()),
           "ftf_rho_over_1": float((rho > 1).mean())}
    for key, column in JAIN.items():
        means = group_slowdown(jobs, column)
        if means is not None:
            out[key] = jain_index(means)
    buckets = gpu_bucket(jobs["num_gpus"])
    for _, _, name in GPU_BUCKETS:
        part = jobs[buckets == name]
        if part.empty:
            continue
        key = name.replace(" GPUs", "g").replace(" GPU", "g").replace(">", "gt").replace("-", "_")
        for q in (95, 99):
            out[f"p{q}_jct_s.{key}"] = float(part["jct_s"].quantile(q / 100))
            out[f"p{q}_queue_s.{key}"] = float(part["queue_s"].quantile(q / 100))
    return out


def paired_jobs(a: pd.DataFrame, b: pd.DataFrame, tolerance: float = 1e-9) -> pd.DataFrame:
    """The jobs of one trace and seed under A and under B side by side (by ``job_id``): their JCTs,
    ``ratio`` = B / A, ``effect`` of A (helped, hurt, unchanged) and the GPU and duration buckets. A job
    missing on one side is an error: the two replays did not run the same trace."""
    left, right = set(a["job_id"]), set(b["job_id"])
    if left != right:
        raise ValueError(f"the two replays hold different jobs ({len(left - right)} only under A,"
                         f" {len(right - left)} only under B): not the same trace and seed")
    cols = [c for c in JOB_COLUMNS if c in a.columns]
    both = a[cols].merge(b[cols], on="job_id", suffixes=("_a", "_b"))
    both["ratio"] = both["jct_s_b"] / both["jct_s_a"]
    both["effect"] = np.where(both["ratio"] > 1 + tolerance, "helped",
                              np.where(both["ratio"] < 1 - tolerance, "hurt", "unchanged"))
    both["gpu_bucket"] = gpu_bucket(both["num_gpus_a"])
    both["duration_bucket"] = duration_bucket(both["duration_a"])
    return both


def split(both: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Fractions of jobs helped, hurt and unchanged by A (overall, or per ``by`` bucket), with the count and
    the median and p10/p90 of the ratio."""
    order = {name: i for i, (*_, name) in enumerate([*GPU_BUCKETS, *DURATION_BUCKETS])}
    groups = [("all", both)] if by is None else sorted(both.groupby(by, sort=False), key=lambda g: order.get(g[0], 99))
    rows = []
    for name, part in groups:
        counts = part["effect"].value_counts()
        rows.append({"bucket": name, "jobs": len(part),
                     **{e: float(counts.get(e, 0)) / len(part) for e in ("helped", "hurt", "unchanged")},
                     "ratio_p10": float(part["ratio"].quantile(0.1)), "ratio_median": float(part["ratio"].median()),
                     "ratio_p90": float(part["ratio"].quantile(0.9))})
    return pd.DataFrame(rows)


def most_hurt(both: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The ``n`` jobs A hurts most (lowest ratio), with their timelines under both policies."""
    cols = ["seed", "job_id", "num_gpus_a", "duration_a", "ratio", "submit_time_a", *(f"{c}_{s}" for c in
            ("start_time", "end_time", "jct_s", "preemptions", "shared_s") for s in "ab")]
    hurt = both[both["effect"] == "hurt"].nsmallest(n, "ratio")
    return hurt[[c for c in cols if c in hurt.columns]]


def drilldown(tables: dict[tuple[str, str, int], dict[str, pd.DataFrame]], a: str, b: str,
              cluster_gpus: dict[str, int], tolerance: float = 1e-9) -> dict[str, pd.DataFrame]:
    """The whole drill-down of ``a`` against ``b`` from ``(trace, cluster, seed) -> {label: jobs}``:
    ``jobs`` (every job and seed paired, :func:`paired_jobs`), ``overall``, ``by_gpus``, ``by_duration``
    (:func:`split`), ``most_hurt`` and ``fairness`` (per policy, trace and cluster: the seed means of
    :func:`fairness`)."""
    paired, figures = [], []
    for (trace, cluster, seed), jobs in tables.items():
        both = paired_jobs(jobs[a], jobs[b], tolerance)
        paired.append(both.assign(trace=trace, cluster=cluster, seed=seed))
        for label in (a, b):
            figures.append({"trace": trace, "cluster": cluster, "policy": label, "seed": seed,
                            **fairness(jobs[label], cluster_gpus[cluster])})
    both = pd.concat(paired, ignore_index=True)
    fair = pd.DataFrame(figures).groupby(["trace", "cluster", "policy"], sort=False).mean(numeric_only=True)
    return {"jobs": both, "overall": split(both), "by_gpus": split(both, "gpu_bucket"),
            "by_duration": split(both, "duration_bucket"), "most_hurt": most_hurt(both),
            "fairness": fair.drop(columns="seed").reset_index()}


def jobs_csv(both: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """The per-job CSV: trace, cluster, seed, job, its GPUs, JCT under each policy, ratio, effect, buckets."""
    return both.rename(columns={"jct_s_a": f"jct_s.{a}", "jct_s_b": f"jct_s.{b}", "num_gpus_a": "num_gpus",
                                "duration_a": "duration"})[
        ["trace", "cluster", "seed", "job_id", "num_gpus", "duration", f"jct_s.{a}", f"jct_s.{b}", "ratio", "effect",
         "gpu_bucket", "duration_bucket"]]


def summary_lines(parts: dict[str, pd.DataFrame], a: str, b: str) -> list[str]:
    """The drill-down's first two lines: what is compared, and the jobs helped, hurt and unchanged."""
    both = parts["jobs"]
    o = parts["overall"].iloc[0]
    return [f"{a} against {b}: {len(both):,} jobs over {both[['trace', 'cluster', 'seed']].drop_duplicates().shape[0]}"
            f" replay pair(s); ratio = JCT under {b} / JCT under {a} (> 1: {a} faster for the job)",
            f"helped by {a}: {o['helped']:.1%}  hurt: {o['hurt']:.1%}  unchanged: {o['unchanged']:.1%}"
            f"  (ratio p10 {o['ratio_p10']:.3f}, median {o['ratio_median']:.3f}, p90 {o['ratio_p90']:.3f})"]


def to_text(parts: dict[str, pd.DataFrame], a: str, b: str) -> str:
    """The drill-down for the terminal."""
    lines = [*summary_lines(parts, a, b), ""]
    for title, key in (("by GPU count", "by_gpus"), ("by duration (alone)", "by_duration")):
        lines += [title + ":", _frame_text(parts[key].assign(**{c: parts[key][c].map("{:.1%}".format)
                                                               for c in ("helped", "hurt", "unchanged")})), ""]
    hurt = parts["most_hurt"]
    lines += [f"the {len(hurt)} jobs {a} hurts most (times in s from the trace's start; a: {a}, b: {b}):",
              _frame_text(hurt) if len(hurt) else "  none", ""]
    fair = parts["fairness"]
    keep = ["trace", "cluster", "policy", "slowdown_mean", "slowdown_p95", "slowdown_p99", "slowdown_max",
            "ftf_rho_mean", "ftf_rho_max", "ftf_rho_over_1", *(k for k in JAIN if k in fair.columns)]
    lines += ["fairness and tails (seed means; slowdown = JCT / run time alone; ρ: Themis' finish-time fairness,"
              " JCT / time on an equal share of the training GPUs; jain_users / jain_vcs: Jain's index over the"
              " users' / VCs' mean slowdowns, 1 = all alike):", _frame_text(fair[keep])]
    if not_computed(fair):
        lines.append(not_computed(fair))
    tails = [c for c in fair.columns if c.startswith(("p95_", "p99_"))]
    if tails:
        shown = fair[["policy", *tails]].set_index("policy") / 3600
        lines += ["", "p95/p99 JCT and queueing by job size (hours):", _frame_text(shown.T.reset_index())]
    return "\n".join(lines)


def not_computed(fair: pd.DataFrame) -> str:
    """Which of Jain's indices the replays do not allow, and why ('' when both are there)."""
    missing = [f"{k} (the replays' jobs.parquet has no {c!r} column with two or more values: the trace names"
               " none)" for k, c in JAIN.items() if k not in fair.columns or fair[k].isna().all()]
    return "not computed: " + "; ".join(missing) if missing else ""


def _frame_text(frame: pd.DataFrame) -> str:
    return frame.to_string(index=False, float_format=lambda v: f"{v:,.3f}")


def write_page(parts: dict[str, pd.DataFrame], a: str, b: str, path: Path) -> Path:
    """``path`` (``drilldown.html``): :func:`to_html` with the per-job scatter inline."""
    from schedlab.sched.reporting import plots

    with tempfile.TemporaryDirectory() as tmp:
        svg = plots.job_scatter(parts["jobs"], a, b, Path(tmp) / "scatter.png").with_suffix(".svg")
        path.write_text(to_html(parts, a, b, svg.read_text()))
    return path


def to_html(parts: dict[str, pd.DataFrame], a: str, b: str, scatter_svg: str | None) -> str:
    """``drilldown.html``: the same tables as one self-contained page, with the per-job scatter."""
    import html

    from schedlab.sched.reporting.comparison_html import plain_page, plain_table

    body = [f"<pre>{html.escape(chr(10).join(summary_lines(parts, a, b)))}</pre>", scatter_svg or ""]
    for name, key in (("By GPU count", "by_gpus"), ("By duration", "by_duration"),
                      (f"The jobs {a} hurts most", "most_hurt"), ("Fairness and tails", "fairness")):
        body += [f"<h2>{html.escape(name)}</h2>", plain_table(parts[key])]
    if not_computed(parts["fairness"]):
        body.append(f"<p>{html.escape(not_computed(parts['fairness']))}</p>")
    return plain_page(f"{a} against {b}, job by job", "".join(body))
