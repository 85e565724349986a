"""An experiment's MLflow tracking on the driver: its parent (comparison) run, created once and resumed by
a re-run; the full comparison logged to it when the replays are done (figures from
:mod:`schedlab.sched.reporting.experiment`, the rest through :class:`~schedlab.tasks.live.LiveComparison`);
its counts and end; and the replay runs an interrupted experiment left in flight, ended KILLED."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from schedlab.sched.reporting import compare, mlflow_view
from schedlab.sched.reporting.markdown import block as md_block, text as md
from schedlab.sched.reporting.experiment import comparison_figures
from schedlab.sched.reporting.live import replay_row
from schedlab.sched.spec import ExperimentReplay, ExperimentSpec
from schedlab.tasks import tracking
from schedlab.tasks.live import LiveComparison
from schedlab.tasks.tracking import EXPERIMENT_KEY_TAG, KIND_TAG, client, retrying

log = logging.getLogger("schedlab.experiment")


def check_latest(config: ExperimentSpec, uri: str) -> None:
    """``models.*: latest``: a registered version of each such model exists in the store at ``uri``
    (ConfigError naming the file otherwise)."""
    from schedlab.sched.spec import LATEST, ConfigError
    from schedlab.tasks.model_tracking import resolve_latest

    if LATEST not in config.models.model_dump().values():
        return
    tracking.check_tracking(uri)
    try:
        resolve_latest(config.models.model_dump(), uri)
    except ValueError as err:
        raise ConfigError(f"{config._path}: models: {err}") from None


def grid(config: ExperimentSpec, uri: str, code_version: str | None = None) -> list[ExperimentReplay]:
    """The experiment's replays, ``models.*: latest`` fixed to the newest registered version (``models:/NAME/N``)."""
    from schedlab.sched.spec import ModelSources
    from schedlab.tasks.model_tracking import resolve_latest

    config.models = ModelSources(**resolve_latest(config.models.model_dump(), uri))
    return config.grid(code_version or tracking.code_version())


def open_experiment(uri: str, config: ExperimentSpec, artifact_root: str | None, rank_by: str) -> str:
    """The experiment's MLflow id, with its description and the shared comparison view set before any
    replay (links work from the first second)."""
    from schedlab.tasks.mlflow_view import comparison_view, describe_experiment

    experiment_id = tracking.ensure_experiment(uri, config.name, Path(artifact_root) if artifact_root else None)
    describe_experiment(uri, experiment_id, config.description, comparison=True)
    comparison_view(uri, experiment_id, rank_by)
    return experiment_id


def end_interrupted(uri: str, parent_run_id: str) -> None:
    """An interrupted experiment's comparison run (this process's: it holds the experiment's lock) ends
    KILLED, unless it ended meanwhile."""
    if retrying(lambda: client(uri).get_run(parent_run_id)).info.status == "RUNNING":
        retrying(lambda: client(uri).set_terminated(parent_run_id, status="KILLED"))
        print(f"interrupted: comparison run {parent_run_id} marked KILLED", flush=True)


def experiment_key(config: ExperimentSpec, specs: list[ExperimentReplay]) -> str:
    blob = config.name + "\n" + "\n".join(sorted(s.key for s in specs))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def artifact_key(name: str) -> str:
    """The Prefect markdown artifact's key of experiment ``name``."""
    return ("experiment-" + re.sub(r"[^a-z0-9-]+", "-", name.lower())).strip("-")[:100]


def parent_run(uri: str, experiment_id: str, config: ExperimentSpec, specs: list[ExperimentReplay],
               config_path: Path) -> str:
    """The experiment's parent run: the same one again when the same experiment is re-run."""
    c = client(uri)
    key = experiment_key(config, specs)
    existing = tracking.runs_with_tag(uri, experiment_id, EXPERIMENT_KEY_TAG, [key])
    if existing:
        run_id = min(existing, key=lambda r: r.info.start_time or 0).info.run_id
        retrying(lambda: c.update_run(run_id, status="RUNNING"))
    else:
        run = retrying(lambda: c.create_run(experiment_id, run_name=f"{config.name} (comparison)", tags={
            KIND_TAG: "experiment", EXPERIMENT_KEY_TAG: key, "schedlab.experiment": config.name,
            **mlflow_view.standard_tags(md_block(config.description) if config.description else None)}))
        run_id = run.info.run_id
        from mlflow.entities import Param

        params = {"experiment": config.name, "baseline": config.baseline_label, "replays": len(specs),
                  "policies": ",".join(e.label or e.name for e in config.policy_entries()),
                  "traces": ",".join(t.name for t in config.traces), "clusters": ",".join(config.clusters),
                  "seeds": ",".join(map(str, config.seeds)), "placement": config.placement,
                  "code_version": specs[0].code_version if specs else tracking.code_version(),
                  **{f"model.{k}": v for k, v in config.models.model_dump().items()}}
        retrying(lambda: c.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()]))
        retrying(lambda: c.log_artifact(run_id, str(config_path)))
    retrying(lambda: c.set_tag(run_id, "schedlab.config_path", str(config_path)))
    return run_id


def _download(uri: str, run: Any, name: str, folder: Path, columns: list[str] | None = None) -> Any:
    """A replay run's ``name`` artifact as a table; None (and a warning) when it cannot be read."""
    import pandas as pd

    try:
        return pd.read_parquet(tracking.download(uri, run.info.run_id, name, folder / run.info.run_id), columns=columns)
    except Exception as err:  # noqa: BLE001 - a plot less, not a failed experiment
        log.warning("no %s for run %s: %s", name, run.info.run_id, err)
        return None


def log_comparison(live: LiveComparison, done: dict[str, Any], suffix: str = "") -> tuple[Any, str]:
    """The full comparison on the parent run: the figures that need every replay's jobs, logged under
    ``plots/``, then :meth:`LiveComparison.publish` (table, policy runs, headline bars,
    ``comparison.html``, the note with the bars and CDFs inline). Returns (table, markdown)."""
    uri, rows, jobs, smact = live.uri, [], {}, {}
    with tempfile.TemporaryDirectory(prefix="schedlab-compare-") as tmp:
        out = Path(tmp)
        for spec in live.specs:
            run = done.get(spec.key)
            if run is None:
                continue
            rows.append(replay_row(spec, run.data.metrics))
            live.finished(spec, run.data.metrics)
            frame = _download(uri, run, "jobs.parquet", out / "dl", ["jct_s", "queue_s", "wait_s"])
            if frame is not None:
                jobs[spec.key] = frame
            if "smact_mean" in run.data.metrics and (frame := _download(uri, run, "smact.parquet", out / "dl")) is not None:
                smact[spec.key] = frame
        (out / "plots").mkdir()
        table = live.table()
        figures = comparison_figures(live.specs, jobs, smact, table, rows, live.config.baseline_label,
                                     live.styles, live.config.sweeps_load, out / "plots") if live.config.figures else []
        if any((out / "plots").iterdir()):
            retrying(lambda: client(uri).log_artifacts(live.parent_run_id, str(out / "plots"), "plots"))
        links = _drilldown(live, done, table, out)
        return live.publish(figures=figures, suffix=suffix, final=True, figures_as_of=len(jobs), links=links)


def _drilldown(live: LiveComparison, done: dict[str, Any], table: Any, out: Path) -> list[tuple[str, str]]:
    """``drilldown.html`` on the parent run: the policy ranked first against the baseline, job by job
    (:mod:`schedlab.sched.reporting.drilldown`, as ``schedlab compare`` draws it), over every trace, cluster
    and seed both have; the link to it for ``comparison.html`` (none when there is no such pair)."""
    from schedlab.sched.reporting import drilldown
    from schedlab.tasks.compare import cluster_gpus

    baseline = live.config.baseline_label
    leader = next((p for p in table["policy"] if p != baseline), None) if len(table) else None
    if leader is None:
        return []
    tables: dict[tuple[str, str, int], dict[str, Any]] = {}
    for spec in live.specs:
        run = done.get(spec.key)
        if run is not None and spec.label in (leader, baseline):
            frame = _download(live.uri, run, "jobs.parquet", out / "drill")
            if frame is not None:
                tables.setdefault((spec.trace_label, spec.cluster, spec.seed), {})[spec.label] = frame
    tables = {k: v for k, v in tables.items() if len(v) == 2}
    if not tables:
        return []
    parts = drilldown.drilldown(tables, leader, baseline, cluster_gpus(c for _, c, _ in tables))
    page = drilldown.write_page(parts, leader, baseline, out / "drilldown.html")
    retrying(lambda: client(live.uri).log_artifact(live.parent_run_id, str(page)))
    return [(f"{leader} against {baseline}, job by job (drilldown.html; any other pair: schedlab compare"
             f" {live.config.name} A B)", "drilldown.html")]


def finish(live: LiveComparison, failures: dict[str, str], todo: list[ExperimentReplay],
           started: float) -> dict[str, Any]:
    """The full comparison (table, plots, policy runs), the counts and the parent run's end: the report."""
    from prefect.artifacts import create_markdown_artifact
    from mlflow.entities import Metric

    uri, config, specs, parent = live.uri, live.config, live.specs, live.parent_run_id
    done = tracking.finished_by_key(uri, live.experiment_id, [s.key for s in specs])
    labels = {s.key: s.run_name for s in specs}
    failed = ("\n**Failed replays** (their MLflow runs are FAILED, with `error.txt`):\n\n" + "\n".join(
        f"- {md(labels[k])}: {md(msg)}" for k, msg in failures.items()) + "\n") if failures else ""
    table, markdown = log_comparison(live, done, failed)
    create_markdown_artifact(markdown, key=artifact_key(config.name),
                             description=f"experiment {md(config.name)}: comparison against {md(config.baseline_label)}")
    now = int(time.time() * 1000)
    counts = {"replays": len(specs), "replays_finished": len(done), "replays_failed": len(failures),
              "replays_run": len(todo), "replays_skipped": len(specs) - len(todo),
              "experiment_wall_s": time.perf_counter() - started}
    c = client(uri)
    retrying(lambda: c.log_batch(parent, metrics=[Metric(k, float(v), now, 0) for k, v in counts.items()]))
    retrying(lambda: c.set_terminated(parent, status="FAILED" if failures else "FINISHED"))
    return {
        "experiment": config.name, "experiment_id": live.experiment_id, "parent_run_id": parent,
        "tracking_uri": uri, "baseline": config.baseline_label, **counts,
        "failures": {labels[k]: msg for k, msg in failures.items()},
        "table": compare.to_text(table, config.baseline_label) + (f"\n{needed}" if (needed := live.seeds_needed(table)) else ""),
        "legend": compare.legend(config.baseline_label),
        "markdown": markdown, "ui_url": mlflow_view.runs_url(uri, live.experiment_id),
        "parent_url": mlflow_view.run_url(uri, live.experiment_id, parent),
    }


def update(live: LiveComparison, show: bool) -> None:
    """The parent run brought up to date after a finished replay when :meth:`LiveComparison.due` (always
    with ``show``: the ranked table and the replays in flight printed too). A failed update is a
    warning: the next one catches up."""
    if not (show or live.due()):
        return
    try:
        running = live.running()
        table, _ = live.publish(running)
    except Exception as err:  # noqa: BLE001 - the comparison is redone in full at the end
        log.warning("the live comparison could not be updated: %s", err)
        return
    if show:
        in_flight = live.in_flight(running)
        print(f"{len(live.rows)} of {len(live.specs)} replays finished, best first by {live.rank_by}:\n"
              + compare.to_text(table, live.config.baseline_label) + (f"\n{in_flight}" if in_flight else ""), flush=True)


def kill_orphaned_replays(uri: str, name: str, report: bool = False) -> list[str]:
    """Mark KILLED the replay runs of experiment ``name`` left RUNNING by a process no longer working
    on them (:func:`schedlab.tasks.tracking.is_live`: dead on this host, or its lease expired), as an
    interrupted experiment leaves those its stopped workers had in flight. Returns their ids; with
    ``report``, says so on stderr and never raises (the store may not exist yet: nothing ran)."""
    if report:
        killed: list[str] = []
        with contextlib.suppress(Exception):
            killed = kill_orphaned_replays(uri, name)
            print(f"interrupted: {len(killed)} replay run(s) in flight marked KILLED; finished replays are kept,"
                  " and running the same command again resumes", file=sys.stderr, flush=True)
        return killed
    c = client(uri)
    experiment = retrying(lambda: c.get_experiment_by_name(name))
    if experiment is None:
        return []
    killed = []
    for run in tracking.runs_with_tag(uri, experiment.experiment_id, KIND_TAG, ["replay"]):
        if run.info.status == "RUNNING" and not tracking.is_live(run):
            retrying(lambda: c.set_terminated(run.info.run_id, status="KILLED"))
            killed.append(run.info.run_id)
    return killed
