"""The nightly flow's MLflow tracking (experiment ``models``): a parent run ``nightly-<date>`` holding one
child run per profiling task (``schedlab.kind=profile``) and one per fit (``schedlab.kind=fit``, tagged
``schedlab.profile_run_id`` and ``schedlab.nightly_run_id``); the parent carries
``schedlab.profile_run_id``, ``schedlab.fit_run_id.<model>`` and ``schedlab.model_version.<model>``."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from schedlab import settings
from schedlab.sched.reporting.mlflow_view import run_url
from schedlab.tasks import tracking
from schedlab.tasks.fit import KINDS, fit_task
from schedlab.tasks.tracking import ERROR_TAG, KIND_TAG, PARENT_TAG, client, retrying

#: the MLflow experiment of the nightly runs: the fits' own (``tasks/model_tracking.EXPERIMENT``),
#: so that the fit runs nest under the nightly run in the UI
EXPERIMENT = "models"
NIGHTLY_TAG = "schedlab.nightly_run_id"
PROFILE_TAG = "schedlab.profile_run_id"


def start_run(uri: str, home: Path, sweep: dict[str, Any], params: dict[str, Any]) -> tuple[str, str, datetime]:
    """The nightly parent run, created with ``params``: (experiment id, run id, its start)."""
    from mlflow.entities import Param

    root = settings.artifact_root(home) if not uri.startswith(("http://", "https://")) else None
    experiment_id = tracking.ensure_experiment(uri, EXPERIMENT, root)
    c = client(uri)
    stamp = datetime.now(UTC)
    parent = retrying(lambda: c.create_run(experiment_id, run_name=f"nightly-{stamp:%Y-%m-%d}", tags={
        KIND_TAG: "nightly", "schedlab.sweep": sweep["name"], "schedlab.code_version": tracking.code_version(),
        "schedlab.started_at": stamp.isoformat(timespec="seconds")})).info.run_id
    retrying(lambda: c.log_batch(parent, params=[Param(k, str(v)[:6000]) for k, v in params.items() if v is not None]))
    return experiment_id, parent, stamp


def log_profile_run(uri: str, experiment_id: str, parent: str, sweep: dict[str, Any], result: dict[str, Any],
                     store_dir: str) -> str:
    from mlflow.entities import Metric, Param

    c = client(uri)
    host = result.get("host") or result.get("worker") or "?"
    run = retrying(lambda: c.create_run(experiment_id, run_name=f"profile {sweep['name']} @ {host}", tags={
        KIND_TAG: "profile", PARENT_TAG: parent, NIGHTLY_TAG: parent, "schedlab.sweep": sweep["name"],
        "schedlab.host": str(host), "schedlab.worker": str(result.get("worker"))}))
    rid = run.info.run_id
    params = {"sweep": sweep["name"], "sweep.path": sweep["path"], "device": result.get("device"),
              "gpus": ",".join(result.get("gpus") or []), "host": host, "store": store_dir,
              "worker_store": result.get("store"), "dask_worker": result.get("dask_worker")}
    now = int(time.time() * 1000)
    metrics = {f"configs.{k}": v for k, v in (result.get("counts") or {}).items()}
    metrics |= {"configs": result.get("configs", 0), "records_written": len(result.get("records_names", [])),
                "records_merged": result.get("merged", 0), "profile_wall_s": result.get("wall_s", 0.0)}
    retrying(lambda: c.log_batch(rid, params=[Param(k, str(v)[:6000]) for k, v in params.items() if v is not None],
                                 metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()]))
    retrying(lambda: c.log_text(rid, sweep["yaml"], f"sweep/{Path(sweep['path']).name}"))
    if "error" in result:
        retrying(lambda: c.set_tag(rid, ERROR_TAG, result["error"][:4000]))
    retrying(lambda: c.set_terminated(rid, status="FAILED" if "error" in result else "FINISHED"))
    return rid


def log_profiles(uri: str, experiment_id: str, parent: str, sweep: dict[str, Any], results: list[dict[str, Any]],
                 store_dir: str, report: dict[str, Any]) -> list[str]:
    """A run per profiling task's result (its failure in ``report``); the parent tagged with their ids."""
    profile_ids = []
    for result in results:
        rid = log_profile_run(uri, experiment_id, parent, sweep, result, store_dir)
        profile_ids.append(rid)
        report["profiles"].append({k: v for k, v in result.items() if k != "records_names"} | {"run_id": rid})
        if "error" in result:
            report["failures"][f"profile@{result.get('worker') or 'worker'}"] = result["error"]
        else:
            print(f"profiled {sweep['name']!r} on {result['host']}: {result['counts'] or 'nothing to do'};"
                  f" {len(result['records_names'])} record file(s), {result['merged']} merged into {store_dir}")
    retrying(lambda: client(uri).set_tag(parent, PROFILE_TAG, ",".join(profile_ids)))
    return profile_ids


def failed_fit_run(uri: str, experiment_id: str, parent: str, name: str, message: str, tags: dict[str, str]) -> str:
    c = client(uri)
    run = retrying(lambda: c.create_run(experiment_id, run_name=f"fit-{name}", tags={
        KIND_TAG: "fit", "schedlab.model": name, PARENT_TAG: parent, ERROR_TAG: message[:4000], **tags}))
    retrying(lambda: c.log_text(run.info.run_id, message, "error.txt"))
    retrying(lambda: c.set_terminated(run.info.run_id, status="FAILED"))
    return run.info.run_id


def fit_models(uri: str, experiment_id: str, parent: str, store_dir: str, models: str, holdout: float, seed: int,
               profile_ids: list[str], report: dict[str, Any]) -> None:
    """Both models refitted from the store, logged and registered under the parent (a failed fit: a
    FAILED run and an entry of ``report["failures"]``; the other model is still fitted)."""
    c = client(uri)
    link = {NIGHTLY_TAG: parent, PROFILE_TAG: ",".join(profile_ids)}
    for kind, name in KINDS.items():
        try:
            fit = fit_task(kind, store_dir, models, holdout, seed, uri, parent, link)
        except Exception as err:  # noqa: BLE001 - the other model is still fitted
            message = f"{type(err).__name__}: {err}"
            print(f"fit {name} failed: {message}")
            report["failures"][f"fit {name}"] = message
            failed_fit_run(uri, experiment_id, parent, name, message, link)
            continue
        report["fits"][name] = {k: fit[k] for k in ("path", "run_id", "version", "model_uri", "metrics")}
        retrying(lambda: c.set_tag(parent, f"schedlab.fit_run_id.{name}", fit["run_id"]))
        retrying(lambda: c.set_tag(parent, f"schedlab.model_version.{name}", fit["version"]))
        retrying(lambda: c.set_tag(parent, f"schedlab.model_path.{name}", fit["path"]))
        print(f"fitted {name}: {fit['path']} -> {fit['model_uri']} (run {fit['run_id']})")


def end_run(uri: str, experiment_id: str, parent: str, results: list[dict[str, Any]], store_dir: str,
            profile_ids: list[str], report: dict[str, Any]) -> None:
    """The parent's counts and end; ``report`` completed (status, counts, link)."""
    from mlflow.entities import Metric

    from schedlab.profiling.store import ProfileStore

    now = int(time.time() * 1000)
    counts = {"records_merged": sum(r.get("merged", 0) for r in results),
              "records_written": sum(len(r.get("records_names", [])) for r in results),
              "store_files": len(ProfileStore(store_dir)._files()), "profile_hosts": len(results),
              "failed": len(report["failures"])}
    c = client(uri)
    retrying(lambda: c.log_batch(parent, metrics=[Metric(k, float(v), now, 0) for k, v in counts.items()]))
    retrying(lambda: c.set_terminated(parent, status="FAILED" if report["failures"] else "FINISHED"))
    report.update(status="failed" if report["failures"] else "ok", parent_run_id=parent,
                  experiment_id=experiment_id, profile_run_ids=profile_ids, **counts,
                  ui_url=run_url(uri, experiment_id, parent))
