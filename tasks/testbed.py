"""A testbed session's runs in MLflow, like replays: one run per policy, with the comparison's figures as
metrics (:func:`schedlab.sched.reporting.testbed.metrics`) and the policy's folder (both per-job tables,
both activity logs, ``comparison.json``, ``comparison.html``) as artifacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from schedlab.sched.reporting.markdown import text as md
from schedlab.sched.reporting.mlflow_view import standard_tags
from schedlab.sched.reporting.testbed import metrics
from schedlab.tasks import tracking


def log_session(uri: str, experiment: str, artifact_root: Path | None, spec: Any, out: Path) -> dict[str, str]:
    """Log each policy of the session written in ``out`` (``spec``: its :class:`TestbedSpec`); returns
    policy label -> run id."""
    from mlflow.entities import Metric, Param, RunTag

    c = tracking.client(uri)
    experiment_id = tracking.ensure_experiment(uri, experiment, artifact_root)
    runs: dict[str, str] = {}
    for policy in spec.policies:
        folder = out / policy.label
        comparison = json.loads((folder / "comparison.json").read_text())
        note = (f"Testbed run of **{md(policy.label)}** (policy {md(policy.name)}) on {md(spec.device)} devices,"
                f" compared with its replay on the node's own models.")
        tags = {"schedlab.kind": "testbed", "schedlab.policy": policy.name, "schedlab.label": policy.label,
                **standard_tags(note)}
        run = tracking.retrying(lambda: c.create_run(experiment_id, run_name=f"{policy.label} | testbed", tags=tags))
        params = {"policy": policy.name, "label": policy.label, "device": spec.device,
                  "trace": str(spec.trace) if spec.trace else f"generated:{spec.generate}",
                  "seed": str(spec.seed), "placement": spec.placement, "jobs": str(comparison["real"]["jobs"]),
                  "tolerance_s": str(comparison["tolerance_s"]), "code_version": tracking.code_version(),
                  **{f"params.{k}": json.dumps(v) for k, v in policy.params.items()}}
        values = metrics(comparison)
        tracking.retrying(lambda: c.log_batch(run.info.run_id, params=[Param(k, v[:6000]) for k, v in params.items()],
                                              metrics=[Metric(k, v, 0, 0) for k, v in values.items()],
                                              tags=[RunTag("schedlab.decisions",
                                                           "identical" if values["decisions_identical"] else "differ")]))
        tracking.retrying(lambda: c.log_artifacts(run.info.run_id, str(folder)))
        tracking.retrying(lambda: c.set_terminated(run.info.run_id, status="FINISHED"))
        runs[policy.label] = run.info.run_id
    return runs


def session_task(spec: Any) -> int:
    """The testbed session (``profiling/testbed/session.py``) as a Prefect task: its exit code."""
    from prefect import task

    from schedlab.profiling.testbed.session import execute

    return task(name="testbed session", persist_result=False)(execute)(spec)


def log_task(uri: str, experiment: str, artifact_root: Path | None, spec: Any) -> dict[str, str]:
    """:func:`log_session` as a Prefect task."""
    from prefect import task

    return task(name="log testbed runs", persist_result=False)(log_session)(uri, experiment, artifact_root, spec,
                                                                               spec.out)
