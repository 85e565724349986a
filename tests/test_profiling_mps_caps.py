"""Gimbal's MPS-cap profiling (spec gimbal.md §5): the mps-caps sweep grid and its validation, capped
solo runs (σ) as store records, and the export to the share-aware interference table."""
from __future__ import annotations

import argparse
import io
from pathlib import Path

import pandas as pd
import pytest
from schedlab.cli import profile as cli
from schedlab.profiling.execute import Context
from schedlab.profiling.mps_table import COLUMNS, mps_table
from schedlab.profiling.mps_table import main as export_main
from schedlab.profiling.profiler import Profiler
from schedlab.profiling.store import ProfileRecord, ProfileStore
from schedlab.profiling.sweep import (
    CappedSoloConfig,
    PairConfig,
    SoloConfig,
    SweepError,
    config_key,
    load,
    parse,
)
from schedlab.sched.models.interference import PairsTable
from schedlab.sched.core.job import Job


def test_mps_caps_sweep_grid():
    sweep = load("mps-caps")
    solos = [c for c in sweep.configs if isinstance(c, SoloConfig)]
    capped = [c for c in sweep.configs if isinstance(c, CappedSoloConfig)]
    pairs = [c for c in sweep.configs if isinstance(c, PairConfig)]
    assert len(solos) == 7 and len(capped) == 7 * 9 and len(pairs) == 28 * 19  # 7 models, 9 caps, 19 splits
    assert sorted({c.share for c in capped}) == [10, 20, 30, 40, 50, 60, 70, 80, 90]
    splits = {p.share for p in pairs if (p.a.workload, p.b.workload) == ("cifar10", "bert")}
    assert (100, 10) in splits and (10, 100) in splits and (100, 100) in splits and len(splits) == 19
    assert {p.mode for p in pairs} == {"mps"}
    assert len({config_key(c, "cuda", ["0"], host="h") for c in sweep.configs}) == len(sweep.configs)


def test_capped_grid_only_one_gpu_and_below_100():
    sweep = parse({"solo": {"workloads": ["ncf"], "batch": [4], "gpus": [1, 2], "mps_caps": [50, 100]}})
    capped = [c for c in sweep.configs if isinstance(c, CappedSoloConfig)]
    assert [(c.solo.gpus, c.share) for c in capped] == [(1, 50)]


def test_keys_of_existing_configurations_are_unchanged():
    """Adding the cap grid must not re-measure stores: these keys are pinned from before it existed."""
    assert config_key(SoloConfig("ncf", 4), "cpu", ["0"], host="h") == "c6de6a9bc7453d22b7b1"
    pair = PairConfig(SoloConfig("ncf", 4), SoloConfig("ncf", 8), "mps", (30, 70))
    assert config_key(pair, "cpu", ["0"], host="h") == "c66ffc369055ac838b7b"


@pytest.mark.parametrize(("grid", "field"), [
    ({"solo": {"workloads": ["ncf"], "mps_caps": [0]}}, "solo.mps_caps"),
    ({"solo": {"workloads": ["ncf"], "mps_caps": [150]}}, "solo.mps_caps"),
    ({"solo": {"workloads": ["ncf"], "mps_caps": "all"}}, "solo.mps_caps"),
    ({"solo": {"workloads": ["ncf"]}, "pair": {"modes": ["mps"], "mps_caps": [True]}}, "pair.mps_caps"),
    ({"solo": {"workloads": ["ncf"]}, "pair": {"modes": ["mps"], "mps_split": [[50, 50, 50]]}}, "pair.mps_split"),
    ({"solo": {"workloads": ["ncf"]}, "pair": {"modes": ["mps"], "mps_split": [[0, 100]]}}, "pair.mps_split"),
])
def test_bad_caps_are_named(grid, field):
    with pytest.raises(SweepError, match=field.replace(".", r"\.")):
        parse(grid)


def test_cli_rejects_a_bad_sweep_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nsolo:\n  workloads: [ncf]\n  mps_caps: [0]\n")
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(["profile", "--sweep", str(bad), "--out", str(tmp_path / "s"), "--device", "cpu"])
    assert args.func(args) == 2 and "solo.mps_caps" in capsys.readouterr().err


def test_capped_solo_on_cpu_is_an_error_record(tmp_path: Path):
    store = ProfileStore(tmp_path / "s")
    prof = Profiler(store, Context(device="cpu", interval_s=0.1, work_dir=tmp_path / "w"))
    (rec,) = prof.capped_solo(CappedSoloConfig(SoloConfig("ncf", 4), 30))
    assert rec.status == "error" and "CUDA" in (rec.message or "")
    assert (rec.kind, rec.mode, rec.share) == ("solo-mps", "mps", 30)
    store.write([rec])
    row = store.read().iloc[0]
    assert row.kind == "solo-mps" and row.share == 30 and pd.isna(row.gpu_util_mean)


def _rec(key, kind, workload, batch, xi, job=0, partner=None, mode="mps", share=None, created=0.0):
    return ProfileRecord(config_key=key, sweep="mps-caps", kind=kind, workload=workload, size="full",
                         batch_size=batch, accum_steps=1, num_gpus=1, device="cuda", job=job, partner=partner,
                         mode=mode, share=share, xi=xi, created_at=created)


def test_export_pairs_both_ways_and_capped_solo_rows(tmp_path: Path):
    store = ProfileStore(tmp_path / "s")
    store.write([_rec("p1", "pair", "bert", 16, 2.2, 0, "imagenet", share=100),
                 _rec("p1", "pair", "imagenet", 64, 1.4, 1, "bert", share=60)])
    store.write([_rec("p2", "pair", "bert", 16, 1.9, 0, "imagenet", mode="timeslice"),
                 _rec("p2", "pair", "imagenet", 64, 1.7, 1, "bert", mode="timeslice")])
    store.write([_rec("s1", "solo-mps", "bert", 16, 1.3, share=50)])
    store.write([_rec("s1", "solo-mps", "bert", 16, 1.25, share=50, created=1.0)])  # re-measured: newest wins
    store.write([_rec("x", "pair", "bert", 16, 0.0, 0, "ncf")])  # a lone row (partner failed): skipped
    table = mps_table(store.latest())
    assert list(table.columns) == COLUMNS and len(table) == 5
    mps = table[(table["mode"] == "mps") & (table["model_b"] != "")].set_index("model_a")
    assert mps.loc["bert", ["share_a", "share_b", "xi_a", "xi_b"]].tolist() == [100, 60, 2.2, 1.4]
    assert mps.loc["imagenet", ["share_a", "share_b", "xi_a", "xi_b"]].tolist() == [60, 100, 1.4, 2.2]
    ts = table[table["mode"] == "timeslice"]
    assert set(ts["share_a"]) == {100.0} and set(ts["share_b"]) == {100.0}
    solo = table[table["model_b"] == ""].iloc[0]
    assert (solo.model_a, solo.share_a, solo.xi_a) == ("bert", 50, 1.25) and pd.isna(solo.xi_b)
    out = tmp_path / "t.csv"
    assert export_main([str(store.root), str(out)]) == 0
    source = PairsTable(out)  # what the share-aware `table:` source reads: pairs and restricted-solo rows
    assert source.two_shares and len(source.frame) == 4 and len(source.solo) == 1
    bert = Job("j", 0.0, 1, 1.0, model="bert", batch_size=16.0)
    assert source.restricted_solo(bert, 0.5) == pytest.approx(1.25)


def test_export_refuses_what_is_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert export_main([str(tmp_path), str(tmp_path / "t.csv")]) == 2
    ProfileStore(tmp_path / "empty")
    assert export_main([str(tmp_path / "empty"), str(tmp_path / "t.csv")]) == 1


@pytest.mark.parametrize(("grid", "field"), [
    ({"iters": True, "solo": {"workloads": ["ncf"]}}, "iters"),
    ({"min_seconds": float("nan"), "solo": {"workloads": ["ncf"]}}, "min_seconds"),
    ({"solo": {"workloads": ["ncf"], "batch": [True]}}, r"solo\.batch \(ncf\)"),
    ({"solo": {"workloads": ["ncf"], "gpus": [0]}}, r"solo\.gpus \(ncf\)"),
    ({"solo": {"workloads": ["ncf"]}, "pair": {"batch": [2.5]}}, r"pair\.batch \(ncf\+ncf\)"),
    ({"collect": {"interval_s": 0.01}, "solo": {"workloads": ["ncf"]}}, r"collect\.interval_s"),
    ({"phases": [{"warmup": -1, "solo": {"workloads": ["ncf"]}}]}, r"phases\[0\]\.warmup"),
])
def test_sweep_numbers_are_numbers(grid, field):
    """Issue #30 (lax values): YAML true, NaN, fractions and zero counts in a sweep are errors naming the field."""
    with pytest.raises(SweepError, match=field):
        parse(grid)


def test_shipped_h200_table_is_the_store_export_and_answers_sigma_from_its_capped_solos():
    """conf/interference/h200-pairs.csv is the export of data/profiles/h200 (call 5 measured Gimbal's σ(p),
    phase 8), and ``table:h200-pairs.csv`` answers σ(p) from those rows, not the p^-0.5 default."""
    from schedlab.profiling.store import read_profiles
    from schedlab.sched.core.cluster import load_cluster
    from schedlab.sched.models.interference import make_interference
    from schedlab.sched.models.sharing import DEFAULT_RHO, SharingModel

    root = Path(__file__).resolve().parents[1]
    df, _ = read_profiles(root / "data" / "profiles" / "h200" / "profiles.parquet")
    shipped = pd.read_csv(root / "conf" / "interference" / "h200-pairs.csv")
    export = pd.read_csv(io.StringIO(mps_table(df, "full").to_csv(index=False)))  # as the CLI writes it
    pd.testing.assert_frame_equal(shipped, export)
    capped = df[(df["kind"] == "solo-mps") & (df["status"] == "ok")]
    assert len(capped) == 63 and shipped["model_b"].isna().sum() == 63  # 7 workloads x caps 10..90
    table = make_interference("table:h200-pairs.csv")
    sharing = SharingModel.for_cluster(load_cluster("1x1"), table)
    for _, r in capped.iterrows():
        job = Job("j", 0, 1, 1, model=r.workload, batch_size=float(r.batch_size))
        p = float(r.share) / 100
        assert sharing.restricted_solo(job, p) == pytest.approx(max(float(r.xi), 1.0))  # < 1 raised, as the table
    vgg16 = Job("v", 0, 1, 1, model="vgg16", batch_size=64.0)
    assert sharing.restricted_solo(vgg16, 0.12) > 2 * 0.1 ** -DEFAULT_RHO  # nearest cap 10 %: ~1/p, not p^-0.5
