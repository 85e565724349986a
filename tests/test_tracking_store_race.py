"""Creating the sqlite MLflow store from several processes at once (issue 13 §1): every one of
them opens it, none fails with an alembic migration error; a broken store is a clear one-line error."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from schedlab.tasks import tracking
from schedlab.tasks.tracking import TrackingError

pytestmark = pytest.mark.timeout(240)

OPEN = textwrap.dedent("""\
    import sys, time
    from schedlab.tasks import tracking
    start = float(sys.argv[2])
    while time.time() < start:  # all processes open the store at the same moment
        time.sleep(0.001)
    tracking.check_tracking(sys.argv[1])
    print("opened")
    """)


def package_env() -> dict[str, str]:
    import schedlab

    root = str(Path(schedlab.__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
def test_processes_creating_the_store_at_once_all_succeed(tmp_path, processes=4):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    start = time.time() + 6  # after every interpreter has imported mlflow
    procs = [subprocess.Popen([sys.executable, "-c", OPEN, uri, str(start)], env=package_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(processes)]
    results = [(p.wait(timeout=200), *p.communicate()) for p in procs]
    for rc, out, err in results:
        assert rc == 0 and "opened" in out, err[-2000:]
    c = tracking.client(uri)
    assert [e.name for e in c.search_experiments()] == ["Default"]


def test_a_file_that_is_no_mlflow_store_is_one_clear_error(tmp_path):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"not a database" * 100)
    with pytest.raises(TrackingError) as caught:
        tracking.check_tracking(f"sqlite:///{db}")
    message = str(caught.value)
    assert f"its database {db} cannot be created or migrated" in message and "\n" not in message
