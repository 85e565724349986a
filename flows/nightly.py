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
from the store (``schedlab fit``'s code) and registers new versions, all tracked in MLflow
(:mod:`schedlab.tasks.nightly`).

>>> report = run_nightly()                                       # LocalCluster; GPUs NVML sees
>>> report = run_nightly(dask_address="tcp://sched:8786")        # the cluster's GPU workers
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.states import Failed

from schedlab import settings
from schedlab.flows.orchestration import cluster_gpu_workers, dask_cluster
from schedlab.sched.reporting.nightly import nightly_markdown
from schedlab.tasks import nightly as tracked, tracking
from schedlab.tasks.profile import GPU_RESOURCE, merge_task, profile_task, read_sweep

DEFAULT_SWEEP = "nightly"
CPU_SWEEP = "smoke"
NO_GPU_WORKER = "no GPU worker in the Dask cluster"


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
            workers = sorted(cluster_gpu_workers(address, chosen["name"])) or None
            if workers is None:
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
    for result in results:  # the record files each host wrote, copied into this store
        records = result.pop("records", {}) or {}
        result.update(records_names=sorted(records), merged=merge_task(records, store_dir) if records else 0)
    params = {"sweep": chosen["name"], "sweep.path": chosen["path"], "requested_sweep": sweep,
              "cpu_fallback": cpu_fallback, "cpu_fallback_used": report["cpu_fallback_used"],
              "dask_address": dask_address or "LocalCluster", "store": store_dir, "models_dir": models,
              "holdout": holdout, "seed": seed, "dcgm_url": dcgm_url, "force": force}
    experiment_id, parent, stamp = tracked.start_run(uri, home, chosen, params)
    profile_ids = tracked.log_profiles(uri, experiment_id, parent, chosen, results, store_dir, report)
    tracked.fit_models(uri, experiment_id, parent, store_dir, models, holdout, seed, profile_ids, report)
    tracked.end_run(uri, experiment_id, parent, results, store_dir, profile_ids, report)
    create_markdown_artifact(nightly_markdown(report, stamp), key="nightly-profile",
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
    from schedlab.flows.orchestration import check_dask

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


__all__ = ["NO_GPU_WORKER", "nightly_profile", "run_nightly", "sweep_on_dask"]
