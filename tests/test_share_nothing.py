"""An experiment on a Dask cluster that shares no disk with its client: a ``dask scheduler`` and two
``dask worker`` processes, each worker in a private mount namespace with an empty tmpfs over the client's
folder (as on another host), a real ``mlflow server`` and a real ``prefect server``.

- with the default tracking store (sqlite in the client's folder) the experiment stops before any replay,
  in one line naming MLFLOW_TRACKING_URI;
- with the servers, an experiment over a trace file, a ξ table and an inference-load series (all in the
  client's folder, which the workers cannot see) finishes with results equal to a LocalCluster's, and the
  workers' folders hold nothing afterwards;
- a trace given as an ``http://`` URL is read by the client and replayed like the same file.

Skipped where a private mount namespace cannot be made (not root, no ``unshare``)."""

from __future__ import annotations

import contextlib
import http.server
import math
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from schedlab.flows.orchestration import quiet_samplers_environ

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

ENV = {"DO_NOT_TRACK": "true", "MLFLOW_DISABLE_TELEMETRY": "true", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
       "SCHEDLAB_CODE_VERSION": "share-nothing"}


def can_hide(folder: Path) -> bool:
    """Whether a process can get a mount namespace of its own with a tmpfs over ``folder``."""
    if shutil.which("unshare") is None:
        return False
    probe = folder / "probe"
    probe.write_text("x")
    done = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs none {folder} && test ! -e {probe}"],
                          capture_output=True, timeout=30)
    probe.unlink()
    return done.returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args} exited with {proc.returncode}"
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2):
                return
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer in {timeout} s")


def bin_of(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "PREFECT_HOME")}
    return {**env, **ENV, **extra}


def write_inputs(client: Path) -> Path:
    """The experiment's files in the client's folder: a trace, a ξ table, an inference-load series."""
    import random

    rng = random.Random(7)
    rows, t = ["job_id,submit_time,num_gpus,duration"], 0.0
    for i in range(40):
        t += rng.expovariate(1 / 90)
        rows.append(f"j{i},{t:.0f},{rng.choice([1, 1, 2, 4])},{rng.randint(120, 3600)}")
    (client / "trace.csv").write_text("\n".join(rows) + "\n")
    from schedlab import conf

    shutil.copy(conf.path("interference") / "h200-pairs.csv", client / "xi.csv")
    (client / "load.csv").write_text("time,utilization\n0,0.3\n3600,0.6\n7200,0.2\n")
    config = client / "exp.yaml"
    config.write_text(textwrap.dedent("""\
        name: share-nothing
        traces:
          - name: t
            source: trace.csv
            annotate: [pollux, {scheme: lyra, scenario: basic}]
        clusters: [lyra-testbed]
        models: {interference: "table:xi.csv"}
        inference: {load: load.csv}
        policies: [fifo, sjf-bsbf, lyra]
        seeds: [0, 1]
        figures: false
        """))
    return config


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, seed_home) -> Iterator[dict]:
    """The servers, the scheduler and two hidden-folder workers; the client's folder. The servers' stores
    start from the session's empty ones (their creation is not this module's subject), and the MLflow
    server runs no GenAI jobs (two job consumers fewer, as ``schedlab ui`` runs it)."""
    client = tmp_path_factory.mktemp("client")
    if not can_hide(client):
        pytest.skip("no private mount namespace here (needs root and unshare)")
    servers = seed_home(tmp_path_factory.mktemp("servers"))
    ports = {name: free_port() for name in ("mlflow", "prefect", "dask")}
    procs: list[subprocess.Popen] = []

    def start(args: list[str], log: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=open(servers / log, "w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        procs.append(proc)
        return proc

    try:
        mlflow = start([bin_of("mlflow"), "server", "--host", "127.0.0.1", "--port", str(ports["mlflow"]), "--workers",
                        "1", "--backend-store-uri", f"sqlite:///{servers}/mlflow.db",
                        "--artifacts-destination", str(servers / "artifacts")], "mlflow.log", servers,
                       environ(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"))
        prefect = start([bin_of("prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(ports["prefect"])],
                        "prefect.log", servers, environ(PREFECT_HOME=str(servers / "prefect")))
        scheduler = f"tcp://127.0.0.1:{ports['dask']}"
        quiet = quiet_samplers_environ()  # as docs/how-to/dask-cluster.md advises for your own cluster
        start([bin_of("dask"), "scheduler", "--host", "127.0.0.1", "--port", str(ports["dask"]), "--no-dashboard"],
              "scheduler.log", servers, environ(**quiet))
        workers = []
        for i in range(2):
            folder = tmp_path_factory.mktemp(f"worker{i}")
            workers.append(folder)
            hidden = f"mount -t tmpfs none {client} && exec {bin_of('dask')} worker {scheduler} --nthreads 1 --no-dashboard"
            start(["unshare", "-m", "sh", "-c", hidden], f"worker{i}.log", folder,
                  environ(SCHEDLAB_HOME=str(folder / "home"), PREFECT_HOME=str(folder / "prefect"), **quiet))
        wait_http(f"http://127.0.0.1:{ports['mlflow']}/health", mlflow)
        wait_http(f"http://127.0.0.1:{ports['prefect']}/api/health", prefect)
        from distributed import Client

        with Client(scheduler, timeout=60, set_as_default=False) as dask_client:
            dask_client.wait_for_workers(2, timeout=120)
        yield {"client": client, "config": write_inputs(client), "scheduler": scheduler, "workers": workers,
               "mlflow": f"http://127.0.0.1:{ports['mlflow']}", "prefect": f"http://127.0.0.1:{ports['prefect']}/api"}
    finally:
        for proc in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)


def experiment(config: Path, home: Path, *options: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "schedlab.cli", "experiment", str(config), *options],
                          cwd=config.parent, env=environ(SCHEDLAB_HOME=str(home), **env), capture_output=True,
                          text=True, timeout=540)


def results(uri: str, name: str) -> dict[str, dict[str, float]]:
    """run name -> the replay's metrics that are results (not wall or solver times), of experiment ``name``."""
    from mlflow import MlflowClient

    c = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = c.get_experiment_by_name(name)
    if experiment is None:
        return {}
    runs = c.search_runs([experiment.experiment_id], filter_string="tags.`schedlab.kind` = 'replay'")
    return {r.info.run_name: {k: v for k, v in r.data.metrics.items() if not k.endswith(("wall_s", "solve_s"))}
            for r in runs if r.info.status == "FINISHED"}


def same(a: float | None, b: float | None) -> bool:
    return a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))


def test_default_tracking_stops_before_any_replay_saying_what_to_set(cluster):
    home = cluster["client"] / "home-default"  # the client's folder: the workers do not see it
    done = experiment(cluster["config"], home, "--dask-address", cluster["scheduler"],
                      PREFECT_API_URL=cluster["prefect"])
    assert done.returncode != 0, done.stdout + done.stderr
    [line] = [x for x in done.stderr.splitlines() if "error" in x]
    assert "cannot use the tracking store" in line and "MLFLOW_TRACKING_URI=" in line and "nothing was run" in line
    assert "replays;" not in done.stdout  # stopped before the fan-out
    assert results(f"sqlite:///{home}/mlflow.db", "share-nothing") == {}


def test_experiment_over_client_files_matches_a_local_cluster(cluster):
    remote = experiment(cluster["config"], cluster["client"] / "home-remote", "--dask-address", cluster["scheduler"],
                        MLFLOW_TRACKING_URI=cluster["mlflow"], PREFECT_API_URL=cluster["prefect"])
    assert remote.returncode == 0, remote.stdout[-3000:] + remote.stderr[-3000:]
    said = remote.stdout + remote.stderr
    assert "inputs sent to the workers through Dask: 3" in said
    assert "xi.csv applied to 0" in said and "schedlab-inputs" not in said  # the client's names, not the copies'
    assert str(cluster["client"] / "xi.csv") in said
    local_home = cluster["client"] / "home-local"
    local = experiment(cluster["config"], local_home, "--workers", "1")
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    there = results(cluster["mlflow"], "share-nothing")
    here = results(f"sqlite:///{local_home}/mlflow.db", "share-nothing")
    assert len(there) == 6 and set(there) == set(here)
    differ = {(run, k): (there[run].get(k), here[run].get(k)) for run in there
              for k in set(there[run]) | set(here[run]) if not same(there[run].get(k), here[run].get(k))}
    assert differ == {}
    for folder in cluster["workers"]:  # the workers' own folders: nothing left (their copies were in Dask's scratch)
        assert [p for p in folder.rglob("*") if p.is_file() and p.suffix != ".log"] == []


def test_trace_from_an_http_url_replays_like_the_file(cluster, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(cluster["client"] / "trace.csv", served / "trace.csv")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(served))  # noqa: E731
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/trace.csv"
        config = cluster["client"] / "url.yaml"
        config.write_text(cluster["config"].read_text().replace("source: trace.csv", f"source: {url}")
                          .replace("name: share-nothing", "name: share-nothing-url")
                          .replace("policies: [fifo, sjf-bsbf, lyra]", "policies: [sjf-bsbf]"))
        done = experiment(config, cluster["client"] / "home-url", "--dask-address", cluster["scheduler"],
                          MLFLOW_TRACKING_URI=cluster["mlflow"], PREFECT_API_URL=cluster["prefect"])
        server.shutdown()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    by_url = results(cluster["mlflow"], "share-nothing-url")
    by_file = {run: metrics for run, metrics in results(cluster["mlflow"], "share-nothing").items() if "sjf-bsbf" in run}
    assert len(by_url) == 2 and set(by_url) == set(by_file)
    assert all(same(by_url[run].get(k), by_file[run].get(k)) for run in by_url for k in {*by_url[run], *by_file[run]})
