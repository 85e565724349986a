"""The testbed's devices: what the engine calls GPUs, on a real machine.

- **CPU devices** (for CI and anyone without a GPU): disjoint sets of cores. A job on a device runs
  pinned to its cores (``sched_setaffinity`` through ``profiling/guard.py``, so torch's threads are
  too) with as many torch threads as the set has cores; two jobs co-located on a device share its
  cores, which the operating system time-slices (the CPU analogue of CUDA's default time-slicing).
- **CUDA devices**: one GPU each (``CUDA_VISIBLE_DEVICES``); co-located jobs time-slice it, or share
  it spatially through an MPS daemon with an active-thread percentage (``profiling/mps.py``), as the
  profiler drives them.

A job on several devices runs one process per device (DDP: gloo on CPU, NCCL on CUDA). Devices are
numbered as the engine numbers GPUs: host by host (``sched/core/cluster.py``), so one machine is one
server of the testbed's cluster.

Several nodes (``remote.py``): each node runs a Dask worker that advertises its devices as a resource
(:func:`worker_resources`: ``GPU`` like the nightly profiling flow's workers, ``TESTBED_CPU`` for CPU
devices); :func:`nodes_from_workers` reads them back from the scheduler into the testbed's servers, and
an agent on each worker starts the ranks placed on its devices (``docs/how-to/testbed.md``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: the Dask resource a GPU node's worker advertises (the nightly profiling flow's name, ``tasks/profile.py``)
GPU_RESOURCE = "GPU"
#: the Dask resource a worker lending CPU devices to the testbed advertises (one unit per core set)
CPU_RESOURCE = "TESTBED_CPU"
KINDS = ("cpu", "cuda")


class DeviceError(ValueError):
    """A device set that cannot be used (names the option and the value)."""


@dataclass(frozen=True)
class Device:
    """One device of the testbed: ``index`` is its GPU id in the engine's cluster."""

    index: int
    kind: str  # cpu | cuda
    cores: tuple[int, ...] = ()  # cpu: the cores it owns
    gpu: str | None = None  # cuda: the index or UUID as CUDA_VISIBLE_DEVICES takes it
    host: str = "localhost"
    lent: bool = False  # lent by a node's Dask worker (``remote.py``): ``host`` is the node's address
    name: str | None = None  # a node's cuda device: the GPU's name as torch gives it (the cluster's GPU type)

    @property
    def label(self) -> str:
        """``cpu:0-1`` or ``cuda:0`` (``HOST/cpu:0`` on a node's worker): how the activity log names it."""
        base = f"cuda:{self.gpu}" if self.kind == "cuda" else "cpu:" + ",".join(map(str, self.cores))
        return f"{self.host}/{base}" if self.lent else base

    @property
    def threads(self) -> int:
        """Torch threads of a process on this device: the set's cores (one on a GPU)."""
        return len(self.cores) if self.kind == "cpu" else 1


def parse_core_sets(text: str) -> list[list[int]]:
    """``0;1`` or ``0-1;2-3`` (sets separated by ``;``, cores as ``guard --cpus`` takes them)."""
    from schedlab.profiling.guard import parse_cpus

    sets = []
    for part in text.split(";"):
        try:
            sets.append(sorted(parse_cpus(part)))
        except ValueError:
            raise DeviceError(f"--cpu-sets {text!r}: {part!r} is not a core list such as 0 or 0-1") from None
    return sets


def cpu_devices(sets: int | Sequence[Sequence[int]], available: set[int] | None = None) -> list[Device]:
    """CPU devices: ``sets`` lists the core sets, or is a count that splits the cores this process may
    run on (``sched_getaffinity``) into that many equal sets (the remainder left unused). Sets must be
    disjoint, non-empty and within the available cores."""
    cores = sorted(available if available is not None else os.sched_getaffinity(0))
    if isinstance(sets, int):
        if not 1 <= sets <= len(cores):
            raise DeviceError(f"--devices {sets}: this process may run on {len(cores)} core(s) ({_span(cores)})")
        size = len(cores) // sets
        sets = [cores[i * size:(i + 1) * size] for i in range(sets)]
    seen: set[int] = set()
    for i, chosen in enumerate(sets):
        if not chosen:
            raise DeviceError(f"--cpu-sets: set {i} is empty")
        outside = sorted(set(chosen) - set(cores))
        if outside:
            raise DeviceError(f"--cpu-sets: set {i} names core(s) {outside} this process may not run on"
                              f" ({_span(cores)})")
        if seen & set(chosen):
            raise DeviceError(f"--cpu-sets: set {i} shares core(s) {sorted(seen & set(chosen))} with an earlier set")
        seen |= set(chosen)
    host = socket.gethostname()
    return [Device(i, "cpu", tuple(sorted(s)), host=host) for i, s in enumerate(sets)]


def cuda_devices(gpus: Sequence[str]) -> list[Device]:
    """One device per GPU index or UUID (as ``--gpus`` and ``CUDA_VISIBLE_DEVICES`` give them)."""
    if not gpus:
        raise DeviceError("--gpus: at least one GPU")
    if len(set(gpus)) != len(gpus):
        raise DeviceError(f"--gpus {','.join(gpus)}: a GPU given twice")
    host = socket.gethostname()
    return [Device(i, "cuda", gpu=str(g), host=host) for i, g in enumerate(gpus)]


def _span(cores: Sequence[int]) -> str:
    return ",".join(map(str, cores)) or "none"


def process_env(devices: Sequence[Device], rank: int, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of rank ``rank`` of a job on ``devices``: its threads, and its GPUs (``LOCAL_RANK``
    indexes ``CUDA_VISIBLE_DEVICES``)."""
    env = dict(base)
    device = devices[rank]
    env["OMP_NUM_THREADS"] = str(device.threads)
    if device.kind == "cuda":
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d.gpu) for d in devices)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def worker_resources(devices: Sequence[Device]) -> dict[str, float]:
    """What a node's Dask worker advertises for these devices (``dask worker ADDR --resources …``)."""
    kinds = {d.kind for d in devices}
    if len(kinds) != 1:
        raise DeviceError(f"a node lends one kind of device, got {sorted(kinds)}")
    return {GPU_RESOURCE if kinds == {"cuda"} else CPU_RESOURCE: float(len(devices))}


def nodes_from_workers(scheduler_info: Mapping[str, Any], kind: str) -> list[tuple[str, str, int]]:
    """``(worker address, host, devices)`` of the workers advertising ``kind`` devices, one per host (the
    first address in sorted order), in host order: the testbed's servers. ``scheduler_info`` is
    ``Client.scheduler_info()``. Nodes must lend the same number of devices (one server size)."""
    resource = GPU_RESOURCE if kind == "cuda" else CPU_RESOURCE
    by_host: dict[str, tuple[str, str, int]] = {}
    for address, info in sorted((scheduler_info.get("workers") or {}).items()):
        count = int(float((info.get("resources") or {}).get(resource, 0) or 0))
        host = str(info.get("host") or address)
        if count >= 1 and host not in by_host:
            by_host[host] = (address, host, count)
    nodes = [by_host[h] for h in sorted(by_host)]
    sizes = {n[2] for n in nodes}
    if len(sizes) > 1:
        raise DeviceError(f"workers advertise different numbers of {resource} ({sorted(sizes)}): the testbed's"
                          " servers must be alike")
    return nodes
