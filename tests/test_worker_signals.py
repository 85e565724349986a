"""The experiment's LocalCluster (``flows/orchestration.dask_scheduler``, a real Dask cluster): every
worker ignores SIGINT, also one its nanny starts in place of a worker that died, so a Ctrl-C at the
terminal reaches the flow only (no KeyboardInterrupt traceback from a worker)."""

from __future__ import annotations

import os
import signal
import time

import pytest


def ignores_sigint(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGINT (its ``SigIgn`` mask in /proc)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    raise AssertionError(f"/proc/{pid}/status has no SigIgn")


@pytest.mark.slow
def test_restarted_workers_ignore_sigint(tmp_path) -> None:
    from distributed import Client

    from schedlab.flows.orchestration import dask_scheduler

    with dask_scheduler(None, 1, f"sqlite:///{tmp_path / 'mlflow.db'}") as scheduler, \
            Client(scheduler.address, set_as_default=False) as client:
        [(worker, pid)] = client.run(os.getpid).items()
        assert ignores_sigint(pid)
        client.restart_workers([worker])  # as the nanny does for a worker that died
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pids = client.run(os.getpid)
            if pids and pid not in pids.values():
                break
            time.sleep(0.2)
        [new] = client.run(os.getpid).values()
        assert new != pid and ignores_sigint(new)
        assert not ignores_sigint(os.getpid())  # the flow's own process still takes Ctrl-C
