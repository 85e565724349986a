"""The testbed on several nodes: each node's Dask worker lends its devices (``devices.worker_resources``)
and hosts a :class:`NodeAgent` (a Dask actor) that starts, watches and stops the ranks of the jobs placed
on its devices; a :class:`RemoteJob` is one start of a job across its nodes, for the live engine, as a
:class:`~schedlab.profiling.testbed.process.JobProcess` is on one machine. :class:`Nodes` connects them.

- Devices are numbered node by node (hosts in sorted order), as the engine numbers GPUs server by server:
  one node is one server of the testbed's cluster. A worker advertises how many devices it lends
  (``--resources TESTBED_CPU=2`` or ``GPU=8``); its agent picks them as a one-machine testbed does: equal
  core sets of the worker's own cores (start the worker under ``taskset`` to choose them) or its visible
  GPUs.
- A job spanning nodes is one DDP group: rank 0's agent picks a free port on its host, every node starts
  its ranks with ``MASTER_ADDR`` = rank 0's host (the worker's address as the scheduler knows it; gloo
  takes the interface of the host's name: set ``GLOO_SOCKET_IFNAME`` on the workers when that is not the
  network the nodes share).
- Rank 0's node writes the job's progress and result (``training.py``) in its own folder (the client's
  job folder's path, under the agent's folder), which its agent reads: the nodes share no disk with the
  client or with each other. A preempted job's checkpoint stays
  on rank 0's node; a restart whose rank 0 is on another node gets it through the client first.
- Progress times are each node's wall clock: keep the nodes' clocks synchronised (NTP), as the activity
  comparison (Lyra §7.2's 2 s) assumes; :attr:`Nodes.clock_offsets` measures each against the client's.
- Not yet on nodes: MPS sharing (the MPS daemon is the client's) and profiling (give ``--models``).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from schedlab.profiling.testbed.devices import CPU_RESOURCE, GPU_RESOURCE, Device, DeviceError, nodes_from_workers
from schedlab.profiling.testbed.process import STOP_TIMEOUT_S, JobProcess, JobStart, free_port

#: seconds a call to a node's agent may take before the testbed gives up on the node
CALL_TIMEOUT_S = 60.0
#: a node's status read this recently is reused (the live engine looks at each job within one poll)
FRESH_S = 0.02


class NodeAgent:
    """On a node's Dask worker (made with ``Client.submit(NodeAgent, …, actor=True)``): the node's
    ``count`` devices of ``kind`` and the job processes started on them, under ``folder`` (default: the
    worker's local directory). Every method takes and returns plain data."""

    def __init__(self, kind: str, count: int, folder: str | None = None) -> None:
        from schedlab.profiling.testbed.devices import cpu_devices, cuda_devices

        if folder is None:
            from distributed import get_worker

            folder = str(Path(get_worker().local_directory) / "testbed")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        if kind == "cpu":
            self.devices = cpu_devices(count)
        else:
            from schedlab.profiling.device import visible_gpus

            self.devices = cuda_devices(visible_gpus()[:count])
        self.jobs: dict[str, JobProcess] = {}
        self._watched: set[str] = set()  # the starts :meth:`status` reports
        # a job's processes die with the thread that started them (PR_SET_PDEATHSIG, profiling/guard.py):
        # one thread of the agent's own starts them all and lives as long as the agent
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="testbed-start")

    def describe(self) -> list[dict[str, Any]]:
        """Each device: its cores or GPU, and the GPU's name."""
        name = None
        if self.devices and self.devices[0].kind == "cuda":
            import torch

            name = torch.cuda.get_device_name(0)
        return [{"kind": d.kind, "cores": list(d.cores), "gpu": d.gpu, "name": name} for d in self.devices]

    def port(self) -> int:
        """A free port on this node (rank 0's rendezvous)."""
        return free_port()

    def clock(self) -> float:
        """This node's wall clock (epoch s): its jobs' progress times are read on it."""
        return time.time()

    def _job_folder(self, folder: str) -> Path:
        """Where a job whose folder on the client is ``folder`` reports on this node."""
        return self.folder / folder.lstrip("/")

    def launch(self, key: str, job_id: str, folder: str, attempt: int, spec: dict[str, Any], local: list[int],
               ranks: list[int], world: int, master: tuple[str, int], env: Mapping[str, str]) -> float:
        """Start ``ranks`` of the job on this node's devices ``local``; the launch time (epoch s)."""
        proc = JobProcess(job_id, self._job_folder(folder), attempt, spec, [self.devices[i] for i in local],
                          {**os.environ, **env}, sys.executable, ranks=ranks, world=world, master=tuple(master))
        self.jobs[key] = proc
        launched = self._starter.submit(proc.launch).result()
        self._watched.add(key)
        return launched

    def status(self) -> dict[str, tuple[int | None, list[dict[str, Any]], dict[str, Any] | None]]:
        """Each start this node watches: its exit code (None while it runs; see ``JobProcess.poll``), the
        progress lines written since the last call, and its result once written. A start is reported once
        after it exits, then no longer watched. One call a poll for all of a node's jobs: the testbed's
        polls take the node's own CPU (on a one-core device, its job's)."""
        out = {}
        for key in sorted(self._watched):
            proc = self.jobs[key]
            code = proc.poll()
            out[key] = (code, proc.samples(), proc.result())
            if code is not None:
                self._watched.discard(key)
        return out

    def request_stop(self, key: str) -> None:
        self.jobs[key].request_stop()

    def kill(self, key: str) -> None:
        self.jobs[key].kill()

    def log_tail(self, key: str) -> str:
        return self.jobs[key].log_tail()

    def checkpoint(self, folder: str) -> bytes | None:
        path = self._job_folder(folder) / "ckpt.pt"
        return path.read_bytes() if path.is_file() else None

    def put_checkpoint(self, folder: str, data: bytes) -> None:
        folder = self._job_folder(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".ckpt.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, folder / "ckpt.pt")

    def close(self) -> None:
        """Kill whatever still runs."""
        for proc in self.jobs.values():
            proc.kill()
        self.jobs.clear()


def _call(future: Any) -> Any:
    """The result of a call to an agent (an actor future)."""
    return future.result(timeout=CALL_TIMEOUT_S)


class RemoteJob(JobStart):
    """One start of a job on its nodes: ``parts`` lists, rank 0's node first, each node's index in
    ``nodes``, its host and its local device indices; ranks follow that order. The interface of
    :class:`JobProcess` the live engine uses (launch, poll, samples, latest, result, request_stop, wait,
    kill, failure); what it reads comes from the nodes' batched :meth:`Nodes.status`."""

    def __init__(self, nodes: Nodes, job_id: str, folder: Path, attempt: int, spec: dict[str, Any],
                 parts: Sequence[tuple[int, str, list[int]]], env: Mapping[str, str] | None = None) -> None:
        self.nodes, self.job_id, self.folder, self.attempt = nodes, job_id, str(folder), attempt
        self.spec, self.parts, self.env = spec, list(parts), dict(env or {})
        self.key = f"{self.folder}#{attempt}"
        self.launched_at = 0.0
        self._started: list[int] = []

    def _agent(self, node: int) -> Any:
        return self.nodes.agents[node]

    def _bring_checkpoint(self) -> None:
        """A restart resumes from the checkpoint, which must be on rank 0's node."""
        lead = self._agent(self.parts[0][0])
        if _call(lead.checkpoint(self.folder)) is not None:
            return
        for agent in self.nodes.agents:
            if agent is not lead and (data := _call(agent.checkpoint(self.folder))) is not None:
                _call(lead.put_checkpoint(self.folder, data))
                return

    def launch(self) -> float:
        if self.attempt > 0:
            self._bring_checkpoint()
        world = sum(len(local) for _, _, local in self.parts)
        lead, lead_host, _ = self.parts[0]
        master = (lead_host, _call(self._agent(lead).port()) if world > 1 else 0)
        rank = 0
        try:
            for node, _, local in self.parts:
                ranks = list(range(rank, rank + len(local)))
                rank += len(local)
                launched = _call(self._agent(node).launch(self.key, self.job_id, self.folder, self.attempt, self.spec,
                                                          local, ranks, world, master, self.env))
                self._started.append(node)
                if node == lead:
                    self.launched_at = launched
        except BaseException:
            self.kill()
            raise
        return self.launched_at

    def poll(self) -> int | None:
        return self._exit([self.nodes.state(node, self.key)[0] for node in self._started])

    def samples(self) -> list[dict[str, Any]]:
        """The progress lines rank 0's node wrote since the last call."""
        self.nodes.state(self.parts[0][0], self.key)
        return self._took(self.nodes.take_samples(self.key))

    def result(self) -> dict[str, Any] | None:
        return self.nodes.state(self.parts[0][0], self.key)[1]

    def request_stop(self) -> None:
        _call(self._agent(self.parts[0][0]).request_stop(self.key))

    def wait(self, timeout_s: float = STOP_TIMEOUT_S, poll_s: float = 0.05) -> int:
        return super().wait(timeout_s, poll_s)  # a poll is a call to each node: not every 10 ms

    def kill(self) -> None:
        for node in self._started:
            _call(self._agent(node).kill(self.key))

    def log_tail(self) -> str:
        return " ".join(f"[{host}] {_call(self._agent(node).log_tail(self.key))}" for node, host, _ in self.parts
                        if node in self._started)


class Nodes:
    """The testbed's nodes behind the Dask scheduler at ``address``: an agent on each worker that lends
    ``kind`` devices, and :attr:`devices`, numbered node by node. :meth:`job` is the live engine's
    launcher. A context manager: leaving it kills what still runs and disconnects."""

    def __init__(self, address: str, kind: str, folder: str | None = None, timeout_s: float = 30.0) -> None:
        from distributed import Client

        # calls go straight to the workers, not through the scheduler (a third process's CPU on every poll)
        self.client = Client(address, timeout=timeout_s, set_as_default=False, direct_to_workers=True)
        self._polled: dict[int, float] = {}  # node -> when its status was last read (monotonic s)
        self._state: dict[tuple[int, str], tuple[int | None, dict[str, Any] | None]] = {}
        self._samples: dict[str, list[dict[str, Any]]] = {}
        try:
            nodes = nodes_from_workers(self.client.scheduler_info(n_workers=-1), kind)
            if not nodes:
                resource = GPU_RESOURCE if kind == "cuda" else CPU_RESOURCE
                raise DeviceError(f"--dask-address {address}: no worker advertises {resource} (start each node's"
                                  f" worker with --resources {resource}=N)")
            self.agents: list[Any] = []
            self.devices: list[Device] = []
            #: host -> (its clock minus this one's, the measurement's bound: half the call's round trip), s
            self.clock_offsets: dict[str, tuple[float, float]] = {}
            self._where: dict[int, tuple[int, str, int]] = {}  # device index -> (node, host, local index)
            for worker, host, count in nodes:
                future = self.client.submit(NodeAgent, kind, count, folder, actor=True, workers=[worker],
                                            allow_other_workers=False, pure=False)
                with self.client.as_current():  # the agent's proxy binds to this client, not a default one
                    agent = future.result(timeout=CALL_TIMEOUT_S)
                self.agents.append(agent)
                sent = time.time()
                remote = _call(agent.clock())
                back = time.time()
                self.clock_offsets[host] = (remote - (sent + back) / 2, (back - sent) / 2)
                for local, d in enumerate(_call(agent.describe())):
                    index = len(self.devices)
                    self.devices.append(Device(index, d["kind"], tuple(d["cores"]), d["gpu"], host=host,
                                               lent=True, name=d["name"]))
                    self._where[index] = (len(self.agents) - 1, host, local)
        except BaseException:
            self.client.close()
            raise

    def job(self, job_id: str, folder: Path, attempt: int, spec: dict[str, Any], devices: Sequence[Device],
            env: Mapping[str, str] | None = None, python: str | None = None) -> RemoteJob:
        """One start of a job on ``devices``; ``folder`` (the client's) names its folder on each node, and each
        node runs its own Python (``python`` unused)."""
        parts: list[tuple[int, str, list[int]]] = []
        for device in devices:
            node, host, local = self._where[device.index]
            if parts and parts[-1][0] == node:
                parts[-1][2].append(local)
            elif any(p[0] == node for p in parts):
                raise DeviceError(f"job {job_id}: its devices on node {host} are not consecutive")
            else:
                parts.append((node, host, [local]))
        return RemoteJob(self, job_id, folder, attempt, spec, parts, env)

    def state(self, node: int, key: str) -> tuple[int | None, dict[str, Any] | None]:
        """``(exit code, result)`` of start ``key``'s ranks on ``node`` (None, None until known), from the
        node's :meth:`NodeAgent.status`, read again when older than :data:`FRESH_S` (once per poll of the
        live engine, however many of the node's jobs it looks at)."""
        if time.monotonic() - self._polled.get(node, -math.inf) >= FRESH_S:
            for started, (code, samples, result) in _call(self.agents[node].status()).items():
                self._state[(node, started)] = (code, result)
                self._samples.setdefault(started, []).extend(samples)
            self._polled[node] = time.monotonic()
        return self._state.get((node, key), (None, None))

    def take_samples(self, key: str) -> list[dict[str, Any]]:
        """The progress lines of start ``key`` read from its nodes and not yet taken."""
        return self._samples.pop(key, [])

    def close(self) -> None:
        try:
            for agent in self.agents:
                _call(agent.close())
        finally:
            self.client.close()

    def __enter__(self) -> Nodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
