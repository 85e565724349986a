"""The testbed on several nodes (``profiling/testbed/remote.py``): a ``dask scheduler`` and two ``dask worker``
processes, each a node of its own (its own loopback address, so the scheduler sees two hosts; its own core;
where a private mount namespace can be made, the client's folder hidden under a tmpfs, as on another host),
each lending one CPU device. A job spanning both nodes is one gloo group across them; a preempted job's
checkpoint follows its restart to another node; the live engine runs a policy over them unchanged."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from schedlab.flows.orchestration import quiet_samplers_environ
from schedlab.profiling.testbed.activity import completeness
from schedlab.profiling.testbed.spec import TestbedSpec

CORES = sorted(os.sched_getaffinity(0))
HOSTS = ("127.0.0.1", "127.0.0.2")
#: a node's worker as docs/how-to/testbed.md starts it: none of Dask's own samplers waking on its job's core
QUIET_WORKER = quiet_samplers_environ()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def two_nodes(hidden: Path | None = None, timeout_s: float = 120.0) -> Iterator[str]:
    """A scheduler and two workers (``TESTBED_CPU=1`` each, on HOSTS[i] pinned to CORES[i]); with
    ``hidden``, each worker runs in a mount namespace with a tmpfs over that folder. Yields the address."""
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, **QUIET_WORKER}
    procs = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)]
    try:
        for host, core in zip(HOSTS, CORES):
            worker = ["taskset", "-c", str(core), str(bin_dir / "dask"), "worker", address, "--host", host,
                      "--nthreads", "1", "--no-nanny", "--resources", "TESTBED_CPU=1", "--no-dashboard"]
            if hidden is not None:
                worker = ["unshare", "-m", "sh", "-c", f'mount -t tmpfs none "{hidden}" && exec "$@"', "sh", *worker]
            procs.append(subprocess.Popen(worker, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        with Client(address, timeout=timeout_s, set_as_default=False) as client:
            client.wait_for_workers(len(HOSTS), timeout=timeout_s)
        yield address
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait(timeout=30)


def _hideable(folder: Path) -> bool:
    from tests.test_share_nothing import can_hide

    return can_hide(folder)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """The two nodes, the client's folder hidden from them where that can be done; the connected Nodes."""
    if len(CORES) < 2 or shutil.which("taskset") is None:
        pytest.skip("two nodes of one core each need two cores and taskset")
    from schedlab.profiling.testbed.remote import Nodes

    client_folder = tmp_path_factory.mktemp("client")
    hidden = client_folder if _hideable(client_folder) else None
    with two_nodes(hidden) as address, Nodes(address, "cpu") as connected:
        yield connected, client_folder, hidden


def _table(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["job_id", "submit_time", "num_gpus", "model", "batch_size", "iterations",
                                       "duration"])


@pytest.mark.slow
def test_each_worker_is_a_server_of_the_testbed(nodes):
    from schedlab.profiling.testbed.session import cluster_for

    connected, _, _ = nodes
    devices = connected.devices
    assert [(d.index, d.host, d.cores) for d in devices] == [(0, HOSTS[0], (CORES[0],)), (1, HOSTS[1], (CORES[1],))]
    assert [d.label for d in devices] == [f"{HOSTS[0]}/cpu:{CORES[0]}", f"{HOSTS[1]}/cpu:{CORES[1]}"]
    pool = cluster_for(devices).training_pool
    assert (pool.servers, pool.gpus_per_server, pool.gpu_type) == (2, 1, "cpu")
    # one machine, one clock: each node's measured offset is within its bound (half the call's round trip)
    assert set(connected.clock_offsets) == set(HOSTS)
    assert all(abs(off) <= bound + 0.01 for off, bound in connected.clock_offsets.values()), connected.clock_offsets


@pytest.mark.slow
def test_fifo_runs_jobs_on_both_nodes_and_a_job_across_them(nodes):
    """A 2-device job is one DDP group over both nodes (each rank pinned to its node's core); every job
    finishes once with every iteration, the activity log complete; nothing is written in the client's folder."""
    from schedlab.profiling.testbed.live import LiveEngine
    from schedlab.profiling.testbed.session import cluster_for
    from schedlab.sched.core.cluster import ClusterState
    from schedlab.sched.core.job import jobs_from_table
    from schedlab.sched.models.sharing import SharingModel
    from schedlab.sched.policies import make_policy
    from schedlab.sched.results.metrics import job_table

    connected, client_folder, hidden = nodes
    table = _table([("a", 0.0, 1, "bert", 4, 15, 1.0), ("b", 0.2, 2, "bert", 4, 20, 1.0),
                    ("c", 0.4, 1, "bert", 4, 10, 0.5)])
    cluster = cluster_for(connected.devices)
    engine = LiveEngine(jobs_from_table(table), ClusterState(cluster), make_policy("fifo"), devices=connected.devices,
                        iterations=dict(zip(table["job_id"], table["iterations"])), folder=client_folder / "run",
                        poll_s=0.05, progress_s=0.2, launcher=connected.job, allocation_stall_s=1.0,
                        sharing=SharingModel.for_cluster(cluster, "analytic:2.0"))
    jobs = job_table(engine.run())
    assert jobs["end_time"].notna().all() and engine.unfinished == []
    assert completeness(engine.log, ["a", "b", "c"]) == []
    starts = {r["job"]: r for r in engine.log.of("start")}
    assert sorted(starts["b"]["devices"]) == [d.label for d in connected.devices]
    assert {r["job"]: r["done"] for r in engine.log.of("end")} == {"a": 15, "b": 20, "c": 10}
    ready = {r["job"]: r["cores"] for r in engine.log.of("progress") if r.get("ready")}
    lead = next(d for d in connected.devices if d.label == starts["b"]["devices"][0])
    assert ready["b"] == list(lead.cores)  # rank 0 on the core of the job's first device, on its node
    if hidden is not None:
        assert not (client_folder / "run").exists()  # the nodes wrote into their own folders


@pytest.mark.slow
def test_a_restart_on_another_node_resumes_from_the_checkpoint(nodes):
    """Start 0 of a job on the first node is stopped at an iteration boundary; start 1 on the second node
    resumes from the checkpoint the first node wrote (brought through the client)."""
    connected, client_folder, _ = nodes
    first, second = connected.devices
    spec = {"workload": "imagenet", "batch": 32, "accum": 1, "size": "tiny", "iterations": 400, "device": "cpu",
            "threads": 1, "progress_s": 0.1, "seed": 0}
    start = connected.job("m", client_folder / "m", 0, spec, [first])
    start.launch()
    deadline = time.monotonic() + 120
    while not any(s["event"] == "progress" for s in start.samples()):
        assert start.poll() is None and time.monotonic() < deadline, start.log_tail()
        time.sleep(0.1)
    start.request_stop()
    assert start.wait() == 0
    stopped = start.result()
    assert stopped["status"] == "preempted" and 0 < stopped["done"] < 400
    restart = connected.job("m", client_folder / "m", 1, {**spec, "iterations": stopped["done"] + 5}, [second])
    restart.launch()
    assert restart.wait() == 0, restart.log_tail()
    samples = restart.samples()
    ready = next(s for s in samples if s["event"] == "ready")
    assert ready["done"] == stopped["done"] and ready["cores"] == [CORES[1]]
    assert restart.result()["done"] == stopped["done"] + 5


def test_nodes_options_are_checked_before_anything_starts(tmp_path):
    base = {"generate": 3, "policies": ["fifo"], "out": tmp_path / "out", "dask_address": "tcp://127.0.0.1:1"}
    with pytest.raises(ValueError, match="--models"):
        TestbedSpec.model_validate(base)
    (tmp_path / "m").mkdir()
    with pytest.raises(ValueError, match="--devices names this machine's"):
        TestbedSpec.model_validate({**base, "devices": 2})
    with pytest.raises(ValueError, match="expected a scheduler address"):
        TestbedSpec.model_validate({**base, "dask_address": "nowhere"})
