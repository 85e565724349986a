"""Castor eq. 1-3 iteration-time model and the workload catalog (schedlab.sched.models.workloads)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from schedlab.sched.models.workloads import (
    DEFAULT_CATALOG_PATH,
    CatalogError,
    GpuParams,
    IterationParams,
    WorkloadCatalog,
    default_catalog,
    iteration_time,
    min_servers,
)
from helpers import SHARED_DATA

POLLUX = SHARED_DATA / "profiles" / "pollux" / "traces"


def _params(delta: float = 2.0, **kw) -> IterationParams:
    base = dict(
        alpha_comp=0.1,
        beta_comp=0.01,
        alpha_comm_intra=0.01,
        beta_comm_intra=0.001,
        alpha_comm_inter=0.05,
        beta_comm_inter=0.004,
        delta=delta,
        model_size_mb=100.0,
    )
    base.update(kw)
    return IterationParams(**base)


# ---------------------------------------------------------------------------------------- eq. 1-3


def test_single_gpu_is_compute_only():
    p = _params(alpha_comm_intra=99.0, beta_comm_intra=99.0, alpha_comm_inter=99.0, beta_comm_inter=99.0)
    assert iteration_time(p, 32, 1, 1) == pytest.approx(0.1 + 0.01 * 32)  # eq. 1, no comm for 1 GPU


def test_intra_server_s1_by_hand():
    p = _params(delta=2.0)
    n = 4
    t_comp = 0.1 + 0.01 * 32
    t_comm = 2 * (n - 1) * 0.01 + 2 * (n - 1) / n * 0.001 * 100.0
    expect = math.sqrt(t_comp**2 + t_comm**2)
    assert iteration_time(p, 32, n, 1) == pytest.approx(expect, rel=1e-12)


def test_inter_server_uses_inter_pair():
    p = _params(delta=1.0)
    n = 16
    t_comp = 0.1 + 0.01 * 8
    t_comm = 2 * (n - 1) * 0.05 + 2 * (n - 1) / n * 0.004 * 100.0
    assert iteration_time(p, 8, n, 2) == pytest.approx(t_comp + t_comm, rel=1e-12)
    assert iteration_time(p, 8, n, 2) > iteration_time(p, 8, n, 1)


def test_accumulation_steps_by_hand():
    p = _params(delta=2.0)
    n, b, s = 8, 64, 4
    t_sub = 0.1 + 0.01 * b / s
    t_comm = 2 * (n - 1) * 0.01 + 2 * (n - 1) / n * 0.001 * 100.0
    expect = (s - 1) * t_sub + (t_sub**2 + t_comm**2) ** 0.5
    assert iteration_time(p, b, n, 1, accumulation_steps=s) == pytest.approx(expect, rel=1e-12)
    # s = 1 versus s > 1 at the same batch: accumulation costs the extra alpha_comp's
    assert iteration_time(p, b, n, 1, 1) < iteration_time(p, b, n, 1, s)


def test_delta_one_is_sum_and_large_delta_is_max():
    for n, srv in ((4, 1), (16, 2)):
        p1 = _params(delta=1.0)
        t_comp = 0.1 + 0.01 * 16
        a, b = (0.01, 0.001) if srv == 1 else (0.05, 0.004)
        t_comm = 2 * (n - 1) * a + 2 * (n - 1) / n * b * 100.0
        assert iteration_time(p1, 16, n, srv) == pytest.approx(t_comp + t_comm, rel=1e-12)
        big = iteration_time(_params(delta=1e6), 16, n, srv)
        assert big == pytest.approx(max(t_comp, t_comm), rel=1e-5)
        assert iteration_time(_params(delta=math.inf), 16, n, srv) == pytest.approx(max(t_comp, t_comm))


def test_delta_monotone_between_max_and_sum():
    ts = [iteration_time(_params(delta=d), 16, 8, 1) for d in (1, 1.5, 2, 4, 10)]
    assert all(a > b for a, b in zip(ts, ts[1:]))


def test_iteration_time_rejects_bad_arguments():
    p = _params()
    with pytest.raises(ValueError):
        iteration_time(p, 16, 0, 1)
    with pytest.raises(ValueError):
        iteration_time(p, 16, 2, 3)  # more servers than GPUs
    with pytest.raises(ValueError):
        iteration_time(p, 16, 2, 1, accumulation_steps=0)
    with pytest.raises(ValueError):
        iteration_time(p, 0, 2, 1)
    plain = GpuParams(**{k: v for k, v in p.model_dump().items() if k != "model_size_mb"})
    with pytest.raises(ValueError, match="model size"):
        iteration_time(plain, 16, 2, 1)
    assert iteration_time(plain, 16, 2, 1, model_size_mb=100.0) == iteration_time(p, 16, 2, 1)


def test_min_servers():
    assert [min_servers(n, 8) for n in (1, 8, 9, 16, 17)] == [1, 1, 2, 2, 3]
    assert min_servers(5, 4) == 2


# ---------------------------------------------------------------------------------------- catalog


def test_packaged_catalog_loads_and_validates():
    cat = WorkloadCatalog.load()
    assert DEFAULT_CATALOG_PATH.name == "workloads.yaml"
    assert set(cat.models) >= {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    assert cat.reference_gpu_type == "t4"
    for name in cat.annotated_models:
        wl = cat.workload(name)
        assert wl.provenance and wl.memory.provenance
        assert wl.batch_sizes and wl.model_size_mb > 0
        assert "t4" in wl.gpu_params
        assert wl.fit_mape["t4"]["all"] < 0.15, name
    assert cat.size_classes[-1].max_gpu_hours is None
    assert default_catalog() is default_catalog()
    for name in set(cat.models) - set(cat.annotated_models):  # profiled only: parameters from a fit
        assert cat.workload(name).gpu_params == {} and cat.workload(name).provenance


def test_solo_iteration_time_defaults_and_vectorised():
    cat = default_catalog()
    # servers default: fewest servers for the GPU count
    t16 = cat.solo_iteration_time("bert", 8, 16, "t4")
    assert t16 == pytest.approx(cat.solo_iteration_time("bert", 8, 16, "t4", servers=2))
    assert cat.solo_iteration_time("bert", 8, 16, "t4", gpus_per_server=4) == pytest.approx(
        cat.solo_iteration_time("bert", 8, 16, "t4", servers=4)
    )
    # more GPUs never makes an iteration faster (same per-GPU batch)
    for m in cat.annotated_models:
        b = cat.workloads[m].batch_sizes[0]
        times = [cat.solo_iteration_time(m, b, n) for n in (1, 2, 4, 8, 16, 32)]
        assert all(x <= y + 1e-12 for x, y in zip(times, times[1:])), m
    models = ["bert", "ncf", "imagenet", "cifar10"]
    batch = [12, 256, 64, 32]
    gpus = [1, 8, 16, 3]
    vec = cat.solo_iteration_times(models, batch, gpus)
    scal = [cat.solo_iteration_time(m, b, n) for m, b, n in zip(models, batch, gpus)]
    np.testing.assert_allclose(vec, scal, rtol=1e-12)


def test_gpu_type_fallback_scales_compute():
    cat = default_catalog()
    assert "v100" in cat.gpu_types and "v100" not in cat.workloads["bert"].gpu_params
    speed = cat.gpu_types["v100"].speed
    t4 = cat.params("bert", "t4")
    v = cat.params("bert", "V100")  # case-insensitive
    assert v.alpha_comp == pytest.approx(t4.alpha_comp / speed)
    assert v.beta_comp == pytest.approx(t4.beta_comp / speed)
    assert (v.alpha_comm_inter, v.beta_comm_inter, v.delta) == (t4.alpha_comm_inter, t4.beta_comm_inter, t4.delta)
    assert cat.solo_iteration_time("bert", 12, 1, "v100") == pytest.approx(
        cat.solo_iteration_time("bert", 12, 1, "t4") / speed
    )
    with pytest.raises(KeyError, match="h900"):
        cat.params("bert", "h900")
    with pytest.raises(KeyError, match="nosuchmodel"):
        cat.params("nosuchmodel")


def test_memory_estimate_linear():
    cat = default_catalog()
    mem = cat.workloads["imagenet"].memory
    assert cat.memory_gib("imagenet", mem.reference_batch) == pytest.approx(mem.gib)
    assert cat.memory_gib("imagenet", 2 * mem.reference_batch) > mem.gib
    assert 0 < mem.static_gib < mem.gib


def _write_catalog(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load(DEFAULT_CATALOG_PATH.read_text())
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_bad_catalog_names_file_and_field(tmp_path):
    def bad_delta(d):
        d["workloads"]["bert"]["gpu_params"]["t4"]["delta"] = 0.5

    path = _write_catalog(tmp_path, bad_delta)
    with pytest.raises(CatalogError) as exc:
        WorkloadCatalog.load(path)
    msg = str(exc.value)
    assert str(path) in msg and "workloads.bert.gpu_params.t4.delta" in msg


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d["workloads"]["ncf"].pop("model_size_mb"), "workloads.ncf.model_size_mb"),
        (lambda d: d["workloads"]["ncf"].update(batch_sizes=[]), "workloads.ncf.batch_sizes"),
        (lambda d: d["workloads"]["ncf"].update(colour="red"), "workloads.ncf.colour"),
        (lambda d: d["size_classes"][0]["models"].append("gpt9"), "gpt9"),
        (lambda d: d.update(reference_gpu_type="h900"), "h900"),
        (lambda d: d["workloads"]["ncf"]["gpu_params"].pop("t4"), "workloads.ncf.gpu_params"),
        (lambda d: d["size_classes"][-1].update(max_gpu_hours=5.0), "max_gpu_hours"),
    ],
)
def test_bad_catalog_variants(tmp_path, mutate, needle):
    path = _write_catalog(tmp_path, mutate)
    with pytest.raises(CatalogError) as exc:
        WorkloadCatalog.load(path)
    assert str(path) in str(exc.value) and needle in str(exc.value)


def test_missing_and_malformed_catalog_files(tmp_path):
    with pytest.raises(CatalogError, match="not found"):
        WorkloadCatalog.load(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("workloads: [unclosed\n")
    with pytest.raises(CatalogError, match="broken.yaml"):
        WorkloadCatalog.load(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(CatalogError, match="mapping"):
        WorkloadCatalog.load(scalar)


# ---------------------------------------------------------------------------------------- provenance


def _fit_script():
    from schedlab.tools import fit_catalog_from_pollux

    return fit_catalog_from_pollux


@pytest.mark.skipif(not POLLUX.is_dir(), reason="shared Pollux data not available")
@pytest.mark.parametrize("model", ["bert", "imagenet"])
def test_catalog_matches_refit_of_pollux(model):
    fit = _fit_script()
    cat = default_catalog()
    wl = cat.workloads[model]
    df = fit.load_pollux(POLLUX / model)
    params, mape = fit.fit_model(df, wl.model_size_mb)
    stored = wl.gpu_params["t4"]
    for k, v in params.items():
        assert getattr(stored, k) == pytest.approx(v, rel=1e-3, abs=1e-9), k
    assert wl.fit_mape["t4"]["all"] == pytest.approx(mape["all"], abs=1e-3)
    # and the catalog predicts the measured step times as well as the fit says
    pred = cat.solo_iteration_times(
        [model] * len(df), df["local_bsz"], df["num_gpus"], servers=df["servers"]
    )
    ape = np.abs(pred / df["step_time"].to_numpy() - 1)
    assert ape.mean() == pytest.approx(mape["all"], abs=1e-3)
    assert ape.mean() < 0.10
