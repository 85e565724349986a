"""The MLflow view's logging calls: the experiment's description and shared comparison view, and the
comparison's policy runs. What they show is :mod:`schedlab.sched.reporting.mlflow_view`."""

from __future__ import annotations

import json
import time

from schedlab.sched.reporting import compare
from schedlab.sched.reporting.mlflow_view import (
    COMPARISON_TAG,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    NOTE_TAG,
    POLICY_KIND,
    POLICY_ROW_TAG,
    SHARED_VIEW_PREFIX,
    VIEW_KEY,
    VIEW_LINK_TAG,
    comparison_view_state,
    experiment_note,
    note_text,
    policy_run,
    row_key,
    runs_url,
    standard_tags,
)
from schedlab.tasks.tracking import KIND_TAG, client, retrying


def describe_experiment(uri: str, experiment_id: str, description: str | None, comparison: bool = False) -> None:
    """Classic runs view (``mlflow.experimentKind``, for the MLflow versions that read it) and the
    experiment's description: with ``comparison``, the link to its comparison view first (also the
    tag ``schedlab.comparison_view``), then the YAML's description (idempotent)."""
    c = client(uri)
    retrying(lambda: c.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND))
    link = runs_url(uri, experiment_id) if comparison else None
    if link:
        retrying(lambda: c.set_experiment_tag(experiment_id, VIEW_LINK_TAG, link))
    note = experiment_note(description, link)
    if note:
        retrying(lambda: c.set_experiment_tag(experiment_id, NOTE_TAG, note))


def comparison_view(uri: str, experiment_id: str, rank_by: str = "avg_jct_s") -> None:
    """Store the comparison view (:func:`~schedlab.sched.reporting.mlflow_view.comparison_view_state`)
    as one of the experiment's shared MLflow views."""
    view = comparison_view_state(rank_by)
    c = client(uri)
    retrying(lambda: c.set_experiment_tag(experiment_id, SHARED_VIEW_PREFIX + VIEW_KEY, json.dumps(view)))


def log_policy_runs(uri: str, experiment_id: str, parent_run_id: str, table, baseline: str,
                    params_of: dict[str, dict[str, str]] | None = None,
                    colours: dict[str, str] | None = None) -> dict[str, str]:
    """One FINISHED run per row of the comparison ``table``, tagged with ``parent_run_id`` but at the
    top level (MLflow's table shows children collapsed; a shared view cannot expand them); rows with no
    finished seed yet are skipped, and a run is renamed when its seed count grows: what it shows is
    :func:`~schedlab.sched.reporting.mlflow_view.policy_run`; params the policy's (``params_of``: label
    -> params); ``colours``: label -> the colour of its plots, the run's colour in MLflow's table and
    charts. The same runs are updated when the experiment is re-run. Returns row key -> run id."""
    from mlflow.entities import Metric, Param, RunTag

    c = client(uri)
    existing = {}
    page = retrying(lambda: c.search_runs([experiment_id], filter_string=f"tags.`{COMPARISON_TAG}` = '{parent_run_id}'"
                                          f" and tags.`{KIND_TAG}` = '{POLICY_KIND}'", max_results=1000))
    for run in page:
        existing[run.data.tags.get(POLICY_ROW_TAG)] = run
    several = table[["trace", "cluster"]].drop_duplicates().shape[0] > 1 if len(table) else False
    now, out = int(time.time() * 1000), {}
    for position, row in enumerate(compare.baseline_first(table, baseline).to_dict("records")):
        label = row["policy"]
        if int(row["seeds"]) == 0:  # a live comparison's policy with no finished replay yet
            continue
        key = row_key(parent_run_id, row["trace"], row["cluster"], label)
        name, note, shown, tags = policy_run(row, baseline, several, colours, position)
        run = existing.get(key)
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
        if not (shown.items() <= run.data.metrics.items() and tags.items() <= run.data.tags.items()):
            # a live comparison updates every row after each replay: only the rows that changed are written
            retrying(lambda: c.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in shown.items()],
                                         tags=[RunTag(k, v) for k, v in tags.items()]))
        if run.info.status != "FINISHED":
            retrying(lambda: c.set_terminated(run_id, status="FINISHED"))
        out[key] = run_id
    return out
