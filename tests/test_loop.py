"""The profile -> fit -> replay loop (issue #12 §1): a fitted iteration-time model replaces the catalog's
parameters for the workloads and GPU types it covers, so a changed profile changes a replay's result.

TEST FIXTURE (synthetic, not measured): solo records in the profile store's real schema, their iteration
times generated from known eq. 1-3 parameters (Castor §3.1) on an H100-named device."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from schedlab.profiling.store import ProfileRecord, ProfileStore
from schedlab.sched.core.cluster import load_cluster
from schedlab.sched.models.fitted import ModelError, make_iteration_time
from helpers import replay_table
from schedlab.sched.models.workloads import FittedCatalog, GpuParams, default_catalog, iteration_time
from schedlab.tasks.fit import fit_model

H100 = "NVIDIA H100 80GB HBM3"
FAST = GpuParams(alpha_comp=0.004, beta_comp=0.0002, alpha_comm_intra=0.0005, beta_comm_intra=0.0001,
                 alpha_comm_inter=0.0, beta_comm_inter=0.0, delta=2.0)


def write_profile(root: Path, workload: str, params: GpuParams, created_at: float) -> None:
    store = ProfileStore(root)
    mb = default_catalog().workload(workload).model_size_mb
    for micro in (16, 32, 64, 128):
        for accum in (1, 2):
            for gpus in (1, 2, 4):
                t = iteration_time(params, micro * accum, gpus, 1, accum, model_size_mb=mb)
                store.write([ProfileRecord(
                    config_key=f"{workload}-{micro}-{accum}-{gpus}", sweep="fixture", kind="solo", workload=workload,
                    size="full", batch_size=micro, accum_steps=accum, num_gpus=gpus, device="cuda", gpu_model=H100,
                    iter_time_mean_s=t, created_at=created_at)])


def trace() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 40
    return pd.DataFrame({
        "job_id": [f"j{i}" for i in range(n)], "submit_time": np.sort(rng.uniform(0, 600, n)),
        "num_gpus": rng.choice([1, 2, 4], n), "model": rng.choice(["cifar10", "ncf"], n),
        "batch_size": rng.choice([32, 64], n).astype(float), "iterations": rng.integers(2000, 20000, n),
    })


def replay_with(model: str, policy: str = "fifo") -> dict:
    return replay_table(trace(), load_cluster("2x4:h100"), policy, iteration_time=model).summary


def test_changed_profile_changes_the_replay(tmp_path: Path) -> None:
    store, models = tmp_path / "store", tmp_path / "models"
    write_profile(store, "cifar10", FAST, created_at=1000.0)
    first = fit_model("iteration-time", str(store), str(models))
    again = fit_model("iteration-time", str(store), str(models))
    assert again["path"] == first["path"]  # same profile, same (content-named) model
    catalog = replay_with("catalog")
    before = replay_with(first["path"])
    assert before["load_report"]["iteration_time_fitted"] == ["cifar10"]  # ncf keeps the catalog's figures
    assert before["load_report"]["iteration_time_gpu_type"] == "h100" and before["iteration_time"] == first["path"]
    assert before["avg_jct_s"] != catalog["avg_jct_s"]
    assert replay_with(first["path"]) == before  # deterministic

    slow = FAST.model_copy(update={"alpha_comp": 3 * FAST.alpha_comp, "beta_comp": 3 * FAST.beta_comp})
    write_profile(store, "cifar10", slow, created_at=2000.0)  # newer records of the same configurations
    second = fit_model("iteration-time", str(store), str(models))
    assert second["path"] != first["path"]
    after = replay_with(second["path"])
    assert after["avg_jct_s"] > before["avg_jct_s"] and after["makespan_s"] > before["makespan_s"]
    fitted = make_iteration_time(second["path"])
    assert isinstance(fitted, FittedCatalog)
    assert fitted.params("cifar10", "h100").alpha_comp == pytest.approx(slow.alpha_comp, rel=0.05)
    assert fitted.params("ncf", "h100") == default_catalog().params("ncf", "t4")  # uncovered: catalog's rule


def test_fitted_workload_must_be_a_catalog_entry(tmp_path: Path) -> None:
    bad = tmp_path / "it.json"
    bad.write_text('{"schema_version": 1, "kind": "iteration-time", "workloads": {"resnet18": {"h100":'
                   ' {"alpha_comp": 0.1, "beta_comp": 0.01, "alpha_comm_intra": 0, "beta_comm_intra": 0,'
                   ' "alpha_comm_inter": 0, "beta_comm_inter": 0, "delta": 1, "model_size_mb": 40}}}}')
    with pytest.raises(ModelError, match=r"\['resnet18'\] are not catalog entries"):
        make_iteration_time(bad)


def test_replay_cli_takes_iteration_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from schedlab import cli

    write_profile(tmp_path / "store", "ncf", FAST, created_at=1000.0)
    model = fit_model("iteration-time", str(tmp_path / "store"), str(tmp_path / "models"))["path"]
    assert cli.main(["replay", "--num-jobs", "30", "--cluster", "2x4:h100", "--policy", "fifo", "--annotate",
                     "--iteration-time", model, "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    summary = pd.read_json(tmp_path / "out" / "summary.json", typ="series")
    assert summary["iteration_time"] == model
    assert cli.main(["replay", "--iteration-time", str(tmp_path / "absent.json"), "--out", str(tmp_path / "o2")]) == 2
    assert "--iteration-time" in capsys.readouterr().err


def test_models_latest_resolves_to_the_newest_registered_versions(tmp_path: Path, monkeypatch, seed_home) -> None:
    from schedlab.sched.spec import ConfigError, load_config
    from schedlab.sched.models.fitted import ModelError
    from schedlab.tasks.model_tracking import fetcher, lineage, log_model, resolve_latest

    exp = tmp_path / "exp.yaml"
    exp.write_text("name: x\ntraces: [{name: syn}]\nclusters: [2x4]\npolicies: [fifo]\nmodels: latest\n")
    assert load_config(exp).models.model_dump() == {"interference": "latest", "iteration_time": "latest"}
    uri = f"sqlite:///{seed_home(tmp_path, prefect=False) / 'mlflow.db'}"
    with pytest.raises(ValueError, match="no registered version of 'iteration-time'"):
        resolve_latest({"iteration_time": "latest"}, uri)
    write_profile(tmp_path / "store", "ncf", FAST, created_at=1000.0)
    path = Path(fit_model("iteration-time", str(tmp_path / "store"), str(tmp_path / "models"))["path"])
    for _ in range(2):
        logged = log_model(path, "iteration-time", {}, uri=uri)
    assert resolve_latest({"iteration_time": "latest", "interference": "analytic"}, uri) == {
        "iteration_time": "models:/iteration-time/2", "interference": "analytic"}
    params, tags = lineage({"iteration_time": "models:/iteration-time/2", "interference": "analytic"}, uri)
    assert params == {"model.iteration_time.name": "iteration-time", "model.iteration_time.version": "2",
                      "model.iteration_time.run_id": logged["run_id"]}
    assert tags["schedlab.model_link.iteration-time"] == "#/models/iteration-time/versions/2"
    with pytest.raises(ModelError, match="models:/iteration-time/2: an MLflow URI"):  # sched/ alone reads files
        make_iteration_time("models:/iteration-time/2")
    # the registered (content-named) artifact loads by URI through the tasks layer's fetch, no MLFLOW_* set
    assert make_iteration_time("models:/iteration-time/2", fetcher(uri)).covered("h100") == ["ncf"]
    exp.write_text(f"name: x\ntraces: [{{name: syn}}]\nclusters: [2x4]\nmodels: {{iteration_time: {tmp_path}/no.json}}\n")
    with pytest.raises(ConfigError, match="models.iteration_time: .*no.json"):
        load_config(exp)
