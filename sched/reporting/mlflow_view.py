"""What the MLflow UI shows a researcher comparing schedulers: the content, not the logging calls
(those are :mod:`schedlab.tasks.mlflow_view`); pure functions, usable without MLflow.

- experiments open in MLflow's classic runs view: the experiment is tagged
  ``mlflow.experimentKind = custom_model_development`` (MLflow 3 versions that pick the view from
  the tag) and every link carries ``workflowType=machine_learning`` (MLflow >= 3.x picks the view
  from the UI's workflow switch, which that query parameter sets);
- standard tags on every run: ``mlflow.source.git.commit``, ``mlflow.user``, ``mlflow.source.name``
  and a note (``mlflow.note.content``);
- the comparison as runs: one run per (trace, cluster, policy) holding the seed means (``avg_jct_s``)
  and spreads (``avg_jct_s_std``) under the replay runs' metric keys (:func:`policy_run`), and the
  shared view that shows them (:func:`comparison_view_state`);
- the effective configuration of a replay (every policy parameter with its default, the preemption
  overhead the engine really charges) and its metrics (:func:`run_metrics`).
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import json
import math
import os
import re
import subprocess
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedlab.sched.reporting import compare, markdown

if TYPE_CHECKING:
    from schedlab.sched.spec import ExperimentReplay

KIND_TAG = "schedlab.kind"  # "replay" | "experiment" | "policy" | …
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # MLflow's classic (non-GenAI) experiment view
NOTE_TAG = "mlflow.note.content"
POLICY_ROW_TAG = "schedlab.policy_row"  # a policy run's identity within its comparison
COMPARISON_TAG = "schedlab.comparison_run"  # a policy run -> the experiment's parent run
VIEW_LINK_TAG = "schedlab.comparison_view"  # an experiment's link to its comparison view (its tags column)
POLICY_KIND = "policy"
REPLAYS_TAG = "schedlab.replays"  # a policy run's replays done/running/queued (live comparison)
VS_ABOVE_TAG = "schedlab.vs_above"  # the paired verdict against the policy ranked just above (compare.VS_ABOVE)
VS_BASELINE_TAG = "schedlab.vs_baseline"  # ... and against the baseline
RUN_COLOR_TAG = "mlflow.runColor"  # the UI's colour of a run (its table swatch, its bars and lines)
#: the runs view of a comparison: one row per policy
COMPARISON_FILTER = f"tags.`{KIND_TAG}` = '{POLICY_KIND}'"
#: MLflow's shared view states are experiment tags with this prefix (read by the UI's
#: ``viewStateShareKey`` query parameter: search facets and table/chart settings, as JSON)
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
VIEW_KEY = "schedlab-comparison"
#: a policy run's place in the comparison view: the baseline first, then the others best first
VIEW_ORDER = "view_order"
#: the times of the view in hours: ``avg_jct_s`` -> ``avg_jct_h``, its spread ``avg_jct_h_sd`` (short keys:
#: MLflow's runs table gives a metric column 100 px, about 12 characters, and cuts longer headers: the
#: view leaves out the spreads of queueing and makespan, ``avg_queue_h_sd`` and ``makespan_h_sd``)
HOUR_METRICS = tuple(m for m in (*compare.METRICS, *compare.OPTIONAL) if compare.in_hours(m))
#: the runs table's columns in the comparison view
VIEW_COLUMNS = (compare.RANK, "seeds", "avg_jct_h", "avg_jct_h_sd", "avg_jct_norm", "avg_wait_h", "avg_wait_h_sd",
                "avg_queue_h", "makespan_h", "p95_jct_h", "gpu_util", "preemptions")
#: the papers' normalised figures (policy ÷ baseline, as the headline bars draw them: < 1 is better), the
#: inverse of the table's ``*_speedup``, under keys short enough for the runs table's header
NORMALISED = {"avg_jct_speedup": "avg_jct_norm", "p95_jct_speedup": "p95_jct_norm", "makespan_speedup": "makespan_norm"}


def hours_key(metric: str) -> str:
    """The MLflow key of a seconds metric in hours: ``avg_jct_s`` -> ``avg_jct_h``."""
    return metric.removesuffix("_s") + "_h"


def hour_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """The :data:`HOUR_METRICS` of ``metrics`` (seconds) in hours, and their spreads (``_std`` ->
    ``_h_sd``), for MLflow's views; the seconds keys stay (the ranking and the CSV read them)."""
    out = {}
    for m in HOUR_METRICS:
        for key, shown in ((m, hours_key(m)), (compare.std_key(m), hours_key(m) + "_sd")):
            if _finite(metrics.get(key)):
                out[shown] = float(metrics[key]) / 3600.0
    return out


# ---------------------------------------------------------------------------------------------
# links and tags


def _base(uri: str, ui: str | None) -> str:
    from schedlab.settings import ui_base

    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else (ui or ui_base())


def runs_url(uri: str, experiment_id: str, search: str | None = None, ui: str | None = None) -> str:
    """The experiment's runs table in the classic view: the comparison view (:func:`comparison_view_state`:
    one row per policy, the headline columns, every run in the charts) unless ``search`` filters runs.
    A sqlite store's links go to the UI ``schedlab ui`` last served (``ui``, else :func:`settings.ui_base`)."""
    query = {"workflowType": "machine_learning"}
    if search:
        query["searchFilter"] = search
    else:
        query["viewStateShareKey"] = VIEW_KEY
    return f"{_base(uri, ui)}/#/experiments/{experiment_id}/runs?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


def run_url(uri: str, experiment_id: str, run_id: str | None = None, ui: str | None = None) -> str:
    """Where a run (or the experiment's runs) is in the MLflow UI, in its classic (not GenAI) view; a
    sqlite store's UI is ``ui``, else the one ``schedlab ui`` last served (:func:`settings.ui_base`)."""
    return (f"{_base(uri, ui)}/#/experiments/{experiment_id}" + (f"/runs/{run_id}" if run_id else "/runs")
            + "?workflowType=machine_learning")


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The full commit of the package's checkout (None outside a git checkout)."""
    root = Path(__file__).resolve().parents[2]
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def standard_tags(note: str | None = None) -> dict[str, str]:
    """MLflow's own tags for a run created through the client (which sets none of them)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = os.environ.get("USER", "unknown")
    tags = {"mlflow.user": user, "mlflow.source.name": "schedlab", "mlflow.source.type": "LOCAL"}
    if (commit := git_commit()) is not None:
        tags["mlflow.source.git.commit"] = commit
    if note:
        tags[NOTE_TAG] = note_text(note)
    return tags


def experiment_note(description: str | None, link: str | None) -> str | None:
    """The experiment's description (its ``mlflow.note.content``): the link to the comparison view first
    (MLflow's experiment list shows the description as plain text, the experiment page as markdown;
    nothing MLflow stores opens an experiment on a given view, see :func:`runs_url`), then the YAML's
    ``description`` as typed, never as markup."""
    parts = [f"Comparison view (classic runs view, baseline first): [{link}]({link})"] if link else []
    if description:
        parts.append(markdown.block(description.strip()))
    return note_text("\n\n".join(parts), 20000) if parts else None


def note_text(text: str, limit: int = 8000) -> str:
    """``text`` cut to MLflow's tag length at a line end (a table is never cut mid-row)."""
    if len(text) <= limit:
        return text
    tail = "\n\n… (cut: the full table is the artifact comparison.md)"
    return text[: text.rfind("\n", 0, limit - len(tail))] + tail


# ---------------------------------------------------------------------------------------------
# the comparison view


def comparison_view_state(rank_by: str = "avg_jct_s") -> dict[str, Any]:
    """The comparison view, one of the experiment's shared MLflow views: the policy runs only, the
    baseline first, then best first by ``rank_by`` (:data:`compare.RANKABLE`; sorted by the runs'
    :data:`VIEW_ORDER`), the headline metrics as columns (times in hours), every run (not only the first
    10) in the chart view. Row expansion cannot be shared (the UI drops it), hence policy runs at the top level."""
    columns = ([f"metrics.`{m}`" for m in VIEW_COLUMNS]
               + [f"tags.`{VS_BASELINE_TAG}`", f"tags.`{VS_ABOVE_TAG}`", "tags.`schedlab.same_as`", f"tags.`{REPLAYS_TAG}`"])
    charts, sections = chart_config(rank_by)
    return {"searchFilter": COMPARISON_FILTER, "orderByKey": f"metrics.`{VIEW_ORDER}`", "orderByAsc": True,
            "selectedColumns": columns, "columnOrder": columns,
            "runsHiddenMode": "SHOW_ALL", "hideEmptyCharts": True,
            "compareRunCharts": charts, "compareRunSections": sections, "isAccordionReordered": True}


#: the chart view's cards: one horizontal bar per policy run in the run's colour, its value written on
#: the bar, the card titled by the metric key
CHARTS = ("avg_jct_h", "avg_jct_norm", "p95_jct_h", "avg_wait_h", "makespan_h", "gpu_util")
#: MLflow's section of metrics without a ``/`` in their key
MODEL_SECTION = "Model metrics"


def policy_metric_keys() -> list[str]:
    """Every metric key a policy run can have (:func:`log_policy_runs`)."""
    return ["seeds", compare.RANK, VIEW_ORDER,
            *(k for m in (*compare.METRICS, *compare.OPTIONAL) for k in (m, compare.std_key(m))),
            *(k for m in HOUR_METRICS for k in (hours_key(m), hours_key(m) + "_sd")), *compare.RATIOS.values(),
            *NORMALISED.values()]


def chart_config(rank_by: str) -> tuple[list[dict], list[dict]]:
    """The chart view of the comparison (the UI's ``compareRunCharts`` and ``compareRunSections``
    view state, which a shared view carries): a bar card per :data:`CHARTS` metric over all
    runs (``runsCountToCompare``; MLflow's default is the first 10), ``rank_by`` first, two cards a
    row; every other metric of a policy run as a *deleted* card, which the UI keeps hidden (it adds
    a card for any metric that has none). MLflow's bar card has no error bars (its plotly trace sets
    ``x``, ``text`` and the colours only), so the spread is the ``*_std`` columns and comparison.html."""
    section = "schedlab-model-metrics"
    first = hours_key(rank_by) if rank_by in HOUR_METRICS else rank_by
    shown = [first, *(m for m in CHARTS if m != first)] if first in CHARTS else list(CHARTS)
    charts = [{"uuid": f"schedlab-{key}", "type": "BAR", "metricKey": key, "displayName": key,
               "metricSectionId": section, "runsCountToCompare": 1000, "deleted": False, "isGenerated": False}
              for key in shown]
    charts += [{"uuid": f"schedlab-{key}", "type": "BAR", "metricKey": key, "displayName": key,
                "metricSectionId": section, "runsCountToCompare": 1000, "deleted": True, "isGenerated": True}
               for key in policy_metric_keys() if key not in shown]
    sections = [{"uuid": section, "name": MODEL_SECTION, "display": True, "isReordered": True, "deleted": False,
                 "isGenerated": False, "columns": 2, "cardHeight": 520}]
    return charts, sections


# ---------------------------------------------------------------------------------------------
# effective configuration and metrics of a replay


def policy_params(policy: str, params: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Every parameter of ``policy`` (a policy spec; ``source``: a file policy's carried text): the
    given ones and the defaults of the rest (JSON values)."""
    from schedlab.sched.spec import PolicyRun

    return PolicyRun(name=policy, params=params, source=source).effective_params()


def preemption_overhead(policy: str, given: float | str | None, source: str | None = None) -> float | str:
    """The checkpoint-restore seconds a replay charges: the given value (seconds, or a table by GPU
    count as its canonical text, sched/core/restore.py), else the policy's default (the engine's rule)."""
    from schedlab.sched.policies import load_policy_class

    if isinstance(given, str):
        return given
    return float(load_policy_class(policy, source=source).default_preemption_overhead_s if given is None else given)


def policy_source_params(policy: str, source: str | None = None) -> dict[str, str]:
    """An external policy's lineage as run params: ``policy.spec`` and ``policy.source.*`` (its file's
    path and SHA-256, its package's version); none for a shipped policy (``code_version`` covers it)."""
    from schedlab.sched.policies import policy_origin

    origin = policy_origin(policy, source=source)
    return {} if origin is None else {"policy.spec": policy, **origin.params()}


def run_params(spec: ExperimentReplay) -> dict[str, str]:
    """The run's effective configuration: policy and *every* parameter of it (defaults included), an
    external policy's lineage (``policy.source.*``), the preemption overhead the engine charges (and
    whether it is the policy's default), trace and loader options, cluster, seed, model sources and
    code version."""
    params: dict[str, Any] = {
        "policy": spec.policy, "label": spec.label, "trace": spec.trace, "trace.label": spec.trace_label,
        "trace.source": spec.source or "synthetic", "trace.format": spec.format or "auto",
        "trace.annotate": spec.annotate, "cluster": spec.cluster, "seed": spec.seed,
        "placement": spec.placement,
        "preemption_overhead_s": preemption_overhead(spec.policy, spec.preemption_overhead_s, spec.policy_source),
        "preemption_overhead.source": "config" if spec.preemption_overhead_s is not None else "policy default",
        "code_version": spec.code_version,
    }
    params.update({f"params.{k}": json.dumps(v)
                   for k, v in sorted(policy_params(spec.policy, spec.params, spec.policy_source).items())})
    params.update(spec.policy_origin or {})  # an external policy's file path and SHA-256 (or package version)
    params.update({f"trace.option.{k}": v for k, v in sorted(spec.options.items()) if v is not None})
    params.update(model_params(spec))
    if spec.smact_profiles:
        params["smact_profiles"] = spec.smact_profiles
    params.update({f"inference.{k}": v for k, v in sorted((spec.inference or {}).items())})
    return {k: str(v)[:6000] for k, v in params.items()}


def model_params(spec: ExperimentReplay) -> dict[str, Any]:
    """The model sources a replay uses (``model.<name>``); the hook where model-version lineage goes."""
    return {f"model.{k}": v for k, v in sorted(spec.models.items())}


def flat_metrics(summary: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every numeric entry of a summary (nested dicts flattened with dots) as a metric."""
    out: dict[str, float] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_metrics(value, f"{name}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
        elif isinstance(value, bool):
            out[name] = float(value)
    return out


_METRIC_NAME = re.compile(r"[^0-9A-Za-z_\-. /]")


def run_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """A replay summary's numbers as MLflow metrics (names MLflow accepts; the seed is a param), the
    headline times in hours too (:func:`hour_metrics`)."""
    metrics = {_METRIC_NAME.sub("_", k): v for k, v in flat_metrics(summary).items() if k != "seed"}
    return {**metrics, **hour_metrics(metrics)}


def applied_metrics(result: Any) -> dict[str, float]:
    """``applied.<name>``: the jobs each model or option given to the replay applied to
    (:attr:`schedlab.sched.replay.ReplayResult.applied`)."""
    return {f"applied.{name}": float(count) for name, count in result.applied.items()}


# ---------------------------------------------------------------------------------------------
# the comparison as runs


def row_key(parent_run_id: str, trace: str, cluster: str, policy: str) -> str:
    return hashlib.sha256(f"{parent_run_id}\n{trace}\n{cluster}\n{policy}".encode()).hexdigest()[:32]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(key: str, value: float) -> float:
    """A policy run's metric rounded for MLflow's table (which prints every digit): seconds to 0.1 s,
    ratios and fractions to 3 decimals (comparison.csv keeps the exact values)."""
    return round(float(value), 1 if key.endswith(("_s", "_s_std")) or key.startswith("preemptions") else 3)


def policy_run(row: dict[str, Any], baseline: str, several: bool, colours: dict[str, str] | None = None,
               position: int | None = None) -> tuple[str, str, dict[str, float], dict[str, str]]:
    """What the policy run of a comparison ``row`` shows: its name, note, metrics (seed means under
    the replay keys, ``<key>_std`` spreads, the times in hours too (:func:`hour_metrics`), ``*_speedup``
    ratios and their inverses (:data:`NORMALISED`), its ``rank`` and ``position`` in the view (:data:`VIEW_ORDER`), rounded by :func:`_shown`)
    and tags (the note, ``same_as``, the tie, its colour, its replays done / running / queued);
    ``several``: the comparison has several (trace, cluster) groups."""
    label, seeds = row["policy"], int(row["seeds"])
    shown_label, text = markdown.text(label), markdown.text  # user text as text (sched/reporting/markdown.py)
    same = f"; identical results to {text(row[compare.SAME_AS])}" if row.get(compare.SAME_AS) else ""
    note = (f"**{shown_label}** on {text(row['trace'])} / {text(row['cluster'])}: mean and sample std over {seeds}"
            f" seed(s) (metric `<key>` and `<key>_std`); `*_speedup` = {text(baseline)} ÷ {shown_label}{same}.")
    name = f"{label} | {row['trace']} | {row['cluster']}" if several else label
    name = f"{name} (mean of {seeds} seed{'s' if seeds > 1 else ''})"
    metrics = {"seeds": seeds, **{k: row[k] for m in compare.headline(row) for k in (m, compare.std_key(m))},
               **{k: row[k] for k in compare.RATIOS.values()},
               **({compare.RANK: row[compare.RANK]} if compare.RANK in row else {}),
               **({VIEW_ORDER: position} if position is not None else {})}
    metrics.update(hour_metrics(metrics))
    metrics.update({norm: 1.0 / metrics[speedup] for speedup, norm in NORMALISED.items()
                    if _finite(metrics.get(speedup)) and metrics[speedup] > 0})
    shown = {k: _shown(k, v) for k, v in metrics.items() if _finite(v)}
    tags = {NOTE_TAG: note, "schedlab.same_as": row.get(compare.SAME_AS) or "", VS_ABOVE_TAG: row.get(compare.VS_ABOVE) or "",
            VS_BASELINE_TAG: row.get(compare.VS_BASELINE) or "",
            **({RUN_COLOR_TAG: colours[label]} if colours and label in colours else {}),
            **({REPLAYS_TAG: row[compare.PROGRESS]} if compare.PROGRESS in row else {})}
    return name, note, shown, tags
