"""``schedlab serve`` against a real ``prefect server`` started here; ``schedlab ui`` for real."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prefect import flow

pytestmark = pytest.mark.timeout(240)
TESTS = Path(__file__).resolve().parent


@flow(name="tiny-nightly")
def tiny_nightly(n: int = 1) -> int:
    """The flow the test serves (``test_flows_serve:tiny_nightly``)."""
    return n + 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} did not come up in {timeout} s")


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def deployments(api: str, name: str) -> list[dict]:
    found = httpx.post(f"{api}/deployments/filter", json={"deployments": {"name": {"any_": [name]}}}, timeout=10)
    found.raise_for_status()
    return found.json()


def schedules(api: str, name: str) -> list[dict]:
    return [s for d in deployments(api, name) for s in d.get("schedules", [])]


@pytest.fixture(scope="module")
def servers(tmp_path_factory, seed_home):
    """A real ``prefect server`` and ``schedlab ui``, started side by side (each takes seconds)."""
    tmp = tmp_path_factory.mktemp("servers")
    seed_home(tmp, mlflow=False)  # the server's database (its PREFECT_HOME: tmp/prefect); the UI creates its store
    port, ui_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp / "prefect"), DO_NOT_TRACK="true",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_UI_ENABLED="false")
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                               "--port", str(port), "--no-services"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ui_env = {**os.environ, "SCHEDLAB_HOME": str(tmp / "home")}
    ui_env.pop("MLFLOW_TRACKING_URI", None)
    ui = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "ui", "--port", str(ui_port)], env=ui_env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield {"api": f"http://127.0.0.1:{port}/api", "server": server, "env": env,
               "ui": f"http://127.0.0.1:{ui_port}", "ui_proc": ui, "home": tmp / "home"}
    finally:
        stop(ui, signal.SIGINT)
        stop(server)


@pytest.mark.slow
def test_serve_registers_the_cron_schedule_and_stopping_pauses_it(servers):
    api, server, env = servers["api"], servers["server"], servers["env"]
    wait_for(f"{api}/health", server)
    serve_env = {**env, "PREFECT_API_URL": api,
                 "PYTHONPATH": os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])}
    serve = subprocess.Popen(
        [sys.executable, "-m", "schedlab.cli", "serve", "--flow", "test_flows_serve:tiny_nightly",
         "--cron", "0 2 * * *", "--timezone", "Europe/Zurich", "--name", "nightly-test"],
        env=serve_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        found: list[dict] = []
        while not found and time.monotonic() < deadline and serve.poll() is None:
            found = schedules(api, "nightly-test")
            time.sleep(0.5)
        assert len(found) == 1, serve.stdout.read() if serve.poll() is not None else "no schedule"
        schedule, active = found[0]["schedule"], found[0]["active"]
        assert schedule["cron"] == "0 2 * * *" and schedule["timezone"] == "Europe/Zurich" and active
        assert [d["paused"] for d in deployments(api, "nightly-test")] == [False]
    finally:
        stop(serve, signal.SIGINT)
    assert [d["paused"] for d in deployments(api, "nightly-test")] == [True]  # stopping serve paused it


def test_serve_without_a_server_or_with_a_bad_flow_says_so(capsys):
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from schedlab.cli import main

    with temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{free_port()}/api"}):
        assert main(["serve", "--flow", "test_flows_serve:tiny_nightly"]) == 2
        assert "unreachable" in capsys.readouterr().err
    if not PREFECT_API_URL.value():
        assert main(["serve", "--flow", "test_flows_serve:tiny_nightly"]) == 2
        assert "no Prefect server" in capsys.readouterr().err
    assert main(["serve", "--flow", "test_flows_serve:nothing_here"]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["serve", "--flow", "test_flows_serve:tiny_nightly", "--timezone", "Mars/Olympus"]) == 2
    assert "bad schedule" in capsys.readouterr().err
    assert main(["serve", "--flow", "test_flows_serve:tiny_nightly", "--cron", "0 25 * *"]) == 2
    assert "bad schedule" in capsys.readouterr().err


@pytest.mark.slow
def test_ui_serves_the_project_store(servers):
    from schedlab.cli.ui import ui_command

    home = servers["home"]
    cmd = ui_command("127.0.0.1", 5000, home)
    assert cmd[cmd.index("--workers") + 1] == "1" and cmd[cmd.index("--port") + 1] == "5000"
    assert cmd[cmd.index("--backend-store-uri") + 1] == f"sqlite:///{home / 'mlflow.db'}"
    wait_for(f"{servers['ui']}/health", servers["ui_proc"])
    experiments = httpx.post(f"{servers['ui']}/api/2.0/mlflow/experiments/search",
                             json={"max_results": 10}, timeout=10).json()
    assert [e["name"] for e in experiments["experiments"]] == ["Default"]
    assert (home / "mlflow.db").is_file()
