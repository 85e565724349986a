"""What the MLflow UI shows a researcher comparing schedulers (docs/explanation/design.md "Track and compare").

- experiments open in MLflow's classic runs view: the experiment is tagged
  ``mlflow.experimentKind = custom_model_development`` (MLflow 3 versions that pick the view from
  the tag) and every link carries ``workflowType=machine_learning`` (MLflow >= 3.x picks the view
  from the UI's workflow switch, which that query parameter sets); the YAML ``description`` is the
  experiment's description (``mlflow.note.content``);
- standard tags on every run: ``mlflow.source.git.commit``, ``mlflow.user``, ``mlflow.source.name``
  and a note (``mlflow.note.content``);
- the comparison as runs: one child run of the experiment's parent run per (trace, cluster, policy)
  holding the seed means (``avg_jct_s``) and spreads (``avg_jct_s_std``) under the replay runs' metric
  keys, so that MLflow's table and chart views compare policies directly;
- the effective configuration of a replay (every policy parameter with its default, the preemption
  overhead the engine really charges).
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import math
import os
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

from schedlab.tasks import compare
from schedlab.tasks.tracking import KIND_TAG, client, retrying

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # MLflow's classic (non-GenAI) experiment view
NOTE_TAG = "mlflow.note.content"
POLICY_ROW_TAG = "schedlab.policy_row"  # a policy run's identity within its comparison
COMPARISON_TAG = "schedlab.comparison_run"  # a policy run -> the experiment's parent run
POLICY_KIND = "policy"
REPLAYS_TAG = "schedlab.replays"  # a policy run's replays done/running/queued (live comparison)
TIE_TAG = "schedlab.tie"  # "≈ <label>": within the seed spread of the policy ranked just above
RUN_COLOR_TAG = "mlflow.runColor"  # the UI's colour of a run (its table swatch, its bars and lines)
#: the runs view of a comparison: one row per policy
COMPARISON_FILTER = f"tags.`{KIND_TAG}` = '{POLICY_KIND}'"
#: MLflow's shared view states are experiment tags with this prefix (read by the UI's
#: ``viewStateShareKey`` query parameter: search facets and table/chart settings, as JSON)
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
VIEW_KEY = "schedlab-comparison"
#: the runs table's columns in the comparison view
VIEW_COLUMNS = ("seeds", "avg_jct_s", "avg_jct_s_std", "avg_jct_speedup", "avg_wait_s", "avg_wait_s_std", "avg_queue_s", "avg_queue_s_std",
                "makespan_s", "makespan_s_std", "p95_jct_s", "gpu_util", "preemptions")


# ---------------------------------------------------------------------------------------------
# links and tags


def _base(uri: str, ui: str | None) -> str:
    from schedlab.settings import ui_base

    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else (ui or ui_base())


def runs_url(uri: str, experiment_id: str, search: str | None = None, ui: str | None = None) -> str:
    """The experiment's runs table in the classic view: the comparison view (:func:`comparison_view`:
    one row per policy, the headline columns, every run in the charts) unless ``search`` filters runs.
    A sqlite store's links go to the UI ``schedlab ui`` last served (``ui``, else :func:`settings.ui_base`)."""
    query = {"workflowType": "machine_learning"}
    if search:
        query["searchFilter"] = search
    else:
        query["viewStateShareKey"] = VIEW_KEY
    return f"{_base(uri, ui)}/#/experiments/{experiment_id}/runs?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


def run_url(uri: str, experiment_id: str, run_id: str, ui: str | None = None) -> str:
    from schedlab.tasks.tracking import ui_url

    return ui_url(uri, experiment_id, run_id, ui)


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The full commit of the package's checkout (None outside a git checkout)."""
    root = Path(__file__).resolve().parents[1]
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


def note_text(text: str, limit: int = 8000) -> str:
    """``text`` cut to MLflow's tag length at a line end (a table is never cut mid-row)."""
    if len(text) <= limit:
        return text
    tail = "\n\n… (cut: the full table is the artifact comparison.md)"
    return text[: text.rfind("\n", 0, limit - len(tail))] + tail


def describe_experiment(uri: str, experiment_id: str, description: str | None) -> None:
    """Classic runs view and the YAML's description as the experiment's description (idempotent)."""
    c = client(uri)
    retrying(lambda: c.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND))
    if description:
        retrying(lambda: c.set_experiment_tag(experiment_id, NOTE_TAG, note_text(description.strip(), 20000)))


def comparison_view(uri: str, experiment_id: str, rank_by: str = "avg_jct_s") -> None:
    """Store the comparison view as one of the experiment's shared MLflow views: the policy runs only,
    best first by ``rank_by`` (:data:`compare.RANKABLE`), the headline metrics as columns, every run (not only the first 10) in the
    chart view. Row expansion cannot be shared (the UI drops it), hence policy runs at the top level."""
    import json

    columns = ([f"metrics.`{m}`" for m in VIEW_COLUMNS]
               + [f"tags.`{TIE_TAG}`", "tags.`schedlab.same_as`", f"tags.`{REPLAYS_TAG}`"])
    charts, sections = chart_config(rank_by)
    view = {"searchFilter": COMPARISON_FILTER, "orderByKey": f"metrics.`{rank_by}`",
            "orderByAsc": not compare.RANKABLE[rank_by],
            "selectedColumns": columns, "columnOrder": columns,
            "runsHiddenMode": "SHOW_ALL", "hideEmptyCharts": True,
            "compareRunCharts": charts, "compareRunSections": sections, "isAccordionReordered": True}
    c = client(uri)
    retrying(lambda: c.set_experiment_tag(experiment_id, SHARED_VIEW_PREFIX + VIEW_KEY, json.dumps(view)))


#: the chart view's cards: one horizontal bar per policy run in the run's colour, its value written on
#: the bar, the card titled by the metric key
CHARTS = ("avg_jct_s", "avg_jct_speedup", "p95_jct_s", "avg_wait_s", "makespan_s", "gpu_util")
#: MLflow's section of metrics without a ``/`` in their key
MODEL_SECTION = "Model metrics"


def policy_metric_keys() -> list[str]:
    """Every metric key a policy run can have (:func:`log_policy_runs`)."""
    return ["seeds", *(k for m in (*compare.METRICS, *compare.OPTIONAL) for k in (m, compare.std_key(m))),
            *compare.RATIOS.values()]


def chart_config(rank_by: str) -> tuple[list[dict], list[dict]]:
    """The chart view of the comparison (the UI's ``compareRunCharts`` and ``compareRunSections``
    view state, which a shared view carries): a bar card per :data:`CHARTS` metric over all
    runs (``runsCountToCompare``; MLflow's default is the first 10), ``rank_by`` first, two cards a
    row; every other metric of a policy run as a *deleted* card, which the UI keeps hidden (it adds
    a card for any metric that has none). MLflow's bar card has no error bars (its plotly trace sets
    ``x``, ``text`` and the colours only), so the spread is the ``*_std`` columns and comparison.html."""
    section = "schedlab-model-metrics"
    shown = [rank_by, *(m for m in CHARTS if m != rank_by)] if rank_by in CHARTS else list(CHARTS)
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
# effective configuration of a replay


def policy_params(policy: str, params: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Every parameter of ``policy`` (a policy spec; ``source``: a file policy's carried text): the
    given ones and the defaults of the rest (JSON values)."""
    from schedlab.sched.policies import make_policy

    return make_policy(policy, params, source=source).params.model_dump(mode="json")


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


# ---------------------------------------------------------------------------------------------
# the comparison as runs


def _row_key(parent_run_id: str, trace: str, cluster: str, policy: str) -> str:
    return hashlib.sha256(f"{parent_run_id}\n{trace}\n{cluster}\n{policy}".encode()).hexdigest()[:32]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(key: str, value: float) -> float:
    """A policy run's metric rounded for MLflow's table (which prints every digit): seconds to 0.1 s,
    ratios and fractions to 3 decimals (comparison.csv keeps the exact values)."""
    return round(float(value), 1 if key.endswith(("_s", "_s_std")) or key.startswith("preemptions") else 3)


def log_policy_runs(uri: str, experiment_id: str, parent_run_id: str, table, baseline: str,
                    params_of: dict[str, dict[str, str]] | None = None,
                    colours: dict[str, str] | None = None) -> dict[str, str]:
    """One FINISHED run per row of the comparison ``table``, tagged with ``parent_run_id`` but at the
    top level (MLflow's table shows children collapsed; a shared view cannot expand them); rows with no
    finished seed yet are skipped, and a run is renamed when its seed count grows: metrics are the
    row's seed means (replay keys), ``<key>_std`` spreads and ``*_speedup`` ratios; params the policy's
    (``params_of``: label -> params); ``colours``: label -> the colour of its plots, the run's colour in
    MLflow's table and charts (tag ``mlflow.runColor``). The same runs are updated when the experiment
    is re-run. Returns row key -> run id."""
    from mlflow.entities import Metric, Param, RunTag

    c = client(uri)
    existing = {}
    page = retrying(lambda: c.search_runs([experiment_id], filter_string=f"tags.`{COMPARISON_TAG}` = '{parent_run_id}'"
                                          f" and tags.`{KIND_TAG}` = '{POLICY_KIND}'", max_results=1000))
    for run in page:
        existing[run.data.tags.get(POLICY_ROW_TAG)] = run
    several = table[["trace", "cluster"]].drop_duplicates().shape[0] > 1 if len(table) else False
    now, out = int(time.time() * 1000), {}
    for row in table.to_dict("records"):
        label, seeds = row["policy"], int(row["seeds"])
        if seeds == 0:  # a live comparison's policy with no finished replay yet
            continue
        key = _row_key(parent_run_id, row["trace"], row["cluster"], label)
        same = f"; identical results to {row[compare.SAME_AS]}" if row.get(compare.SAME_AS) else ""
        note = (f"**{label}** on {row['trace']} / {row['cluster']}: mean and sample std over {seeds} seed(s)"
                f" (metric `<key>` and `<key>_std`); `*_speedup` = {baseline} ÷ {label}{same}.")
        run = existing.get(key)
        name = f"{label} | {row['trace']} | {row['cluster']}" if several else label
        name = f"{name} (mean of {seeds} seed{'s' if seeds > 1 else ''})"
        if run is None:
            run = retrying(lambda: c.create_run(experiment_id, run_name=name, tags={
                KIND_TAG: POLICY_KIND, COMPARISON_TAG: parent_run_id, POLICY_ROW_TAG: key,
                "schedlab.label": label, "schedlab.trace": str(row["trace"]), "schedlab.cluster": str(row["cluster"]),
                **standard_tags(note)}))
            params = {"label": label, "trace": row["trace"], "cluster": row["cluster"], "baseline": baseline,
                      **(params_of or {}).get(label, {})}
            retrying(lambda: c.log_batch(run.info.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()]))
        run_id = run.info.run_id
        if run.info.run_name != name:  # a live comparison: more seeds since the last update
            retrying(lambda: c.update_run(run_id, name=name))
        metrics = {"seeds": seeds, **{k: row[k] for m in compare.headline(row) for k in (m, compare.std_key(m))},
                   **{k: row[k] for k in compare.RATIOS.values()}}
        shown = {k: _shown(k, v) for k, v in metrics.items() if _finite(v)}
        tags = {NOTE_TAG: note, "schedlab.same_as": row.get(compare.SAME_AS) or "", TIE_TAG: row.get(compare.TIE) or "",
                **({RUN_COLOR_TAG: colours[label]} if colours and label in colours else {}),
                **({REPLAYS_TAG: row[compare.PROGRESS]} if compare.PROGRESS in row else {})}
        if not (shown.items() <= run.data.metrics.items() and tags.items() <= run.data.tags.items()):
            # a live comparison updates every row after each replay: only the rows that changed are written
            retrying(lambda: c.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in shown.items()],
                                         tags=[RunTag(k, v) for k, v in tags.items()]))
        if run.info.status != "FINISHED":
            retrying(lambda: c.set_terminated(run_id, status="FINISHED"))
        out[key] = run_id
    return out
