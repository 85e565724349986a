"""The ξ model (Castor §6): split by pair, artifact round trip (directory and MLflow), clear errors,
the ``model`` ξ source, the Gavel configuration-only variant and the shipped default."""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import shared_data
from schedlab.profiling.store import ProfileRecord, ProfileStore
from schedlab.profiling import fit_interference as F
from schedlab.cli.fit import register
from schedlab.sched.models.interference import make_interference
from schedlab.sched.core.job import Job
from schedlab.sched.models.fitted import InterferenceModel, ModelError

SHIPPED = Path(__file__).resolve().parents[1] / "conf" / "models" / "interference-gavel-v100"
WORKLOADS = {"cifar10": 0.7, "imagenet": 0.9, "bert": 0.5, "ncf": 0.1}  # FP32A-like intensity per workload


def write_pair_store(root: Path) -> ProfileStore:
    """TEST FIXTURE (synthetic, not measured): solo and pair records in the store's real schema; ξ is a
    known function of the partners' indicators, so a model has something to learn."""
    store, rng, n = ProfileStore(root), np.random.default_rng(0), 0

    def ind(w: str, b: int) -> dict[str, float]:
        k = WORKLOADS[w] * (1 + 0.1 * np.log2(b))
        return {"smact_mean": min(k, 1.0), "fp32a_mean": k / 2, "drama_mean": 0.3 * k, "cpu_mean": 0.1}

    jobs = [(w, b) for w in WORKLOADS for b in (4, 16)]
    for w, b in jobs:
        store.write([ProfileRecord(config_key=f"s-{w}-{b}", sweep="fx", kind="solo", workload=w, size="tiny",
                                   batch_size=b, accum_steps=1, num_gpus=1, device="cpu", iter_time_mean_s=0.01,
                                   ind=ind(w, b))])
    for i, (wa, ba) in enumerate(jobs):
        for wb, bb in jobs[i:]:
            for mode, share in (("timeslice", None), ("mps", 50.0)):
                xa = 1 + ind(wb, bb)["fp32a_mean"] * (1.2 if mode == "timeslice" else 0.7) + rng.normal(0, 0.02)
                xb = 1 + ind(wa, ba)["fp32a_mean"] * (1.2 if mode == "timeslice" else 0.7) + rng.normal(0, 0.02)
                n += 1
                store.write([ProfileRecord(config_key=f"p{n}", sweep="fx", kind="pair", workload=w, size="tiny",
                                           batch_size=b, accum_steps=1, num_gpus=1, device="cpu", job=j, partner=p,
                                           mode=mode, share=share, xi=x, iter_time_mean_s=0.01 * x)
                             for j, (w, b, p, x) in enumerate(((wa, ba, wb, xa), (wb, bb, wa, xb)))])
    return store


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, InterferenceModel]:
    root = tmp_path_factory.mktemp("ir")
    df = write_pair_store(root / "store").latest()
    rows, solo, job_features = F.rows_from_store(df)
    model = F.fit(rows, solo, job_features, variant="indicators", workload_map=F.CATALOG_TO_PROFILED,
                  provenance={"data": "test fixture"}, seed=3)
    return root, model


def _cli(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(argv)
    return int(args.func(args))


def test_rows_and_split_by_pair(fitted: tuple[Path, InterferenceModel]) -> None:
    root, model = fitted
    rows, _, job_features = F.rows_from_store(ProfileStore(root / "store").latest())
    assert len(rows) == 144 and rows["pair"].nunique() == 36  # mode does not make another pair
    assert set(job_features) == {"SMACT", "DRAMA", "FP32A", "CPU", "batch"}  # what the profile has
    for seed in range(5):
        tr, te = F.split_by_pair(rows, 0.2, seed)
        assert set(rows.iloc[tr]["pair"]).isdisjoint(rows.iloc[te]["pair"])
        assert len(tr) + len(te) == len(rows) and rows.iloc[te]["pair"].nunique() == 7
    m = model.meta["metrics"]
    assert m["rmse_job0"] < 0.15 and m["rmse_job1"] < 0.15 and m["rmse"] <= m["interpolation"]["rmse"] + 0.05
    assert set(m["importance"]) and all(k.startswith(("job0_", "job1_", "mps", "share")) for k in m["importance"])
    assert set(model.meta["training"]["test_pairs"]) == set(rows.iloc[F.split_by_pair(rows, 0.2, 3)[1]]["pair"])


def test_solo_table_keeps_the_paired_batches_only(tmp_path: Path) -> None:
    """A solo at a batch no pair was measured at stays out of the model (a feature outside its training
    set): a job at that batch is described by the nearest paired batch."""
    store = write_pair_store(tmp_path / "store")
    store.write([ProfileRecord(config_key="s-cifar10-256", sweep="fx", kind="solo", workload="cifar10", size="tiny",
                               batch_size=256, accum_steps=1, num_gpus=1, device="cpu", iter_time_mean_s=0.01,
                               ind={"smact_mean": 0.05, "fp32a_mean": 0.01, "drama_mean": 0.01, "cpu_mean": 0.1})])
    rows, solo, job_features = F.rows_from_store(store.latest())
    kept = {(e["workload"], e["batch"]) for e in solo}
    assert kept == {(w, float(b)) for w in WORKLOADS for b in (4, 16)}
    assert kept == set(zip(rows["job0_workload"], rows["job0_batch"]))
    model = F.fit(rows, solo, job_features, variant="indicators", workload_map=F.CATALOG_TO_PROFILED,
                  provenance={"data": "test fixture"}, seed=3)
    assert model._entry("cifar10", 256.0, 1)["batch"] == 16.0


def test_accumulation_is_a_configuration_of_the_same_pair(tmp_path: Path) -> None:
    """SJF-BSBF's shared configuration (half the batch, accumulation 2): each job is described by its own
    solo (same micro-batch and accumulation), the pair is the same pair of jobs as at the full batch (held
    out together), and the paired half-batch solos enter the model's table, looked up by micro-batch."""
    store = write_pair_store(tmp_path / "store")
    half = {"smact_mean": 0.33, "fp32a_mean": 0.11, "drama_mean": 0.05, "cpu_mean": 0.2}
    single = {"smact_mean": 0.44, "fp32a_mean": 0.22, "drama_mean": 0.06, "cpu_mean": 0.2}
    for w, accum, ind in (("cifar10", 2, half), ("cifar10", 1, single)):  # the solos at micro-batch 8
        store.write([ProfileRecord(config_key=f"s-{w}-8-{accum}", sweep="fx", kind="solo", workload=w, size="tiny",
                                   batch_size=8, accum_steps=accum, num_gpus=1, device="cpu", iter_time_mean_s=0.01,
                                   ind=ind)])
    store.write([ProfileRecord(config_key="p-half", sweep="fx", kind="pair", workload=w, size="tiny", batch_size=8,
                               accum_steps=2, num_gpus=1, device="cpu", job=j, partner=q, mode="mps", share=50.0,
                               xi=x, iter_time_mean_s=0.02)
                 for j, (w, q, x) in enumerate((("cifar10", "bert", 1.3), ("bert", "cifar10", 1.9)))])
    store.write([ProfileRecord(config_key="s-bert-8-2", sweep="fx", kind="solo", workload="bert", size="tiny",
                               batch_size=8, accum_steps=2, num_gpus=1, device="cpu", iter_time_mean_s=0.01,
                               ind=half | {"smact_mean": 0.5})])
    rows, solo, _ = F.rows_from_store(store.latest())
    new = rows[rows["xi"].isin([1.3, 1.9])]
    assert len(rows) == 146 and len(new) == 2 and rows["pair"].nunique() == 36  # no 37th pair
    full = rows[(rows["job0_workload"] == "cifar10") & (rows["job1_workload"] == "bert") & (rows["job0_batch"] == 16)]
    assert set(new["pair"]) <= set(full["pair"])
    c = new[new["job0_workload"] == "cifar10"].iloc[0]
    assert (c["job0_batch"], c["job0_SMACT"], c["job1_SMACT"]) == (8.0, 0.33, 0.5)  # its own solos, accumulation 2
    entries = {(e["workload"], e["batch"]): e["values"]["SMACT"] for e in solo}
    assert entries[("cifar10", 8.0)] == 0.33 and entries[("bert", 8.0)] == 0.5  # paired now, by micro-batch
    assert ("cifar10", 4.0) in entries and len(solo) == 10
    # a micro-batch paired both ways is described by its solo without accumulation
    store.write([ProfileRecord(config_key="p-single", sweep="fx", kind="pair", workload=w, size="tiny", batch_size=8,
                               accum_steps=1, num_gpus=1, device="cpu", job=j, partner="cifar10", mode="mps",
                               share=50.0, xi=1.4, iter_time_mean_s=0.02) for j, w in enumerate(("cifar10", "cifar10"))])
    rows, solo, _ = F.rows_from_store(store.latest())
    assert {(e["workload"], e["batch"]): e["values"]["SMACT"] for e in solo}[("cifar10", 8.0)] == 0.44
    assert rows["pair"].nunique() == 37 and len(solo) == 10


def test_ratio_source(fitted: tuple[Path, InterferenceModel]) -> None:
    _, model = fitted
    a = Job("a", 0, 1, 10, model="imagenet", batch_size=16)  # one vocabulary: the profiled imagenet
    b = Job("b", 0, 1, 10, model="ncf", batch_size=4)
    xa, xb = model.ratio(a, b, "timeslice")
    assert xa >= 1 and xb >= 1 and xb > xa  # imagenet presses harder on its partner than ncf
    assert model.ratio(a, b, "timeslice") == (xa, xb) and len(model._cache) == 1
    assert model.ratio(b, a, "timeslice") == pytest.approx((xb, xa), abs=1e-6)
    assert model.ratio(a, b, "mps", (50.0, 50.0))[1] < xb
    assert model.fallbacks == 0
    model.ratio(Job("c", 0, 1, 10, model="unknown-net", batch_size=8), b, "timeslice")
    assert model.fallbacks == 1


@pytest.mark.slow
def test_save_load_and_mlflow_reproduce_exactly(fitted: tuple[Path, InterferenceModel], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch, seed_home) -> None:
    root, model = fitted
    x = F.rows_from_store(ProfileStore(root / "store").latest())[0][model.features].to_numpy(float)
    model.save(tmp_path / "m")
    assert np.array_equal(InterferenceModel.load(tmp_path / "m").predict(x), model.predict(x))
    # the CLI logs to MLflow (a real sqlite store here) and registers a version
    uri = f"sqlite:///{seed_home(tmp_path, prefect=False) / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    out = tmp_path / "cli-model"
    assert _cli(["fit", "interference", "--profiles", str(root / "store"), "--seed", "3", "--out", str(out)]) == 0
    local = InterferenceModel.load(out)
    assert np.array_equal(local.predict(x), model.predict(x))  # same data, same seed: same model
    from mlflow import MlflowClient

    versions = MlflowClient(uri, uri).search_model_versions("name='interference-ratio'")
    assert len(versions) == 1
    run = MlflowClient(uri).get_run(versions[0].run_id)
    assert run.data.tags["schedlab.data_sha256"] == local.meta["training"]["data_sha256"]
    assert "schedlab.profile_store" in run.data.tags and run.data.metrics["rmse_job0"] >= 0
    from schedlab.tasks.model_tracking import fetcher

    for spec in (f"models:/interference-ratio/{versions[0].version}", f"runs:/{versions[0].run_id}/model"):
        logged = make_interference(f"model:{spec}", fetcher(uri))
        assert np.array_equal(logged.predict(x), local.predict(x))


def test_corrupt_and_wrong_schema_files(fitted: tuple[Path, InterferenceModel], tmp_path: Path) -> None:
    _, model = fitted
    d = model.save(tmp_path / "m")
    (d / "model.json").write_text('{"learner": tru')
    with pytest.raises(ModelError, match=r"model\.json: not a valid XGBoost JSON model"):
        InterferenceModel.load(d)
    (d / "model.json").unlink()
    with pytest.raises(ModelError, match=r"model\.json: file missing"):
        InterferenceModel.load(d)
    model.save(d)
    meta = json.loads((d / "meta.json").read_text())
    (d / "meta.json").write_text(json.dumps({**meta, "schema_version": 2}))
    with pytest.raises(ModelError, match=r"meta\.json: schema_version 2"):
        InterferenceModel.load(d)
    (d / "meta.json").write_text(json.dumps({**meta, "feature_names": meta["feature_names"][::-1]}))
    with pytest.raises(ModelError, match="feature names differ"):
        InterferenceModel.load(d)
    (d / "meta.json").write_text("[1, 2")
    with pytest.raises(ModelError, match=r"meta\.json: not valid JSON"):
        InterferenceModel.load(d)
    (d / "meta.json").unlink()
    with pytest.raises(ModelError, match=r"no meta\.json"):
        InterferenceModel.load(d)
    with pytest.raises(ModelError, match="model not found"):
        make_interference(f"model:{tmp_path / 'nowhere'}")


def test_shipped_gavel_default_loads_and_answers() -> None:
    source = make_interference(f"model:{SHIPPED}")
    meta = source.meta
    assert meta["variant"] == "gavel-config" and "Gavel" in meta["provenance"]["data"]
    assert set(meta["workload_map"]) == {"cifar10", "imagenet", "ncf", "bert", "deepspeech2", "yolov3"}
    for m, b in (("cifar10", 64), ("imagenet", 32), ("yolov3", 8), ("deepspeech2", 20)):
        xa, xb = source.ratio(Job("a", 0, 1, 1, model=m, batch_size=b), Job("b", 0, 1, 1, model="bert", batch_size=12),
                              "mps", (50.0, 50.0))
        assert 1 <= xa < 5 and 1 <= xb < 5
    assert source.fallbacks == 0


@pytest.mark.slow
def test_gavel_config_only_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_data("profiles", "gavel", "simulation_throughputs.json")
    out = tmp_path / "g"
    assert _cli(["fit", "interference", "--source", "gavel", "--gavel", str(path), "--out", str(out), "--no-track"]) == 0
    assert "interpolation" in capsys.readouterr().out
    meta = json.loads((out / "meta.json").read_text())
    m = meta["metrics"]
    assert meta["training"]["pairs"] == 330 and m["rmse"] < 0.7 and m["rmse"] < m["interpolation"]["rmse"]
    shipped = json.loads((SHIPPED / "meta.json").read_text())
    assert shipped["training"]["data_sha256"] == meta["training"]["data_sha256"]  # the default is reproducible
    shutil.rmtree(out)


def test_shipped_h200_model_is_fitted_on_the_shipped_store() -> None:
    """conf/models/interference-h200 was fitted on every pair of data/profiles/h200 (the training rows'
    hash and the solo table say so): refit after the store grows (conf/models/README.md)."""
    from schedlab.profiling.store import read_profiles

    root = Path(__file__).resolve().parents[1]
    meta = json.loads((root / "conf" / "models" / "interference-h200" / "meta.json").read_text())
    df, _ = read_profiles(root / "data" / "profiles" / "h200" / "profiles.parquet")
    rows, solo, job_features = F.rows_from_store(df)
    features, _ = F.feature_names(rows, job_features)
    assert meta["feature_names"] == features and meta["solo"] == json.loads(json.dumps(solo))
    assert meta["training"]["rows"] == len(rows) and meta["training"]["data_sha256"] == F.data_hash(rows, features)
    half = [e for e in solo if e["workload"] == "cifar10" and e["batch"] == 64.0]  # SJF-BSBF's half batch, paired
    assert len(half) == 1 and len(solo) == 18
