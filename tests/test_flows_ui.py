"""``schedlab ui`` as a process (issue 13 §4): SIGTERM stops the MLflow server with it, as Ctrl-C
does (nothing is left listening), and a busy port is a clear exit 2 before anything starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from schedlab.cli.ui import port_free

pytestmark = pytest.mark.timeout(240)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ui_process(home: Path, port: int) -> subprocess.Popen:
    import schedlab

    root = str(Path(schedlab.__file__).resolve().parent.parent)
    env = {**os.environ, "SCHEDLAB_HOME": str(home), "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen([sys.executable, "-m", "schedlab.cli", "ui", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_healthy(proc: subprocess.Popen, port: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("the MLflow UI did not come up")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ui_stops_its_server_on_sigterm_as_on_ctrl_c(tmp_path, sig, seed_home):
    port = free_port()
    proc = ui_process(seed_home(tmp_path / "home", prefect=False), port)
    try:
        wait_healthy(proc, port)
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert tree  # the mlflow server (and its workers)
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
        gone, alive = psutil.wait_procs(tree, timeout=30)
        assert alive == [], [p.cmdline() for p in alive]
        assert port_free("127.0.0.1", port) is None
    finally:
        if proc.poll() is None:
            proc.kill()


def test_ui_on_a_busy_port_exits_2_with_a_clear_message(tmp_path, capsys):
    from schedlab.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["ui", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"schedlab ui: error: cannot listen on 127.0.0.1:{port}" in err and "another --port" in err
    with pytest.raises(SystemExit) as exit_info:  # out of range: rejected while parsing the options
        main(["ui", "--port", "70000"])
    assert exit_info.value.code == 2
    assert "argument --port: must be <= 65535, got '70000'" in capsys.readouterr().err
