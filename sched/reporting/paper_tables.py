"""Paper-vs-ours tables for the reproduction experiments (Castor Table 5, SJF-BSBF Tables III-IV).

The published numbers are in ``conf/papers/tables.yaml``; ours are computed from the replays' job
tables (averaged over seeds), split into large and small jobs at the paper's threshold and
aggregated the way the paper does (``class_average``: each class's own mean, or its share of the
all-jobs mean as in Castor Table 5, where All = Large + Small).

Tables of ``kind: ratios`` (Gimbal §7.2-7.3) compare a policy with a baseline on one metric each, as
the paper prints its results: baseline / policy for times (``avg_jct``, ``avg_wait``, ``makespan``),
policy / baseline for ``deadline_met`` (jobs ending by their deadline). ``kind: figures`` tables hold
published numbers that are not replay metrics (compared by hand).

Tables of ``kind: schemes`` (Lyra Table 5) give one row per scheme (an experiment label) with absolute
columns (:data:`SCHEME_COLUMNS`: queueing and JCT mean / median / p95 in seconds, training and overall
GPU usage, preemption ratio); ours are seed means of :func:`scheme_metrics`, and both sides get the
reductions the paper quotes: ``vs baseline`` = baseline / row and ``vs reference`` = row / reference
row (Lyra's "Reduction = scheme / Lyra", §7.1) for mean queueing, mean JCT and the preemption ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from schedlab import conf

TABLES = conf.path("papers", "tables.yaml")
HOUR = 3600.0


def paper_tables(path: Path = TABLES) -> dict[str, dict]:
    """The published tables, each with its report fields checked (:func:`check_report_fields`)."""
    tables = yaml.safe_load(path.read_text())
    for name, spec in tables.items():
        check_report_fields(name, spec, path)
    return tables


#: ``load_sweep:`` keys (the paper's figure of average JCT by load factor, e.g. Castor Fig. 16)
LOAD_SWEEP_KEYS = {"figure", "points"}
#: ``calibration:`` entry keys: a parameter of our set-up fitted to one of the table's rows
CALIBRATION_KEYS = {"name", "value", "fitted_to", "experiment", "note"}


def check_report_fields(name: str, spec: dict, path: Path = TABLES) -> None:
    """The optional fields the HTML report reads (``schedlab reproduce --report``), checked so that a
    typo fails here, naming the table and the key, not on a page:

    - ``calibration:`` a list of ``{name, value, fitted_to, experiment?, note?}``: a parameter of our
      set-up fitted to the table, ``fitted_to`` one of its rows, ``experiment`` the one config of the
      table's ``experiments`` that carries it (absent: the set-up of all of them);
    - ``causes:`` ``row`` or ``row/column`` -> the measured cause of that row's (cell's) miss, short text;
    - ``load_sweep:`` ``{figure, points}``: the paper's load-sweep figure and its printed points
      (``policy -> {load: value}``, hours), ``null`` when the paper prints none;
    - ``measured_seeds:`` the seeds the values of a flat ``measured:`` block (``kind: ratios``,
      ``schemes``, ``figures``) are means of, required with such a block (``classes`` tables give
      ``seeds`` per config in ``measured:``), so the report prints every recorded mean with its seeds."""
    where = f"{path.name}: {name}"
    rows = spec.get("rows") or {}
    columns = spec.get("columns") or []
    calibration = spec.get("calibration")
    if calibration is not None:
        if not isinstance(calibration, list):
            raise ValueError(f"{where}: calibration: expected a list of {{name, value, fitted_to}}")
        for i, entry in enumerate(calibration):
            if not isinstance(entry, dict) or not {"name", "value", "fitted_to"} <= set(entry):
                raise ValueError(f"{where}: calibration[{i}]: needs name, value and fitted_to")
            if set(entry) - CALIBRATION_KEYS:
                raise ValueError(f"{where}: calibration[{i}]: unknown key(s) {sorted(set(entry) - CALIBRATION_KEYS)};"
                                 f" allowed {sorted(CALIBRATION_KEYS)}")
            if "experiment" in entry and entry["experiment"] not in spec.get("experiments", []):
                raise ValueError(f"{where}: calibration[{i}].experiment: {entry['experiment']!r} is not one of the"
                                 f" table's experiments ({', '.join(spec.get('experiments', []))})")
            if entry["fitted_to"] not in rows:
                raise ValueError(f"{where}: calibration[{i}].fitted_to: {entry['fitted_to']!r} is not a row of the"
                                 f" table ({', '.join(rows)})")
    causes = spec.get("causes")
    if causes is not None:
        if not isinstance(causes, dict):
            raise ValueError(f"{where}: causes: expected a mapping of row or row/column -> text")
        for key, text in causes.items():
            row, _, column = str(key).partition("/")
            if row not in rows:
                raise ValueError(f"{where}: causes: {key!r}: {row!r} is not a row of the table ({', '.join(rows)})")
            if column and column not in columns:
                raise ValueError(f"{where}: causes: {key!r}: {column!r} is not a column of the table"
                                 + (f" ({', '.join(columns)})" if columns else " (it has none: give the row alone)"))
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{where}: causes: {key!r}: expected the cause as text")
    if spec.get("kind", "classes") != "classes" and spec.get("measured") is not None:
        seeds = spec.get("measured_seeds")
        if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
            raise ValueError(f"{where}: measured_seeds: expected the number of seeds the `measured:` values are"
                             f" means of (an integer >= 1), got {seeds!r}")
    elif "measured_seeds" in spec:
        raise ValueError(f"{where}: measured_seeds: only for a flat `measured:` block (kind ratios, schemes or"
                         " figures); a classes table gives `seeds` per config under `measured:`")
    sweep = spec.get("load_sweep")
    if sweep is not None:
        if not isinstance(sweep, dict) or set(sweep) != LOAD_SWEEP_KEYS or not isinstance(sweep["figure"], str):
            raise ValueError(f"{where}: load_sweep: expected {{figure: text, points: null or policy -> {{load: hours}}}}")
        for policy, points in (sweep["points"] or {}).items():
            if not isinstance(points, dict) or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in [*points, *points.values()]):
                raise ValueError(f"{where}: load_sweep.points: {policy!r}: expected {{load: hours}}")


CLASS_AVERAGES = ("mean", "share")


KINDS = ("classes", "ratios", "figures", "schemes")
#: metric -> whether lower is better (the ratio is then baseline / policy)
RATIO_METRICS = {"avg_jct": True, "avg_wait": True, "makespan": True, "deadline_met": False}


def tables_for_experiment(experiment: str) -> dict[str, dict]:
    """The published tables that ``experiment`` (a config name) is compared with."""
    return {name: spec for name, spec in paper_tables().items() if experiment in spec["experiments"]}


def metric_value(jobs: pd.DataFrame, metric: str) -> float:
    """One replay's ``metric`` from its job table: hours for times, a job count for ``deadline_met``."""
    if metric == "avg_jct":
        return float(jobs["jct_s"].mean()) / HOUR
    if metric == "avg_wait":
        return float(jobs["wait_s"].mean()) / HOUR
    if metric == "makespan":
        return float(jobs["end_time"].max() - jobs["submit_time"].min()) / HOUR
    if metric == "deadline_met":
        if "deadline" not in jobs.columns:
            return float("nan")
        return float((jobs["end_time"] <= jobs["deadline"]).sum())
    raise ValueError(f"unknown ratio metric {metric!r}; choose one of {sorted(RATIO_METRICS)}")


def compare_ratios(table_name: str, jobs_by_policy: dict[str, list[pd.DataFrame]]) -> pd.DataFrame:
    """Rows: the table's rows; columns: baseline and policy values (seed means), our ratio, the paper's.
    Missing replays (a policy not run) leave NaN."""
    spec = paper_tables()[table_name]
    out = {}
    for row, r in spec["rows"].items():
        values = []
        for label in (r["baseline"], r["policy"]):
            runs = jobs_by_policy.get(label, [])
            values.append(sum(metric_value(j, r["metric"]) for j in runs) / len(runs) if runs else float("nan"))
        base, ours = values
        ratio = (base / ours if RATIO_METRICS[r["metric"]] else ours / base) if base and ours else float("nan")
        out[row] = {"metric": r["metric"], "baseline": r["baseline"], "policy": r["policy"],
                    "baseline ours": base, "policy ours": ours, "ratio ours": ratio, "ratio paper": float(r["paper"])}
    return pd.DataFrame.from_dict(out, orient="index")


def our_row(jobs: pd.DataFrame, large_job_gpus: int, class_average: str = "mean") -> list[float]:
    """avg JCT and avg queueing (hours) for all / large / small jobs of one replay.
    Queueing is all time without GPUs (Castor §9.2), which equals time to first start without preemption.
    ``class_average="share"`` divides each class's sum by the number of ALL jobs (Castor Table 5)."""
    if class_average not in CLASS_AVERAGES:
        raise ValueError(f"class_average must be one of {CLASS_AVERAGES}, not {class_average!r}")
    large = jobs["num_gpus"] > large_job_gpus
    row = []
    for column in ("jct_s", "wait_s"):
        for part in (jobs, jobs[large], jobs[~large]):
            count = len(jobs) if class_average == "share" else len(part)
            row.append(float(part[column].sum()) / count / HOUR if len(part) else float("nan"))
    return row


def compare(table_name: str, jobs_by_policy: dict[str, list[pd.DataFrame]],
            summaries: dict[str, list[dict]] | None = None) -> pd.DataFrame:
    """Rows: policy; columns: each metric as ``ours`` and ``paper`` (hours), averaged over seeds
    (``kind: ratios`` tables: :func:`compare_ratios`; ``kind: schemes``: :func:`compare_schemes`, which
    also reads the replays' ``summaries`` for GPU usage)."""
    spec = paper_tables()[table_name]
    if spec.get("kind", "classes") not in KINDS:
        raise ValueError(f"conf/papers/tables.yaml: {table_name} has kind {spec['kind']!r}; choose one of {KINDS}")
    if spec.get("kind") == "figures":
        raise ValueError(f"conf/papers/tables.yaml: {table_name} is `kind: figures` (published numbers that are"
                         " not replay metrics): nothing to compare with job tables")
    if spec.get("kind", "classes") == "ratios":
        return compare_ratios(table_name, jobs_by_policy)
    if spec.get("kind") == "schemes":
        return compare_schemes(table_name, jobs_by_policy, summaries)
    rows = {}
    for policy, replays in jobs_by_policy.items():
        ours = pd.DataFrame([our_row(j, spec["large_job_gpus"], spec.get("class_average", "mean"))
                             for j in replays]).mean().tolist()
        paper = spec["rows"].get(policy, [float("nan")] * len(spec["columns"]))
        rows[policy] = {f"{c} ours": o for c, o in zip(spec["columns"], ours)} | {
            f"{c} paper": p for c, p in zip(spec["columns"], paper)
        }
    for policy, paper in spec["rows"].items():
        if policy not in rows:  # in the paper, not implemented here (e.g. Pollux)
            rows[policy] = {f"{c} paper": p for c, p in zip(spec["columns"], paper)}
    ordered = [f"{c} {who}" for c in spec["columns"] for who in ("ours", "paper")]
    return pd.DataFrame.from_dict(rows, orient="index").reindex(columns=ordered)


@dataclass(frozen=True)
class RowOrder:
    """How a table's rows rank on one column, the paper's and ours (lowest first), and the longest run of
    rows that keep the paper's order in ours: the reading of a claim such as "castor < sjf < fifo"."""

    paper: list[str]
    ours: list[str]
    kept: list[str]

    @classmethod
    def of(cls, paper: dict[str, float], ours: dict[str, float]) -> RowOrder:
        """Rows with a finite value on both sides; ``kept`` is the longest subsequence of the paper's order
        whose values rise in ours too (ties in ours break it)."""
        rows = [r for r in paper if math.isfinite(paper[r]) and math.isfinite(ours.get(r, math.nan))]
        by_paper = sorted(rows, key=lambda r: paper[r])
        best: list[list[str]] = []  # best[i]: the longest kept run ending at by_paper[i]
        for i, row in enumerate(by_paper):
            runs = [best[j] for j in range(i) if ours[by_paper[j]] < ours[row]]
            best.append(max(runs, key=len, default=[]) + [row])
        return cls(by_paper, sorted(rows, key=lambda r: ours[r]), max(best, key=len, default=[]))


#: Lyra Table 5's columns (docs/explanation/lyra.md)
SCHEME_COLUMNS = ("queue_mean_s", "queue_p50_s", "queue_p95_s", "jct_mean_s", "jct_p50_s", "jct_p95_s",
                  "usage_training", "usage_overall", "preemption_ratio")
#: the columns whose reductions the paper quotes (lower is better for all three)
REDUCED = ("queue_mean_s", "jct_mean_s", "preemption_ratio")


def window_usage(utilization: pd.DataFrame, t0: float, t1: float, training_gpus: int, gpus_per_server: int = 8,
                 inference_gpus: int = 0, inference_busy: float = 0.0) -> tuple[float, float, float]:
    """GPU usage over the window ``[t0, t1)`` (the trace's 15 days of submissions: Table 5's period,
    not the replay's makespan, which a few long jobs stretch to weeks): ``(training, overall, on_loan)``.
    ``utilization`` is the replay's step series (``time``, ``busy_gpus`` and, with pools,
    ``servers_on_loan`` and ``onloan_busy_gpus``). Training = busy GPU-seconds on the training servers
    (``busy_gpus`` less ``onloan_busy_gpus``) over their GPUs x window. Overall = (all busy GPU-seconds +
    ``inference_busy``, what the inference load itself used) over all GPUs x window, raw counts (spec
    A14); NaN without inference GPUs. On-loan = busy over lent GPU-seconds in the window (Lyra §7.3
    Fig. 9's "resource usage of on-loan servers"); NaN when nothing was lent."""
    if not t1 > t0:
        return math.nan, math.nan, math.nan
    times = utilization["time"].to_numpy(float)
    ends = np.append(times[1:], np.inf)  # each value holds from its time to the next change
    widths = np.clip(np.minimum(ends, t1) - np.maximum(times, t0), 0.0, None)

    def integral(column: str) -> float:
        return float((utilization[column].to_numpy(float) * widths).sum()) if column in utilization.columns else 0.0

    busy_s, onloan_busy_s = integral("busy_gpus"), integral("onloan_busy_gpus")
    lent_s = integral("servers_on_loan") * gpus_per_server
    training = (busy_s - onloan_busy_s) / (training_gpus * (t1 - t0))
    overall = ((busy_s + inference_busy) / ((training_gpus + inference_gpus) * (t1 - t0))
               if inference_gpus else math.nan)
    return training, overall, onloan_busy_s / lent_s if lent_s > 0 else math.nan


def scheme_metrics(jobs: pd.DataFrame, summary: dict | None = None) -> dict[str, float]:
    """One replay's Table 5 columns. Queueing = submission to first start (``queue_s``); usage from
    the replay summary: ``window_training_usage`` / ``window_overall_usage`` (:func:`window_usage`)
    when present, else the makespan figures ``training_usage`` (replays with pools, else ``gpu_util``)
    and ``overall_usage_raw`` (training + inference GPUs, raw counts; ours), NaN without a summary;
    preemption ratio = preemptions / jobs (Table 5 note 2)."""
    summary = summary or {}
    queue = jobs["queue_s"] if "queue_s" in jobs.columns else jobs["start_time"] - jobs["submit_time"]
    jct = jobs["jct_s"]
    nan = float("nan")
    return {
        "queue_mean_s": float(queue.mean()), "queue_p50_s": float(queue.quantile(0.5)),
        "queue_p95_s": float(queue.quantile(0.95)),
        "jct_mean_s": float(jct.mean()), "jct_p50_s": float(jct.quantile(0.5)), "jct_p95_s": float(jct.quantile(0.95)),
        "usage_training": float(summary.get("window_training_usage", summary.get(
            "training_usage", summary.get("gpu_util", nan)))),
        "usage_overall": float(summary.get("window_overall_usage", summary.get("overall_usage_raw", nan))),
        "preemption_ratio": float(jobs["preemptions"].sum() / len(jobs)) if "preemptions" in jobs.columns else nan,
    }


def _ratio(a: float, b: float) -> float:
    return a / b if not (math.isnan(a) or math.isnan(b)) and b > 0 else float("nan")


def compare_schemes(table_name: str, jobs_by_policy: dict[str, list[pd.DataFrame]],
                    summaries: dict[str, list[dict]] | None = None) -> pd.DataFrame:
    """Rows: the table's rows (then any other label replayed); columns: each of the table's columns as
    ``ours`` / ``paper`` (seed means), then ``<column> vs <baseline>`` (baseline / row) and
    ``<column> vs ref`` (row / the row's ``reference``) for :data:`REDUCED`, ours and paper."""
    spec = paper_tables()[table_name]
    columns = spec["columns"]
    nan = float("nan")
    ours: dict[str, dict[str, float]] = {}
    for label, runs in jobs_by_policy.items():
        sums = (summaries or {}).get(label) or [None] * len(runs)
        rows = pd.DataFrame([scheme_metrics(j, s) for j, s in zip(runs, sums)])
        ours[label] = {c: float(rows[c].mean(skipna=False)) for c in columns}  # a seed without it: NaN
    paper = {label: {c: (nan if v is None else float(v)) for c, v in zip(columns, r["paper"])}
             for label, r in spec["rows"].items()}
    base = spec["baseline"]
    out = {}
    for label in list(spec["rows"]) + [k for k in ours if k not in spec["rows"]]:
        meta = spec["rows"].get(label, {})
        row: dict[str, float | str] = {"row": meta.get("row", ""), "group": meta.get("group", ""),
                                       "reference": meta.get("reference", "")}
        for c in columns:
            row[f"{c} ours"] = ours.get(label, {}).get(c, nan)
            row[f"{c} paper"] = paper.get(label, {}).get(c, nan)
        ref = meta.get("reference")
        for c in REDUCED:
            for who, values in (("ours", ours), ("paper", paper)):
                here = values.get(label, {}).get(c, nan)
                row[f"{c} vs {base} {who}"] = _ratio(values.get(base, {}).get(c, nan), here) if c != "preemption_ratio" else nan
                row[f"{c} vs ref {who}"] = _ratio(here, values.get(ref, {}).get(c, nan)) if ref else nan
        out[label] = row
    return pd.DataFrame.from_dict(out, orient="index")
