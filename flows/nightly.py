"""The ``nightly_profile`` flow: profile on the GPU nodes, append to the profile store, refit both
models, log and register them, link the runs.

GPU nodes are Dask workers started with a resource tag (``dask worker tcp://SCHEDULER:8786
--resources GPU=1``). The flow asks the scheduler which workers advertise ``GPU`` and submits one
profiling task per GPU host, annotated ``resources={"GPU": 1}`` and pinned to that worker, so each
node measures its own hardware. A sweep whose ``device`` is ``cpu`` runs on any worker. With no GPU
worker the flow says so (:data:`NO_GPU_WORKER`) and, only with ``cpu_fallback=True`` (CLI
``--cpu-smoke``), runs the CPU sweep ``cpu_sweep`` (``smoke``) instead; otherwise it returns
without profiling (status ``no-gpu-worker``; ``schedlab nightly`` exits 3).

Each profiling task returns the record files it wrote; the flow copies those its own store lacks
(GPU nodes need not share its folder). Then it fits the iteration-time and the interference model
from the store (``schedlab fit``'s code) and registers new versions. MLflow, experiment ``models``:
a parent run ``nightly-<date>`` holding one child run per profiling task (``schedlab.kind=profile``)
and one per fit (``schedlab.kind=fit``, tagged ``schedlab.profile_run_id`` and
``schedlab.nightly_run_id``); the parent carries ``schedlab.profile_run_id``,
``schedlab.fit_run_id.<model>`` and ``schedlab.model_version.<model>``.

>>> report = run_nightly()                                       # LocalCluster; GPUs NVML sees
>>> report = run_nightly(dask_address="tcp://sched:8786")        # the cluster's GPU workers
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from schedlab import settings

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.states import Failed

from schedlab.flows.api_server import exported_api_url
from schedlab.sched.reporting.mlflow_view import run_url
from schedlab.tasks import tracking
from schedlab.tasks.fit import KINDS, fit_task
from schedlab.tasks.profile import (
    GPU_RESOURCE,
    gpu_workers,
    local_gpu_count,
    merge_task,
    profile_task,
    read_sweep,
)
from schedlab.tasks.tracking import ERROR_TAG, KIND_TAG, PARENT_TAG, client, retrying

log = logging.getLogger("schedlab.nightly")

DEFAULT_SWEEP = "nightly"
CPU_SWEEP = "smoke"
NO_GPU_WORKER = "no GPU worker in the Dask cluster"
#: the MLflow experiment of the nightly runs: the fits' own (``tasks/model_tracking.EXPERIMENT``),
#: so that the fit runs nest under the nightly run in the UI
EXPERIMENT = "models"
NIGHTLY_TAG = "schedlab.nightly_run_id"
PROFILE_TAG = "schedlab.profile_run_id"


@contextlib.contextmanager
def dask_cluster(address: str | None) -> Iterator[str]:
    """The given scheduler, or a one-worker ``LocalCluster`` (closed on exit) whose worker advertises
    ``GPU=<n>`` when NVML sees n GPUs on this machine."""
    if address:
        yield address
        return
    from distributed import LocalCluster

    gpus = local_gpu_count()
    with exported_api_url():
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.WARNING, resources={GPU_RESOURCE: gpus} if gpus else None)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close(timeout=10)


def cluster_gpu_workers(address: str) -> dict[str, dict[str, Any]]:
    """The GPU workers (one per host) of the Dask cluster at ``address``."""
    from distributed import Client

    with Client(address, timeout=10, set_as_default=False) as dask_client:
        return gpu_workers(dask_client.scheduler_info(n_workers=-1))


@flow(name="nightly-sweep", log_prints=True, persist_result=False)
def sweep_on_dask(sweep: dict[str, Any], store_dir: str, workers: list[str] | None = None,
                  dcgm_url: str | None = None, force: bool = False) -> list[dict[str, Any]]:
    """One profiling task per worker in ``workers`` (each annotated ``GPU=1`` and pinned to it), or
    a single task on any worker when ``workers`` is None (a CPU sweep). Run it with a
    ``DaskTaskRunner``. A task that fails gives ``{"error": …}`` in its place."""
    import dask

    targets: list[str | None] = list(workers) if workers else [None]
    futures = []
    for worker in targets:
        annotations = {"resources": {GPU_RESOURCE: 1}, "workers": [worker]} if worker else {}
        with dask.annotate(**annotations):
            futures.append(profile_task.submit(sweep["yaml"], sweep["name"], store_dir, dcgm_url=dcgm_url,
                                               force=force))
    results = []
    for worker, future in zip(targets, futures):
        try:
            results.append(future.result())
        except Exception as err:  # noqa: BLE001 - reported, the other nodes' profiles still count
            print(f"profiling on {worker or 'a worker'} failed: {err!r}")
            results.append({"error": f"{type(err).__name__}: {err}", "worker": worker, "sweep": sweep["name"],
                            "records": {}})
    return results


def _log_profile_run(uri: str, experiment_id: str, parent: str, sweep: dict[str, Any], result: dict[str, Any],
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


def _failed_fit_run(uri: str, experiment_id: str, parent: str, name: str, message: str, tags: dict[str, str]) -> str:
    c = client(uri)
    run = retrying(lambda: c.create_run(experiment_id, run_name=f"fit-{name}", tags={
        KIND_TAG: "fit", "schedlab.model": name, PARENT_TAG: parent, ERROR_TAG: message[:4000], **tags}))
    retrying(lambda: c.log_text(run.info.run_id, message, "error.txt"))
    retrying(lambda: c.set_terminated(run.info.run_id, status="FAILED"))
    return run.info.run_id


@flow(name="nightly-profile", log_prints=True, persist_result=False)
def nightly_profile(sweep: str = DEFAULT_SWEEP, cpu_fallback: bool = False, cpu_sweep: str = CPU_SWEEP,
                    dask_address: str | None = None, store: str | None = None, models_dir: str | None = None,
                    tracking_uri: str | None = None, holdout: float = 0.2, seed: int = 0,
                    dcgm_url: str | None = None, force: bool = False) -> dict[str, Any]:
    """Profile ``sweep`` (name in ``conf/sweeps`` or a YAML path) on the GPU workers of the Dask
    cluster (``dask_address``, else ``$SCHEDLAB_DASK_ADDRESS``, else a LocalCluster), append to the
    store (default ``$SCHEDLAB_HOME/profiles``), refit both models into ``models_dir`` (default
    ``$SCHEDLAB_HOME/models``), log and register them. Returns the report (``status``: ``ok``,
    ``failed`` — a profiling task or a fit failed — or ``no-gpu-worker``)."""
    home = settings.Settings.from_env().apply().home
    uri = tracking_uri or settings.tracking_uri(home)
    store_dir = str(Path(store).expanduser().resolve() if store else home / "profiles")
    models = str(Path(models_dir).expanduser().resolve() if models_dir else home / "models")
    dask_address = dask_address or os.environ.get("SCHEDLAB_DASK_ADDRESS") or None
    tracking.check_tracking(uri)
    chosen = read_sweep(sweep)
    report: dict[str, Any] = {"sweep": chosen["name"], "requested_sweep": chosen["name"], "store": store_dir,
                              "tracking_uri": uri, "cpu_fallback_used": False, "profiles": [], "fits": {},
                              "failures": {}}
    from prefect_dask import DaskTaskRunner

    with dask_cluster(dask_address) as address:
        workers: list[str] | None = None
        if chosen["device"] != "cpu":
            found = cluster_gpu_workers(address)
            if found:
                workers = sorted(found)
                print(f"profiling {chosen['name']!r} on {len(workers)} GPU host(s): "
                      + ", ".join(f"{found[w].get('host', w)} ({w})" for w in workers))
            else:
                message = (f"{NO_GPU_WORKER} at {address}: start one per GPU node with"
                           f" `dask worker {address} --resources {GPU_RESOURCE}=1`")
                print(message)
                if not cpu_fallback:
                    return {**report, "status": "no-gpu-worker", "message": message}
                chosen = read_sweep(cpu_sweep)
                print(f"cpu fallback: running the CPU sweep {chosen['name']!r} instead")
                report.update(sweep=chosen["name"], cpu_fallback_used=True, message=message)
        results = sweep_on_dask.with_options(task_runner=DaskTaskRunner(address=address))(
            chosen, store_dir, workers, dcgm_url, force)

    for result in results:
        records = result.pop("records", {}) or {}
        result["records_names"] = sorted(records)
        result["merged"] = merge_task(records, store_dir) if records else 0

    root = settings.artifact_root(home) if not uri.startswith(("http://", "https://")) else None
    experiment_id = tracking.ensure_experiment(uri, EXPERIMENT, root)
    c = client(uri)
    stamp = datetime.now(UTC)
    parent = retrying(lambda: c.create_run(experiment_id, run_name=f"nightly-{stamp:%Y-%m-%d}", tags={
        KIND_TAG: "nightly", "schedlab.sweep": chosen["name"], "schedlab.code_version": tracking.code_version(),
        "schedlab.started_at": stamp.isoformat(timespec="seconds")})).info.run_id
    from mlflow.entities import Metric, Param

    params = {"sweep": chosen["name"], "sweep.path": chosen["path"], "requested_sweep": sweep,
              "cpu_fallback": cpu_fallback, "cpu_fallback_used": report["cpu_fallback_used"],
              "dask_address": dask_address or "LocalCluster", "store": store_dir, "models_dir": models,
              "holdout": holdout, "seed": seed, "dcgm_url": dcgm_url, "force": force}
    retrying(lambda: c.log_batch(parent, params=[Param(k, str(v)[:6000]) for k, v in params.items() if v is not None]))

    profile_ids = []
    for result in results:
        rid = _log_profile_run(uri, experiment_id, parent, chosen, result, store_dir)
        profile_ids.append(rid)
        report["profiles"].append({k: v for k, v in result.items() if k != "records_names"} | {"run_id": rid})
        if "error" in result:
            report["failures"][f"profile@{result.get('worker') or 'worker'}"] = result["error"]
        else:
            print(f"profiled {chosen['name']!r} on {result['host']}: {result['counts'] or 'nothing to do'};"
                  f" {len(result['records_names'])} record file(s), {result['merged']} merged into {store_dir}")
    link = {NIGHTLY_TAG: parent, PROFILE_TAG: ",".join(profile_ids)}
    retrying(lambda: c.set_tag(parent, PROFILE_TAG, ",".join(profile_ids)))

    for kind, name in KINDS.items():
        try:
            fit = fit_task(kind, store_dir, models, holdout, seed, uri, parent, link)
        except Exception as err:  # noqa: BLE001 - the other model is still fitted
            message = f"{type(err).__name__}: {err}"
            print(f"fit {name} failed: {message}")
            report["failures"][f"fit {name}"] = message
            _failed_fit_run(uri, experiment_id, parent, name, message, link)
            continue
        report["fits"][name] = {k: fit[k] for k in ("path", "run_id", "version", "model_uri", "metrics")}
        retrying(lambda: c.set_tag(parent, f"schedlab.fit_run_id.{name}", fit["run_id"]))
        retrying(lambda: c.set_tag(parent, f"schedlab.model_version.{name}", fit["version"]))
        retrying(lambda: c.set_tag(parent, f"schedlab.model_path.{name}", fit["path"]))
        print(f"fitted {name}: {fit['path']} -> {fit['model_uri']} (run {fit['run_id']})")

    from schedlab.profiling.store import ProfileStore

    now = int(time.time() * 1000)
    counts = {"records_merged": sum(r.get("merged", 0) for r in results),
              "records_written": sum(len(r.get("records_names", [])) for r in results),
              "store_files": len(ProfileStore(store_dir)._files()), "profile_hosts": len(results),
              "failed": len(report["failures"])}
    retrying(lambda: c.log_batch(parent, metrics=[Metric(k, float(v), now, 0) for k, v in counts.items()]))
    status = "FAILED" if report["failures"] else "FINISHED"
    retrying(lambda: c.set_terminated(parent, status=status))
    report.update(status="failed" if report["failures"] else "ok", parent_run_id=parent,
                  experiment_id=experiment_id, profile_run_ids=profile_ids, **counts,
                  ui_url=run_url(uri, experiment_id, parent))
    lines = [f"## nightly {stamp:%Y-%m-%d}: sweep `{chosen['name']}`"
             + (" (CPU fallback: no GPU worker)" if report["cpu_fallback_used"] else ""), "",
             "| host | configs | records merged | status |", "|---|---|---:|---|"]
    lines += [f"| {p.get('host', p.get('worker'))} | {p.get('counts', {})} | {p.get('merged', 0)} |"
              f" {'FAILED: ' + p['error'] if 'error' in p else 'ok'} |" for p in report["profiles"]]
    lines += ["", "| model | version | metrics |", "|---|---|---|"]
    lines += [f"| {n} | {f['model_uri']} | "
              + ", ".join(f"{k} {v:.3g}" for k, v in list(f["metrics"].items())[:6]) + " |"
              for n, f in report["fits"].items()]
    lines += [f"| {n} | FAILED | {m} |" for n, m in report["failures"].items() if n.startswith("fit ")]
    create_markdown_artifact("\n".join(lines) + "\n", key="nightly-profile",
                             description=f"nightly profile {stamp:%Y-%m-%d}")
    if report["failures"]:
        return Failed(message=f"nightly: {len(report['failures'])} failure(s)", data=report)
    return report


def run_nightly(sweep: str = DEFAULT_SWEEP, *, cpu_fallback: bool = False, cpu_sweep: str = CPU_SWEEP,
                dask_address: str | None = None, home: Path | None = None, **options: Any) -> dict[str, Any]:
    """Check the sweep(s), the tracking store and the Dask address, then run :func:`nightly_profile`
    under the flow's Prefect API (an ephemeral one unless ``PREFECT_API_URL`` is set). Raises
    FileNotFoundError / ValueError (sweep), TrackingError or DaskUnreachable before any work."""
    from schedlab.flows.api_server import prefect_api, wait_for_api
    from schedlab.flows.experiment import check_dask

    home = settings.Settings.from_env(home).apply().home
    logging.getLogger("distributed").setLevel(logging.WARNING)
    read_sweep(sweep)
    if cpu_fallback:
        read_sweep(cpu_sweep)
    uri = options.get("tracking_uri") or settings.tracking_uri(home)
    tracking.check_tracking(uri)
    address = dask_address or os.environ.get("SCHEDLAB_DASK_ADDRESS") or None
    if address:
        check_dask(address)
    with prefect_api() as api:
        wait_for_api(api)
        state = nightly_profile(sweep, cpu_fallback, cpu_sweep, address, return_state=True, **options)
    report = state.result(raise_on_failure=False)
    if isinstance(report, BaseException):
        raise report
    return report


__all__ = ["NO_GPU_WORKER", "cluster_gpu_workers", "dask_cluster", "nightly_profile", "run_nightly", "sweep_on_dask"]
