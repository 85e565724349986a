"""The nightly flow for real on a Dask LocalCluster without GPU workers (tiny CPU sweep as the
``--cpu-smoke`` fallback, both fits, MLflow runs linked), GPU routing through a real
``dask worker --resources GPU=1``, and the pieces as plain functions."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedlab.flows.nightly import NO_GPU_WORKER, nightly_profile, sweep_on_dask
from schedlab.tasks import tracking
from schedlab.tasks.profile import gpu_workers, merge_records, read_sweep
from schedlab.tasks.tracking import PARENT_TAG

pytestmark = pytest.mark.timeout(240)
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "flows"
TINY = FIXTURES / "tiny-sweep.yaml"
SHARED_STORE = "flows-tiny-profile-store"  # read by test_flows_end_to_end


@pytest.fixture(scope="module")
def cpu_cluster(prefect_harness):
    """One plain worker process (no GPU resource), started with the test API's URL in its env."""
    from distributed import LocalCluster
    from schedlab.flows.api_server import exported_api_url

    with exported_api_url():
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
    yield cluster
    cluster.close(timeout=10)


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("SCHEDLAB_DASK_ADDRESS", raising=False)
    monkeypatch.setenv("SCHEDLAB_CODE_VERSION", "test-version")


def test_gpu_workers_from_scheduler_info():
    info = {"workers": {
        "tcp://10.0.0.1:1": {"host": "10.0.0.1", "resources": {"GPU": 1}},
        "tcp://10.0.0.1:2": {"host": "10.0.0.1", "resources": {"GPU": 1.0}},  # same node: one task
        "tcp://10.0.0.2:1": {"host": "10.0.0.2", "resources": {}},
        "tcp://10.0.0.3:1": {"host": "10.0.0.3", "resources": {"GPU": 2}},
        "tcp://10.0.0.4:1": {"host": "10.0.0.4"},
    }}
    assert list(gpu_workers(info)) == ["tcp://10.0.0.1:1", "tcp://10.0.0.3:1"]
    assert gpu_workers({"workers": {}}) == {}


def test_serve_default_flow_is_nightly_profile():
    from schedlab.flows.serve import DEFAULT_CRON, DEFAULT_FLOW, load_flow

    assert load_flow(DEFAULT_FLOW) is nightly_profile and DEFAULT_CRON == "0 2 * * *"


def test_merge_records_copies_only_missing_files(tmp_path):
    from schedlab.profiling.store import ProfileStore

    store = ProfileStore(tmp_path / "store")
    (store.records / "a.parquet").write_bytes(b"old")
    assert merge_records({"a.parquet": b"new", "b.parquet": b"b"}, str(tmp_path / "store")) == 1
    assert (store.records / "a.parquet").read_bytes() == b"old" and (store.records / "b.parquet").read_bytes() == b"b"
    with pytest.raises(ValueError):
        merge_records({"../x.parquet": b""}, str(tmp_path / "store"))
    with pytest.raises(FileNotFoundError, match="no sweep"):
        read_sweep("no-such-sweep")


@pytest.mark.slow
def test_nightly_without_gpu_worker(tmp_path, tmp_path_factory, prefect_harness, cpu_cluster, monkeypatch, capsys,
                                   seed_home):
    uri = f"sqlite:///{seed_home(tmp_path, prefect=False) / 'mlflow.db'}"
    # not asked for the CPU fallback: says so, profiles nothing
    report = nightly_profile(sweep="nightly", dask_address=cpu_cluster.scheduler_address,
                             store=str(tmp_path / "store"), tracking_uri=uri)
    assert report["status"] == "no-gpu-worker" and NO_GPU_WORKER in report["message"]
    assert "--resources GPU=1" in report["message"]
    assert not list((tmp_path / "store").glob("records/*.parquet"))
    from schedlab.cli import main

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # the store the first call created
    assert main(["nightly", "--dask-address", cpu_cluster.scheduler_address, "--store", str(tmp_path / "store")]) == 3
    assert NO_GPU_WORKER in capsys.readouterr().err
    monkeypatch.delenv("MLFLOW_TRACKING_URI")

    # --cpu-smoke: the CPU sweep (a tiny one here), both fits, runs linked
    report = nightly_profile(sweep="nightly", cpu_fallback=True, cpu_sweep=str(TINY),
                             dask_address=cpu_cluster.scheduler_address, store=str(tmp_path / "store"),
                             models_dir=str(tmp_path / "models"), tracking_uri=uri)
    assert report["status"] == "ok", report["failures"]
    assert report["cpu_fallback_used"] and report["sweep"] == "tiny"
    (profile,) = report["profiles"]
    assert profile["counts"] == {"ok": 4} and profile["merged"] == 0  # the worker wrote to this store
    assert len(list((tmp_path / "store").glob("records/*.parquet"))) == 4 == report["store_files"]

    c = tracking.client(uri)
    parent = c.get_run(report["parent_run_id"])
    assert parent.info.run_name.startswith("nightly-") and parent.info.status == "FINISHED"
    assert parent.data.tags["schedlab.profile_run_id"] == profile["run_id"]
    prof = c.get_run(profile["run_id"])
    assert prof.data.tags[PARENT_TAG] == parent.info.run_id and prof.data.metrics["configs.ok"] == 4
    assert prof.data.params["sweep"] == "tiny" and prof.data.params["device"] == "cpu"
    for name in ("iteration-time", "interference-ratio"):
        fit = report["fits"][name]
        run = c.get_run(fit["run_id"])
        assert run.data.tags[PARENT_TAG] == parent.info.run_id
        assert run.data.tags["schedlab.profile_run_id"] == profile["run_id"]
        assert parent.data.tags[f"schedlab.fit_run_id.{name}"] == fit["run_id"]
        assert fit["model_uri"] == f"models:/{name}/{fit['version']}" and run.data.metrics
        assert Path(fit["path"]).parent == tmp_path / "models"
    assert "rmse" in c.get_run(report["fits"]["interference-ratio"]["run_id"]).data.metrics
    from schedlab.sched.models.fitted import InterferenceModel
    from schedlab.tasks.model_tracking import fetcher

    # registered, loadable: models:/ URIs resolve against the tracking store (the tasks layer's fetch)
    InterferenceModel.load(report["fits"]["interference-ratio"]["model_uri"], fetcher(uri))

    # the end-to-end test starts from this store when the session has it (the sweep is resumable)
    shutil.copytree(tmp_path / "store", tmp_path_factory.getbasetemp() / SHARED_STORE, dirs_exist_ok=True)


@pytest.mark.slow
def test_profiling_task_goes_to_the_gpu_worker(tmp_path, prefect_harness, cpu_cluster):
    """A real `dask worker ADDR --resources GPU=1` joins the cluster: the flow finds it and the
    profiling task runs there (an empty sweep: only the routing is tested)."""
    from distributed import Client
    from prefect.settings import PREFECT_API_URL
    from prefect_dask import DaskTaskRunner

    address = cpu_cluster.scheduler_address
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                               "--resources", "GPU=1", "--no-dashboard"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with Client(address, set_as_default=False) as client:
            client.wait_for_workers(2, timeout=60)
            found = gpu_workers(client.scheduler_info(n_workers=-1))
        assert len(found) == 1
        empty = tmp_path / "empty.yaml"
        empty.write_text("name: empty\ndevice: cpu\n")
        sweep = read_sweep(str(empty))
        (result,) = sweep_on_dask.with_options(task_runner=DaskTaskRunner(address=address))(
            sweep, str(tmp_path / "store"), list(found))
        assert result["dask_worker"] == next(iter(found)) and result["records"] == {}
    finally:
        worker.terminate()
        deadline = time.monotonic() + 20
        while worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if worker.poll() is None:
            worker.kill()
