"""Iteration-time fitting (Castor §3.1 eq. 1-3): a fixture of solo rows written in the profile store's
schema, a real tiny CPU sweep, Pollux's published step times, the artifact and its errors."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import shared_data
from schedlab.profiling.store import ProfileRecord, ProfileStore
from schedlab.profiling import fitting
from schedlab.cli.fit import register
from schedlab.sched.models.fitted import IterationTimeModel, ModelError
from schedlab.sched.models.workloads import GpuParams, iteration_time

# TEST FIXTURE (synthetic, not measured): solo rows generated from known eq. 1-3 parameters + 1% noise
TRUE = GpuParams(alpha_comp=0.02, beta_comp=0.004, alpha_comm_intra=0.001, beta_comm_intra=0.0005,
                 alpha_comm_inter=0.0, beta_comm_inter=0.0, delta=2.0)
M_MB = 44.7


def write_fixture_store(root: Path) -> ProfileStore:
    store, rng = ProfileStore(root), np.random.default_rng(0)
    for micro in (4, 8, 16, 32, 64):
        for accum in (1, 2, 4):
            for gpus in (1, 2, 4, 8):
                t = iteration_time(TRUE, micro * accum, gpus, 1, accum, model_size_mb=M_MB) * rng.normal(1, 0.01)
                store.write([ProfileRecord(config_key=f"fx-{micro}-{accum}-{gpus}", sweep="fixture", kind="solo",
                                           workload="cifar10", size="tiny", batch_size=micro, accum_steps=accum,
                                           num_gpus=gpus, device="cuda", gpu_model="NVIDIA H100 80GB HBM3",
                                           iter_time_mean_s=t)])
    return store


def _cli(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(argv)
    return int(args.func(args))


def test_fit_recovers_known_parameters_and_predicts_unmeasured(tmp_path: Path) -> None:
    df = write_fixture_store(tmp_path / "store").latest()
    fits = fitting.fit_store(df, holdout=0.2, seed=1, sizes_mb={"cifar10": M_MB})
    p = fits["cifar10"]["h100"]
    assert p["mape_holdout"]["all"] < 0.02 and p["mape_holdout"]["rows"] >= 10
    assert p["fixed"] == ["alpha_comm_inter", "beta_comm_inter"]  # one server: not identifiable
    # ... and not free: a job across servers pays at least the server's own all-reduce cost
    assert p["assumed"] == {"alpha_comm_inter": "alpha_comm_intra", "beta_comm_inter": "beta_comm_intra"}
    assert (p["alpha_comm_inter"], p["beta_comm_inter"]) == (p["alpha_comm_intra"], p["beta_comm_intra"]) != (0, 0)
    assert p["alpha_comp"] == pytest.approx(TRUE.alpha_comp, rel=0.1)
    assert p["beta_comp"] == pytest.approx(TRUE.beta_comp, rel=0.05)
    model = IterationTimeModel({"schema_version": 1, "kind": "iteration-time", "workloads": fits})
    for batch, gpus, accum in ((100, 3, 1), (256, 6, 8), (12, 1, 3)):  # never measured
        truth = iteration_time(TRUE, batch, gpus, 1, accum, model_size_mb=M_MB)
        assert model.iteration_time("cifar10", batch, gpus, 1, accum) == pytest.approx(truth, rel=0.05)


def test_cli_writes_artifact_that_reloads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_fixture_store(tmp_path / "store")
    out = tmp_path / "it.json"
    assert _cli(["fit", "iteration-time", "--profiles", str(tmp_path / "store"), "--out", str(out), "--no-track"]) == 0
    assert "cifar10" in capsys.readouterr().out
    model = IterationTimeModel.load(out)
    assert model.params("cifar10", "h100").model_size_mb > 0
    assert model.data["training"]["profile_store"]["records"] == 60
    with pytest.raises(KeyError, match="no iteration-time fit"):
        model.params("bert")


def test_artifact_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "iteration-time.json"
    bad.write_text("{not json")
    with pytest.raises(ModelError, match="iteration-time.json: not valid JSON"):
        IterationTimeModel.load(bad)
    bad.write_text(json.dumps({"schema_version": 99, "kind": "iteration-time", "workloads": {}}))
    with pytest.raises(ModelError, match="schema_version 99"):
        IterationTimeModel.load(bad)
    bad.write_text(json.dumps({"schema_version": 1, "kind": "interference-ratio"}))
    with pytest.raises(ModelError, match="kind is 'interference-ratio'"):
        IterationTimeModel.load(bad)
    bad.write_text(json.dumps({"schema_version": 1, "kind": "iteration-time",
                               "workloads": {"ncf": {"cpu": {"alpha_comp": -1}}}}))
    with pytest.raises(ModelError, match="workloads.ncf.cpu"):
        IterationTimeModel.load(bad)
    with pytest.raises(ModelError, match="model not found"):
        IterationTimeModel.load(tmp_path / "absent.json")


def test_pollux_heldout_mape() -> None:
    """The shared fitting routine on Pollux's measured T4 step times: held-out configurations."""
    traces = shared_data("profiles", "pollux", "traces")
    from schedlab.sched.models.workloads import default_catalog

    for name in ("cifar10", "bert"):
        df = fitting.load_pollux(traces / name)
        fit, held = fitting.fit_with_holdout(df, default_catalog().workload(name).model_size_mb, seed=0)
        assert held["rows"] >= 0.15 * len(df) and set(held) >= {"single", "intra", "inter"}
        assert held["all"] < 0.12, (name, held)
        assert fit.fixed == [] and 1 <= fit.params["delta"] <= 10
