"""The ephemeral Prefect API of a flow command (issue #30): a slow start is waited for with progress
lines, a limit past which the error says how to raise it (exit 2), and the server never outlives the
process that started it, SIGKILL included."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import Future
from pathlib import Path

import psutil
import pytest
from helpers import cli_env, run_cli

from schedlab.flows import api_server

pytestmark = pytest.mark.timeout(300)

SLOW_EXPERIMENT = """\
name: slow
seeds: [0, 1, 2, 3, 4, 5, 6, 7]
traces:
  - {name: syn, format: synthetic, options: {num_jobs: 3000}}
clusters: ["2x4"]
policies: [fifo, sjf, tiresias]
"""


def test_the_startup_limit_is_prefects_setting_when_set_else_ten_minutes(monkeypatch):
    monkeypatch.delenv(api_server.TIMEOUT_SETTING, raising=False)
    assert api_server.startup_timeout() == api_server.STARTUP_TIMEOUT_S == 600
    from prefect.settings import temporary_settings

    with temporary_settings({api_server.PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: 1800}):
        assert api_server.startup_timeout() == 1800


def test_waiting_for_the_api_prints_progress_until_it_answers(capsys):
    started: Future = Future()
    threading.Timer(0.5, started.set_result, ["http://127.0.0.1:1/api"]).start()
    assert api_server.wait_for_api(started, progress_s=0.1) == "http://127.0.0.1:1/api"
    lines = [line for line in capsys.readouterr().err.splitlines() if "waiting for the Prefect API server" in line]
    assert len(lines) >= 2 and api_server.TIMEOUT_SETTING in lines[0]


@pytest.mark.slow
def test_a_server_too_slow_to_start_is_an_error_that_says_how_to_wait_longer(tmp_path, seed_home):
    (tmp_path / "exp.yaml").write_text(SLOW_EXPERIMENT)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    run = run_cli(["experiment", str(tmp_path / "exp.yaml"), "--workers", "1"],
                  cli_env(seed_home(tmp_path / "home", prefect=False), **{api_server.TIMEOUT_SETTING: "1"}), cwd)
    assert run.returncode == 2, run.stderr[-3000:]
    last = run.stderr.strip().splitlines()[-1]  # Dask may log its workers' stop above it
    assert last.startswith("schedlab experiment: error: the ephemeral Prefect API server did not start within 1 s")
    assert f"{api_server.TIMEOUT_SETTING}=" in last
    assert _servers_of(tmp_path / "home") == []  # the half-started server was stopped


def _servers_of(home: Path) -> list[psutil.Process]:
    """Prefect API servers running with this $SCHEDLAB_HOME."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "uvicorn" in " ".join(proc.info["cmdline"] or []) and proc.environ().get("SCHEDLAB_HOME") == str(home):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.mark.slow
def test_a_killed_experiment_leaves_no_prefect_server_behind(tmp_path, seed_home):
    """SIGKILL gives the process no chance to stop its server: the kernel does (PR_SET_PDEATHSIG)."""
    (tmp_path / "exp.yaml").write_text(SLOW_EXPERIMENT)
    home = seed_home(tmp_path / "home")
    proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "experiment", str(tmp_path / "exp.yaml"),
                             "--workers", "1"], env=cli_env(home), cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (servers := _servers_of(home)) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert servers, "the experiment started no Prefect server"
        started = psutil.Process(proc.pid).children(recursive=True)  # the server, Dask's workers, …
        proc.kill()
        proc.wait()
        gone, alive = psutil.wait_procs({*servers, *started}, timeout=30)
        assert alive == [], [p.cmdline() for p in alive]
    finally:
        if proc.poll() is None:
            proc.kill()
        for server in _servers_of(home):
            server.kill()


def test_flushing_logs_where_an_event_loop_runs_drains_them_and_leaves_no_coroutine(monkeypatch):
    # Prefect's drain returns a coroutine where the calling thread runs a loop: called plainly it was
    # dropped ("RuntimeWarning: coroutine 'wait' was never awaited") and nothing was sent
    from prefect.logging.handlers import APILogWorker

    from schedlab.flows.api_server import flush_api_logs

    drained: list[float | None] = []

    def drain_all(timeout: float | None = None, at_exit: bool = True):  # as Prefect's, without a server
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            drained.append(timeout)
            return set(), set()
        return asyncio.sleep(0)

    monkeypatch.setattr(APILogWorker, "drain_all", drain_all)

    async def in_a_loop() -> None:
        flush_api_logs(timeout=3.0)

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        asyncio.run(in_a_loop())
        gc.collect()
    flush_api_logs(timeout=4.0)  # and where none runs (the CLI)
    assert drained == [3.0, 4.0]


def test_the_servers_port_is_held_from_the_moment_its_url_exists(tmp_path, seed_home, monkeypatch):
    """The port is bound when the URL is made and the bound socket handed to the server: nothing that
    starts meanwhile (a Dask cluster's workers, seconds before the server binds) can take it."""
    import socket

    import httpx

    home = seed_home(tmp_path / "home", mlflow=False)
    monkeypatch.setenv("PREFECT_HOME", str(home / "prefect"))
    server = api_server.EphemeralServer()
    try:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", server.port))
        server.start(timeout=120)
        assert httpx.get(f"{server.api_url}/health", timeout=30).status_code == 200
    finally:
        server.stop()
