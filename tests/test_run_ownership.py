"""Run ownership (issue 13 §1): a replay run another live process owns is waited for, never retired;
one whose owner is dead on this host, or whose lease expired, is a leftover that is retired."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from schedlab.tasks import tracking
from schedlab.sched.spec import load_config
from schedlab.tasks.replay import log_replay
from schedlab.tasks.tracking import KEY_TAG, LEASE_TAG, OWNER_TAG, SUPERSEDED_TAG

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def store(tmp_path, seed_home):
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent("""\
        name: owned
        traces: [{name: syn, options: {num_jobs: 50}}]
        clusters: [4x8]
        policies: [fifo]
        """))
    uri = f"sqlite:///{seed_home(tmp_path, prefect=False) / 'mlflow.db'}"
    tracking.check_tracking(uri)
    exp = tracking.ensure_experiment(uri, "owned", tmp_path / "art")
    (spec,) = load_config(path).grid("test")
    return uri, exp, spec


def other_run(uri: str, exp: str, key: str, pid: int, lease_s: float) -> str:
    tags = {KEY_TAG: key, OWNER_TAG: f"{socket.gethostname()}:{pid}", LEASE_TAG: f"{time.time() + lease_s:.0f}"}
    return tracking.client(uri).create_run(exp, tags=tags).info.run_id


def test_a_run_a_live_process_owns_is_waited_for_not_retired(store):
    uri, exp, spec = store
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        theirs = other_run(uri, exp, spec.key, owner.pid, lease_s=60)
        outcome: dict = {}
        waiter = threading.Thread(target=lambda: outcome.update(log_replay(spec, uri, exp, None)))
        waiter.start()
        waiter.join(3)
        assert waiter.is_alive()  # waiting on the live owner, not replacing its run
        c = tracking.client(uri)
        c.log_metric(theirs, "avg_jct_s", 1.0)
        c.set_terminated(theirs, status="FINISHED")
        waiter.join(30)
    finally:
        owner.kill()
        owner.wait()
    assert outcome["run_id"] == theirs and outcome["logged"] is False
    run = tracking.client(uri).get_run(theirs)
    assert run.info.status == "FINISHED" and run.info.lifecycle_stage == "active"
    assert SUPERSEDED_TAG not in run.data.tags


@pytest.mark.parametrize("dead_owner, lease_s", [(True, 60), (False, -1)])
def test_a_run_whose_owner_is_dead_or_lease_expired_is_retired(store, dead_owner, lease_s):
    uri, exp, spec = store
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        if dead_owner:
            owner.kill()
            owner.wait()
        stale = other_run(uri, exp, spec.key, owner.pid, lease_s=lease_s)
        result = log_replay(spec, uri, exp, None)
    finally:
        owner.kill()
        owner.wait()
    assert result["logged"] and result["run_id"] != stale
    run = tracking.client(uri).get_run(stale)
    assert run.info.status == "KILLED" and run.info.lifecycle_stage == "deleted"
    assert run.data.tags[SUPERSEDED_TAG] == result["run_id"]
    assert tracking.is_live(tracking.client(uri).get_run(result["run_id"])) is False  # FINISHED
