"""The experiment's LocalCluster (``flows/orchestration.dask_scheduler``, a real Dask cluster): replays are
sent once every worker has warmed up; every worker ignores SIGINT, also one its nanny starts in place of a
worker that died, so a Ctrl-C at the terminal reaches the flow only (no KeyboardInterrupt traceback from a
worker)."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest


def ignores_sigint(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGINT (its ``SigIgn`` mask in /proc)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    raise AssertionError(f"/proc/{pid}/status has no SigIgn")


def replay_imported() -> bool:
    return "schedlab.sched.replay" in sys.modules


@pytest.mark.slow
def test_workers_are_warm_when_replays_go_out_and_restarted_ones_ignore_sigint(tmp_path) -> None:
    from distributed import Client

    from schedlab.flows.orchestration import dask_scheduler

    with dask_scheduler(None, 2, f"sqlite:///{tmp_path / 'mlflow.db'}") as scheduler, \
            Client(scheduler.address, set_as_default=False) as client:
        scheduler.warmed()  # (a wait that returned at once sent replays to a worker still importing)
        assert list(client.run(replay_imported).values()) == [True, True]
        assert not any(key.startswith("warm_up") for keys in client.processing().values() for key in keys)
        pids = client.run(os.getpid)
        assert all(ignores_sigint(pid) for pid in pids.values())
        worker, pid = sorted(pids.items())[0]
        client.restart_workers([worker])  # as the nanny does for a worker that died
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = client.run(os.getpid)
            if len(now) == 2 and pid not in now.values():
                break
            time.sleep(0.2)
        [new] = set(client.run(os.getpid).values()) - set(pids.values())
        assert ignores_sigint(new)
        assert not ignores_sigint(os.getpid())  # the flow's own process still takes Ctrl-C


@pytest.mark.slow
def test_a_shared_clusters_busy_worker_does_not_hold_the_replays_back(tmp_path) -> None:
    """On a cluster given by address, a worker busy with another client's task gets its warm-up behind that
    task; the replays are not held for it (they would wait up to WARM_UP_WAIT_S)."""
    from distributed import Client, LocalCluster

    from schedlab.flows.orchestration import NO_DASHBOARD, dask_scheduler

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                      scheduler_kwargs=NO_DASHBOARD) as cluster, \
            Client(cluster.scheduler_address, set_as_default=False) as other:
        busy = other.submit(time.sleep, 60, pure=False)  # another experiment's long replay
        deadline = time.monotonic() + 60
        while not any(other.processing().values()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with dask_scheduler(cluster.scheduler_address, None, f"sqlite:///{tmp_path / 'mlflow.db'}") as scheduler:
            started = time.monotonic()
            scheduler.warmed()
            assert time.monotonic() - started < 10
        other.cancel(busy)
