"""The ``reproduce`` flow's MLflow tracking: the finished replays' job tables read back from their runs,
and the parent run ``reproduce-<date>`` (experiment ``reproduce``) with ``reproduce.md``, one CSV per
table and, with a report folder, the HTML report's pages under ``report/``."""

from __future__ import annotations

import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from schedlab import settings
from schedlab.sched.reporting.mlflow_view import run_url
from schedlab.tasks import tracking
from schedlab.tasks.tracking import KIND_TAG, client, retrying

EXPERIMENT = "reproduce"
REPLAY_COLUMNS = ("num_gpus", "jct_s", "wait_s", "queue_s", "preemptions", "submit_time", "end_time", "deadline")


def replay_jobs(uri: str, experiment_id: str, specs: list[Any]) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """spec key -> its FINISHED replay's job table (from the run's ``jobs.parquet``), and spec key ->
    that run's id."""
    done = tracking.finished_by_key(uri, experiment_id, [s.key for s in specs])
    out: dict[str, pd.DataFrame] = {}
    with tempfile.TemporaryDirectory(prefix="schedlab-reproduce-") as tmp:
        for spec in specs:
            run = done.get(spec.key)
            if run is None:
                continue
            path = tracking.download(uri, run.info.run_id, "jobs.parquet", Path(tmp) / run.info.run_id)
            jobs = pd.read_parquet(path)  # ratio tables (Gimbal) also need submit/end times and deadlines
            out[spec.key] = jobs[[c for c in REPLAY_COLUMNS if c in jobs.columns]]
    return out, {key: run.info.run_id for key, run in done.items() if key in out}


def log_reproduce(uri: str, root: Path | None, version: str, stamp: datetime, markdown: str,
                  tables: dict[str, pd.DataFrame], experiments: dict[str, dict[str, Any]], failures: dict[str, str],
                  report_pages: Any = None, started: float | None = None) -> dict[str, Any]:
    """The parent run with ``markdown`` and the tables as artifacts (and the report's pages:
    ``report_pages(parent run id, experiment id)`` writes them and returns their paths), ended FAILED
    when anything failed.
    Returns the parent run's id, its experiment's id and link."""
    experiment_id = tracking.ensure_experiment(uri, EXPERIMENT, root)
    c = client(uri)
    tags = {KIND_TAG: "reproduce", "schedlab.code_version": version,
            **{f"schedlab.experiment_run_id.{n}": e["parent_run_id"] for n, e in experiments.items()
               if e["parent_run_id"]}}
    parent = retrying(lambda: c.create_run(experiment_id, run_name=f"reproduce-{stamp:%Y-%m-%d}", tags=tags)).info.run_id
    retrying(lambda: c.log_param(parent, "configs", ",".join(experiments)))
    with tempfile.TemporaryDirectory(prefix="schedlab-reproduce-") as tmp:
        out = Path(tmp)
        (out / "reproduce.md").write_text(markdown)
        (out / "tables").mkdir()
        for name, frame in tables.items():
            frame.rename_axis("policy").to_csv(out / "tables" / f"{settings.path_name(name)}.csv")
        retrying(lambda: c.log_artifact(parent, str(out / "reproduce.md")))
        retrying(lambda: c.log_artifacts(parent, str(out / "tables"), "tables"))
    if report_pages is not None:
        pages = report_pages(parent, experiment_id)
        for page in pages:  # only this run's pages (the folder may hold others)
            retrying(lambda: c.log_artifact(parent, str(page), "report"))
        print(f"report: {pages[0]} ({len(pages)} pages; logged under report/ of run {parent})")
    if started is not None:
        retrying(lambda: c.log_metric(parent, "reproduce_wall_s", time.perf_counter() - started))
    retrying(lambda: c.set_terminated(parent, status="FAILED" if failures else "FINISHED"))
    return {"parent_run_id": parent, "experiment_id": experiment_id, "ui_url": run_url(uri, experiment_id, parent)}
