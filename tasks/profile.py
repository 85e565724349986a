"""Profiling tasks: run a sweep into a profile store on a Dask worker, merge what it wrote into the
flow's store, and find the GPU workers of a Dask cluster.

The sweep travels as YAML text (the flow reads the file), so a worker on another machine needs no
copy of it. The task returns the record files it added (a few kB each); the flow copies those its
own store lacks (:func:`merge_records`), so the store is complete whether or not the GPU nodes share
its folder. Everything here is a plain function first; the ``@task`` objects only wrap them.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

#: the Dask resource a GPU node's worker advertises (``dask worker ADDR --resources GPU=1``)
GPU_RESOURCE = "GPU"


def gpu_workers(scheduler_info: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The workers advertising at least one ``GPU`` resource, one per host (the first address in
    sorted order): ``{address: worker info}``. ``scheduler_info`` is ``Client.scheduler_info()``."""
    by_host: dict[str, tuple[str, dict[str, Any]]] = {}
    for address, info in sorted((scheduler_info.get("workers") or {}).items()):
        if float((info.get("resources") or {}).get(GPU_RESOURCE, 0) or 0) >= 1:
            host = str(info.get("host") or address)
            by_host.setdefault(host, (address, info))
    return dict(by_host.values())


def local_gpu_count() -> int:
    """GPUs NVML sees on this machine (0 without a driver); cheap, no torch."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no driver, no GPU
        return 0


def read_sweep(name_or_path: str) -> dict[str, Any]:
    """A sweep (``conf/sweeps`` name or YAML path) as ``name, path, yaml, device, configs``.
    Raises FileNotFoundError (naming the known sweeps) or ValueError for a bad file."""
    from schedlab.profiling.sweep import find, mapping, parse

    path = find(name_or_path)
    text = path.read_text()
    raw = mapping(text, path)  # a ValueError naming the file and line
    try:
        sweep = parse(raw, path.stem)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: not a valid sweep: {err}") from None
    return {"name": sweep.name, "path": str(path.resolve()), "yaml": text, "device": sweep.device,
            "configs": len(sweep.configs)}


def run_sweep(sweep_yaml: str, name: str, store_dir: str, *, device: str | None = None,
              dcgm_url: str | None = None, force: bool = False, timeout_s: float | None = None) -> dict[str, Any]:
    """Run a sweep (its YAML text) into the store at ``store_dir`` on this machine, as
    ``schedlab profile`` does. Returns the status counts, where it ran and ``records``: the record
    files it added (name -> Parquet bytes)."""
    from schedlab.profiling import device as D
    from schedlab.profiling.execute import Context
    from schedlab.profiling.profiler import Profiler
    from schedlab.profiling.store import ProfileStore
    from schedlab.profiling.sweep import mapping, parse

    sweep = parse(mapping(sweep_yaml, name), name)
    resolved = D.resolve(device or sweep.device)
    gpus = D.visible_gpus() if resolved == "cuda" else ["0"]
    store = ProfileStore(store_dir)
    before = {p.name for p in store._files()}
    ctx = Context(device=resolved, gpus=gpus, dcgm_url=dcgm_url, interval_s=sweep.interval_s)
    started = time.perf_counter()
    counts = Profiler(store, ctx, timeout_s=timeout_s or sweep.timeout_s, sweep_name=sweep.name).run(
        sweep, force=force, progress=False)
    added = [p for p in store._files() if p.name not in before]
    try:
        from distributed import get_worker

        dask_worker: str | None = get_worker().address
    except (ImportError, ValueError):  # not on a Dask worker
        dask_worker = None
    return {"dask_worker": dask_worker, "sweep": sweep.name, "device": resolved, "gpus": gpus, "host": socket.gethostname(),
            "worker": f"{socket.gethostname()}:{os.getpid()}", "store": str(store.root.resolve()),
            "configs": len(sweep.configs), "counts": dict(counts), "wall_s": time.perf_counter() - started,
            "records": {p.name: p.read_bytes() for p in added}}


def merge_records(records: dict[str, bytes], store_dir: str) -> int:
    """Copy record files into the store at ``store_dir`` unless a file of that name is there already
    (the worker wrote to this very store, or an earlier merge did); atomic per file, like the store's
    own writes. Returns how many were added."""
    from schedlab.profiling.store import ProfileStore

    store = ProfileStore(store_dir)
    added = 0
    for name, data in sorted(records.items()):
        if "/" in name or not name.endswith(".parquet") or name.startswith("."):
            raise ValueError(f"not a record file name: {name!r}")
        dest = store.records / name
        if dest.exists():
            continue
        tmp = store.records / f".tmp-merge-{uuid.uuid4().hex}.parquet"
        tmp.write_bytes(data)
        os.replace(tmp, dest)
        added += 1
    return added


@task(name="profile-sweep", cache_policy=NO_CACHE, retries=0, task_run_name="profile {name}")
def profile_task(sweep_yaml: str, name: str, store_dir: str, device: str | None = None,
                 dcgm_url: str | None = None, force: bool = False) -> dict[str, Any]:
    return run_sweep(sweep_yaml, name, store_dir, device=device, dcgm_url=dcgm_url, force=force)


@task(name="merge-profiles", cache_policy=NO_CACHE)
def merge_task(records: dict[str, bytes], store_dir: str) -> int:
    return merge_records(records, store_dir)


__all__ = ["GPU_RESOURCE", "gpu_workers", "local_gpu_count", "merge_records", "merge_task", "profile_task",
           "read_sweep", "run_sweep"]
