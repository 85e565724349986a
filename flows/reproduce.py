"""The ``reproduce`` flow: the reproduction experiments, then our results beside the papers'.

One :func:`schedlab.flows.experiment.experiment_flow` per config (a subflow each, on the same Dask
cluster; every replay an MLflow run, resumable as usual), default the shipped reproduction configs:
the papers' own Pollux-method workloads ``castor-pollux`` (Castor Table 5, Fig. 16),
``sjf-bsbf-pollux`` (SJF-BSBF Table III, Fig. 6a) and ``sjf-bsbf-pollux-480`` (Table IV), the same
set-ups with the Philly trace's own durations ``castor-philly`` and ``sjf-bsbf-philly``, and
``castor-itp`` (the Castor Table 6 set-up on the ITP trace). From the replays'
``jobs.parquet`` it builds, per config, the paper-vs-ours table and the load sweep
(:mod:`schedlab.sched.reporting.reproduce`). Everything goes to a parent MLflow run ``reproduce-<date>``
(:mod:`schedlab.tasks.reproduce`), a Prefect markdown artifact ``reproduce`` and the terminal; with
``report_dir``, the HTML report (:mod:`schedlab.sched.reporting.paper_report`: a page per paper table,
ours as mean ± std over seeds, the plots) is written there and logged to the parent run under ``report/``.

>>> report = run_reproduce()                                  # the three shipped configs
>>> report = run_reproduce(["sjf-bsbf-philly"], dask_address="tcp://sched:8786")
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.states import Failed

from schedlab import settings
from schedlab.flows import REPRODUCE_CONFIGS
from schedlab.sched.reporting import reproduce as tables
from schedlab.sched.spec import load_config
from schedlab.tasks import reproduce as tracked, tracking

DEFAULT_CONFIGS = REPRODUCE_CONFIGS


@flow(name="reproduce", log_prints=True, persist_result=False)
def reproduce_flow(configs: list[str], tracking_uri: str, dask_address: str, artifact_root: str | None = None,
                   code_version: str | None = None, seeds: list[int] | None = None,
                   report_dir: str | None = None) -> dict[str, Any]:
    """Run each config's experiment (a subflow on the Dask cluster at ``dask_address``; ``seeds`` in
    place of each config's), then build, log and return the paper-vs-ours and load-sweep tables;
    with ``report_dir``, also the HTML report (:mod:`schedlab.sched.reporting.paper_report`), written there
    and logged under ``report/``."""
    from prefect_dask import DaskTaskRunner

    from schedlab.flows.experiment import experiment_flow
    from schedlab.sched.reporting.paper_report import ConfigResult, write_report

    started = time.perf_counter()
    uri, version = tracking_uri, code_version or tracking.code_version()
    root = Path(artifact_root) if artifact_root else None
    sections, all_tables, experiments, failures, results = [], {}, {}, {}, []
    for path in configs:
        config = load_config(path, seeds)
        state = experiment_flow.with_options(task_runner=DaskTaskRunner(address=dask_address))(
            str(config._path), uri, artifact_root, version, seeds=seeds, return_state=True)
        report = state.result(raise_on_failure=False)
        if isinstance(report, BaseException):  # the experiment itself crashed (not a replay)
            failures[config.name] = f"{type(report).__name__}: {report}"
            print(f"experiment {config.name} failed: {failures[config.name]}")
            report = None
        elif report.get("failures"):
            failures.update({f"{config.name}: {k}": v for k, v in report["failures"].items()})
        specs = config.grid(version)
        experiment_id = tracking.ensure_experiment(uri, config.name, root)
        jobs, run_ids = tracked.replay_jobs(uri, experiment_id, specs)
        found = tables.tables_for(config, specs, jobs)
        all_tables.update(found)
        if report_dir:
            results.append(ConfigResult.collect(config, specs, jobs, run_ids, experiment_id,
                                                report and report["parent_run_id"]))
        experiments[config.name] = {"parent_run_id": report and report["parent_run_id"],
                                    "experiment_id": experiment_id, "tables": list(found)}
        sections.append(tables.section(config, found, report))
        for name, frame in found.items():
            print(f"\n{name}:\n{frame.round(2).to_string()}")
    stamp = datetime.now(UTC)
    markdown = tables.document(sections, failures, stamp)
    pages = (lambda parent, experiment_id: write_report(
        Path(report_dir), results, parent_run_id=parent, experiment_id=experiment_id, tracking_uri=uri,
        code_version=version, stamp=stamp)) if report_dir else None
    run = tracked.log_reproduce(uri, root, version, stamp, markdown, all_tables, experiments, failures, pages, started)
    create_markdown_artifact(markdown, key="reproduce", description="reproduction experiments: paper vs ours")
    report = {**run, "tracking_uri": uri, "experiments": experiments, "tables": all_tables, "markdown": markdown,
              "failures": failures, "report": str(Path(report_dir) / "index.html") if report_dir else None}
    if failures:
        return Failed(message=f"reproduce: {len(failures)} failure(s)", data=report)
    return report


def run_reproduce(configs: list[str] | None = None, *, dask_address: str | None = None, workers: int | None = None,
                  tracking_uri: str | None = None, home: Path | None = None,
                  code_version: str | None = None, seeds: list[int] | None = None,
                  report_dir: str | Path | None = None) -> dict[str, Any]:
    """Validate every config (with ``seeds`` in place of its own) and ``report_dir`` (a folder that
    exists or can be created, writable), check the tracking store and the Dask address, then run
    :func:`reproduce_flow` on one Dask cluster (a LocalCluster unless ``dask_address``). Raises
    ConfigError, TrackingError, DaskUnreachable or ValueError (``report_dir``) before any work."""
    from schedlab import checks
    from schedlab.flows.orchestration import orchestration

    home = settings.Settings.from_env(home).apply().home
    logging.getLogger("distributed").setLevel(logging.WARNING)
    paths = [str(load_config(c, seeds)._path) for c in (configs or DEFAULT_CONFIGS)]  # ConfigError first
    if report_dir is not None:
        problem = checks.dir_problem(Path(report_dir))
        if problem:
            raise ValueError(f"report folder {report_dir}: {problem}")
        report_dir = str(Path(report_dir).resolve())
    with orchestration(home, tracking_uri, dask_address, workers) as run:
        state = reproduce_flow(paths, run.uri, run.address, run.artifact_root,
                               code_version or tracking.code_version(), seeds, report_dir, return_state=True)
    report = state.result(raise_on_failure=False)
    if isinstance(report, BaseException):
        raise report
    return report


__all__ = ["DEFAULT_CONFIGS", "reproduce_flow", "run_reproduce"]
