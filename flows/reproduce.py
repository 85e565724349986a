"""The ``reproduce`` flow: the reproduction experiments, then our results beside the papers'.

One :func:`schedlab.flows.experiment.experiment_flow` per config (a subflow each, on the same Dask
cluster; every replay an MLflow run, resumable as usual), default the shipped reproduction configs:
the papers' own Pollux-method workloads ``castor-pollux`` (Castor Table 5, Fig. 16),
``sjf-bsbf-pollux`` (SJF-BSBF Table III, Fig. 6a) and ``sjf-bsbf-pollux-480`` (Table IV), the same
set-ups with the Philly trace's own durations ``castor-philly`` and ``sjf-bsbf-philly``, and
``castor-itp`` (the Castor Table 6 set-up on the ITP trace). From the replays'
``jobs.parquet`` it builds, per config:

- the **paper-vs-ours table** (:func:`schedlab.sched.reporting.paper_tables.compare`) where
  ``conf/papers/tables.yaml`` has published numbers for the config (matched by its ``experiments``
  list): average JCT and queueing, all / large / small jobs, hours, seed means at the paper's load;
- the **load sweep**: average JCT (hours, seed means) per policy and load factor (Castor Fig. 16,
  SJF-BSBF Fig. 6a).

Everything goes to a parent MLflow run ``reproduce-<date>`` (experiment ``reproduce``:
``reproduce.md`` and one CSV per table, tagged with each experiment's comparison run), a Prefect
markdown artifact ``reproduce`` and the terminal; with ``report_dir``, the HTML report
(:mod:`schedlab.sched.reporting.paper_report`: a page per paper table, ours as mean ± std over seeds, the
plots) is written there and logged to the parent run under ``report/``.

>>> report = run_reproduce()                                  # the three shipped configs
>>> report = run_reproduce(["sjf-bsbf-philly"], dask_address="tcp://sched:8786")
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from schedlab import settings
from schedlab.flows import REPRODUCE_CONFIGS

import pandas as pd
from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.states import Failed
from schedlab.sched.spec import load_config
from schedlab.sched.reporting.mlflow_view import run_url
from schedlab.tasks import tracking
from schedlab.tasks.tracking import KIND_TAG, client, retrying

log = logging.getLogger("schedlab.reproduce")

DEFAULT_CONFIGS = REPRODUCE_CONFIGS
EXPERIMENT = "reproduce"
REPLAY_COLUMNS = ("num_gpus", "jct_s", "wait_s", "queue_s", "preemptions", "submit_time", "end_time", "deadline")
HOUR = 3600.0


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.2f}"
    return str(value)


def to_markdown(frame: pd.DataFrame, index: str) -> str:
    """A plain markdown table (numbers to 2 decimals, missing as —) with the index as first column."""
    frame = frame.reset_index().rename(columns={"index": index})
    head = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)




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


def tables_for(config: Any, specs: list[Any], jobs: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The config's tables: ``<paper table>`` (paper vs ours) when published numbers exist, and
    ``<config>__jct_by_load`` (average JCT in hours, policy x load; one per trace and cluster when
    the config has several)."""
    from schedlab.sched.reporting.paper_tables import compare, tables_for_experiment

    tables: dict[str, pd.DataFrame] = {}
    for name, spec in tables_for_experiment(config.name).items():
        at_load: dict[str, list[pd.DataFrame]] = {}
        for s in specs:
            if s.key in jobs and math.isclose(s.load, float(spec["load"])):
                at_load.setdefault(s.label, []).append(jobs[s.key])
        tables[name] = compare(name, at_load)
    groups = sorted({(s.trace, s.cluster) for s in specs})
    for trace, cluster in groups:
        cells: dict[tuple[str, float], list[float]] = {}
        for s in specs:
            if s.key in jobs and (s.trace, s.cluster) == (trace, cluster):
                cells.setdefault((s.label, s.load), []).append(float(jobs[s.key]["jct_s"].mean()) / HOUR)
        if not cells:
            continue
        labels = list(dict.fromkeys(s.label for s in specs))
        loads = sorted({load for _, load in cells})
        frame = pd.DataFrame({f"load {load:g}": [sum(cells[(p, load)]) / len(cells[(p, load)])
                                                 if (p, load) in cells else math.nan for p in labels]
                              for load in loads}, index=labels)
        suffix = "" if len(groups) == 1 else f"__{settings.path_name(trace)}__{settings.path_name(cluster)}"
        tables[f"{config.name}__jct_by_load{suffix}"] = frame
    return tables


def _section(config: Any, tables: dict[str, pd.DataFrame], report: dict[str, Any] | None) -> str:
    lines = [f"## {config.name}: {config.description or ''}".rstrip(": "), "",
             f"Seeds {config.seeds}; interference `{config.models.interference}`."]
    if report and report.get("failures"):
        lines.append(f"**{len(report['failures'])} replay(s) failed**; the tables use the others.")
    for name, frame in tables.items():
        lines.append("")
        if name.startswith(f"{config.name}__jct_by_load"):
            lines.append("Average JCT (hours, seed means) by load factor:")
            lines += ["", to_markdown(frame, "policy")]
        else:
            from schedlab.sched.reporting.paper_tables import paper_tables

            spec = paper_tables()[name]
            if spec.get("kind") == "ratios":
                lines.append(f"`{name}` at load {spec['load']} (ratios as the paper prints them: baseline / policy"
                             " for times in hours, policy / baseline for deadlines met; seed means):")
            else:
                lines.append(f"`{name}` at load {spec['load']} (hours; large = more than {spec['large_job_gpus']}"
                             " GPUs; `paper` = published, `ours` = this replay):")
            lines += ["", to_markdown(frame, "policy")]
    return "\n".join(lines) + "\n"


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

    started = time.perf_counter()
    uri = tracking_uri
    version = code_version or tracking.code_version()
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
        jobs, run_ids = replay_jobs(uri, experiment_id, specs)
        tables = tables_for(config, specs, jobs)
        all_tables.update(tables)
        if report_dir:
            from schedlab.sched.reporting.paper_report import ConfigResult

            results.append(ConfigResult.collect(config, specs, jobs, run_ids, experiment_id,
                                                report and report["parent_run_id"]))
        experiments[config.name] = {"parent_run_id": report and report["parent_run_id"],
                                    "experiment_id": experiment_id, "tables": list(tables)}
        sections.append(_section(config, tables, report))
        for name, frame in tables.items():
            print(f"\n{name}:\n{frame.round(2).to_string()}")

    stamp = datetime.now(UTC)
    markdown = (f"# Paper vs ours ({stamp:%Y-%m-%d})\n\n" + "\n".join(sections)
                + ("\n**Failures**:\n\n" + "\n".join(f"- {k}: {v}" for k, v in failures.items()) + "\n"
                   if failures else ""))
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
        for name, frame in all_tables.items():
            frame.rename_axis("policy").to_csv(out / "tables" / f"{settings.path_name(name)}.csv")
        retrying(lambda: c.log_artifact(parent, str(out / "reproduce.md")))
        retrying(lambda: c.log_artifacts(parent, str(out / "tables"), "tables"))
    if report_dir:
        from schedlab.sched.reporting.paper_report import write_report

        pages = write_report(Path(report_dir), results, parent_run_id=parent, experiment_id=experiment_id,
                             tracking_uri=uri, code_version=version, stamp=stamp)
        for page in pages:  # only this run's pages (the folder may hold others)
            retrying(lambda: c.log_artifact(parent, str(page), "report"))
        print(f"report: {pages[0]} ({len(pages)} pages; logged under report/ of run {parent})")
    retrying(lambda: c.log_metric(parent, "reproduce_wall_s", time.perf_counter() - started))
    retrying(lambda: c.set_terminated(parent, status="FAILED" if failures else "FINISHED"))
    create_markdown_artifact(markdown, key="reproduce", description="reproduction experiments: paper vs ours")
    report = {"parent_run_id": parent, "experiment_id": experiment_id, "tracking_uri": uri,
              "experiments": experiments, "tables": all_tables, "markdown": markdown, "failures": failures,
              "ui_url": run_url(uri, experiment_id, parent),
              "report": str(Path(report_dir) / "index.html") if report_dir else None}
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
    from schedlab.flows.experiment import orchestration

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


__all__ = ["DEFAULT_CONFIGS", "replay_jobs", "reproduce_flow", "run_reproduce", "tables_for"]
