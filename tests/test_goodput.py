"""The goodput job model (specs/pollux.md): hand-computed values from the real Pollux data (skipped
without ../shared/data) and from the fixture application ``toy`` (tests/fixtures/pollux/README.md)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from helpers import FIXTURES
from schedlab.sched.models.goodput import GoodputDataError, default_root, load_applications, packed

TOY_ROOT = FIXTURES / "pollux"


def real(app: str):
    root = default_root()
    if not (root / "traces" / app).is_dir():
        pytest.skip(f"Pollux data not present: {root}")
    return load_applications(root)[app]


@pytest.fixture(scope="module")
def toy():
    return load_applications(TOY_ROOT)["toy"]


def lerp(x, x0, x1, y0, y1):
    return y0 + (x - x0) / (x1 - x0) * (y1 - y0)


# ---- the fixture application, by hand ---------------------------------------------------------
def test_toy_fields(toy):
    assert (toy.epochs, toy.boundaries, toy.total_progress) == (3, (100.0, 190.0, 300.0), 300.0)
    assert (toy.min_batch, toy.max_batch, toy.min_local_batch, toy.max_local_batch, toy.node_size) == (8, 32, 4, 8, 2)


def test_epoch_end_boundary_semantics(toy):
    assert toy.epoch_end(0.0) == 100.0
    assert toy.epoch_end(99.999) == 100.0
    assert toy.epoch_end(100.0) == 190.0  # exactly at a boundary: the next one
    assert toy.epoch_end(190.0) == 300.0
    assert toy.epoch_end(299.0) == 300.0
    assert toy.epoch_end(300.0) == 300.0  # at or after the last boundary: total_progress
    assert toy.epoch_end(1e9) == 300.0
    assert [toy.epoch(p) for p in (0, 99.9, 100, 189, 190, 300, 400)] == [0, 0, 1, 1, 2, 2, 2]


@pytest.mark.parametrize(
    "placement, batch, expected",
    [
        ((1,), 8, 2.0),  # B = B0 on one GPU: no accumulation, micro-batch 8
        ((1,), 12, 3.0),  # B > B0 on one GPU: at least one accumulation pass, micro-batch 6 -> step 1.5
        ((1,), 16, 4.0),  # 1 pass of accumulation, micro-batch 8: 2.0 + (2.0 - 0)
        ((1,), 32, 8.0),  # 3 passes: 2.0 + 3 x 2.0
        ((2,), 32, 4.1),  # measured placement "2": micro-batch 8, 1 pass: 2.1 + 2.0
        ((1, 1), 32, 4.3),  # measured placement "11": 2.3 + 2.0
        ((2, 1), 24, 2.4),  # not measured: (nodes 2, replicas 3, batch 8) interpolated
        ((1, 2), 24, 2.4),  # order-free
        ((3,), 24, 2.4),  # a 3-GPU server counts as measured nodes of at most 2 GPUs: (2, 1)
    ],
)
def test_toy_iteration_time(toy, placement, batch, expected):
    assert toy.iteration_time(placement, batch) == pytest.approx(expected)


def test_toy_efficiency_interpolates_gradient_statistics(toy):
    assert toy.efficiency(8, 0.0) == 1.0  # scale 1
    assert toy.efficiency(32, 0.0) == pytest.approx(8.0 / (5.0 / 4 + 3.0))
    sqr, var = lerp(16, 8, 32, 1.0, 3.0), lerp(16, 8, 32, 3.0, 5.0)
    assert toy.efficiency(16, 50.0) == pytest.approx((var + sqr) / (var / 2 + sqr))
    assert toy.efficiency(16, 100.0) == pytest.approx(16 / 11)  # epoch 2: sqr 1, var 5/3
    assert toy.efficiency(16, 250.0) == pytest.approx(1.2)  # epoch 3: sqr 4/3, var 2/3
    with pytest.raises(ValueError, match="outside the measured 8-32"):
        toy.efficiency(64, 0.0)


def test_toy_goodput_and_run_time(toy):
    assert toy.goodput((2,), 16, 0.0) == pytest.approx((32 / 21) / 2.1)
    # alone on one GPU at B0: efficiency 1, 2 s per iteration, 300 units
    assert toy.run_time(1, 8) == pytest.approx(600.0)
    # 2 GPUs on one 2-GPU node at batch 16: 2.1 s per iteration, efficiency per epoch 32/21, 16/11, 1.2
    assert toy.run_time(2, 16, gpus_per_node=2) == pytest.approx(2.1 * (100 * 21 / 32 + 90 * 11 / 16 + 110 / 1.2))
    # packed on 1-GPU nodes the same 2 GPUs are placement (1, 1): slower
    assert toy.run_time(2, 16, gpus_per_node=1) > toy.run_time(2, 16, gpus_per_node=2)


def test_toy_run_time_is_monotone_in_gpus(toy):
    # more GPUs at the same batch: never slower here (per-GPU batch shrinks, sync grows slowly)
    times = [toy.run_time(r, 32, gpus_per_node=2) for r in (1, 2, 3, 4)]
    assert times == sorted(times, reverse=True) and all(t > 0 and math.isfinite(t) for t in times)
    assert packed(7, 4) == (4, 3) and packed(8, 4) == (4, 4) and packed(1, 8) == (1,)


def test_toy_batch_choices_and_best_batch(toy):
    for r in (1, 2, 3, 4):
        choices = toy.batch_choices(r)
        assert choices == tuple(sorted(set(choices))) and choices
        for b in choices:
            micro, accum, trained = toy.config(r, b)
            assert trained == b and toy.min_local_batch <= micro <= toy.max_local_batch
            assert toy.min_batch <= b <= toy.max_batch
    assert toy.batch_choices(1)[0] == 8 and toy.batch_choices(1)[-1] == 32
    assert toy.batch_choices(9) == ()  # 9 GPUs x 4 per GPU > 32: nothing fits
    assert toy.best_batch((3, 3, 3), 0.0) == (0, 0.0)
    for progress in (0.0, 150.0, 299.0):
        batch, goodput = toy.best_batch((2,), progress)
        assert batch in toy.batch_choices(2)
        assert goodput == max(toy.goodput((2,), b, progress) for b in toy.batch_choices(2))


def test_toy_infeasible_batch_is_an_error(toy):
    with pytest.raises(ValueError, match="below the smallest measured 4"):
        toy.iteration_time((2, 2, 2, 2), 8)  # 8 GPUs x 1 sample


@pytest.mark.parametrize(("replicas", "batch", "expected"), [
    (4, 1000, "global batch 1000 on 4 GPUs is above the largest measured global batch 32 (allowed: up to 32;"),
    (2, 100, "global batch 100 on 2 GPUs is above the largest measured global batch 32"),
    (9, 32, "global batch 32 on 9 GPUs: 9 GPUs need at least 36, above the largest measured 32 (allowed: at most"
     " 8 GPUs;"),
    (8, 8, "on 8 GPUs is a per-GPU batch of 1, below the smallest measured 4 (on 8 GPUs the global batch must be"
     " about 32 or more, up to 32;"),
])
def test_an_infeasible_batch_names_the_bound_it_breaks(toy, replicas, batch, expected):
    """Issue #30: a batch above the range said "needs a per-GPU batch of 0"."""
    with pytest.raises(ValueError) as err:
        toy.config(replicas, batch)
    assert expected in str(err.value) and "per-GPU batch of 0" not in str(err.value), err.value
    assert "measured: global batch 8-32, per-GPU batch 4-8" in str(err.value)


def test_loaded_once():
    assert load_applications(TOY_ROOT) is load_applications(TOY_ROOT / "traces")  # same folder, one read


# ---- bad data: errors name file, row and column ------------------------------------------------
def _copy_toy(tmp_path: Path) -> Path:
    dest = tmp_path / "traces" / "toy"
    shutil.copytree(TOY_ROOT / "traces" / "toy", dest)
    return dest


@pytest.mark.parametrize(
    "file, row, column, value, message",
    [
        ("placements.csv", 2, "step_time", "abc", r"placements.csv, row 2, column 'step_time': not a finite number"),
        ("placements.csv", 3, "sync_time", "5.0", r"placements.csv, row 3, column 'sync_time': must be >= 0 and below"),
        ("placements.csv", 1, "placement", "10", r"placements.csv, row 1, column 'placement': placement must be digits"),
        ("scalability.csv", 4, "local_bsz", "", r"scalability.csv, row 4, column 'local_bsz': not a finite number"),
        ("validation-8.csv", 2, "progress", "50", r"validation-8.csv, row 2, column 'progress': cumulative progress"),
        ("validation-32.csv", 1, "grad_var", "-1", r"validation-32.csv, row 1, column 'grad_var': must be >= 0"),
    ],
)
def test_bad_data_names_file_row_column(tmp_path, file, row, column, value, message):
    folder = _copy_toy(tmp_path)
    df = pd.read_csv(folder / file, dtype=str, keep_default_na=False)
    df.loc[row - 1, column] = value
    df.to_csv(folder / file, index=False)
    with pytest.raises(GoodputDataError, match=message):
        load_applications(tmp_path)


def test_missing_column_and_folder(tmp_path):
    folder = _copy_toy(tmp_path)
    pd.read_csv(folder / "scalability.csv").drop(columns="sync_time").to_csv(folder / "scalability.csv", index=False)
    with pytest.raises(GoodputDataError, match=r"scalability.csv, column 'sync_time': missing column"):
        load_applications(tmp_path)
    with pytest.raises(GoodputDataError, match="goodput data folder not found"):
        load_applications(tmp_path / "nowhere")


# ---- the real data, by hand -----------------------------------------------------------------------
def test_real_settings():
    assert real("cifar10").epochs == 100 and real("bert").epochs == 2 and real("ncf").epochs == 10
    assert real("imagenet").epochs == 90 and real("deepspeech2").epochs == 80 and real("yolov3").epochs == 50
    assert real("yolov3").max_local_batch == 8
    cifar = real("cifar10")
    assert (cifar.min_batch, cifar.max_batch, cifar.min_local_batch, cifar.max_local_batch) == (128, 4096, 32, 1024)
    # epoch 1 ends at the smallest first-row progress over the measured batches (validation-256.csv)
    assert cifar.epoch_end(0.0) == 390.71438596642224
    assert cifar.total_progress == cifar.boundaries[-1] and len(cifar.boundaries) == 100


def test_real_iteration_time_measured_placement():
    cifar = real("cifar10")
    # 2048 on 6 GPUs packed (4, 2) = placement "24": per-GPU 342, no accumulation (max 1024)
    step = lerp(342, 257, 363, 0.23076505661010743, 0.27816870212554934)
    assert cifar.iteration_time((4, 2), 2048) == pytest.approx(step, rel=1e-12)
    assert cifar.iteration_time((2, 4), 2048) == cifar.iteration_time((4, 2), 2048)
    # 256 on one GPU (> B0 = 128): one accumulation pass of micro-batch 128, placement "1"
    step = lerp(128, 91, 129, 0.07591350078582763, 0.10385050773620605)
    sync = lerp(128, 91, 129, 0.0005244320034980774, 0.0005253599941730499)
    assert cifar.iteration_time((1,), 256) == pytest.approx(step + (step - sync), rel=1e-12)


def test_real_iteration_time_interpolated_placement():
    imagenet = real("imagenet")
    # 32 GPUs on 8 nodes: not a measured placement; (8 nodes, 32 replicas, per-GPU 81) is a
    # scalability.csv point, so the interpolation returns it exactly
    assert imagenet.iteration_time((4,) * 8, 81 * 32) == pytest.approx(0.6709030866622925, rel=1e-9)
    # 64 GPUs on 16 nodes at per-GPU 200 (the largest): also a measured point
    assert imagenet.iteration_time((4,) * 16, 200 * 64) == pytest.approx(1.0868985652923584, rel=1e-9)


def test_real_efficiency():
    cifar = real("cifar10")
    sqr, var = 10.73321269096998, 5.4859538034431825  # validation-2048.csv, epoch 1
    assert cifar.efficiency(2048, 0.0) == pytest.approx((var + sqr) / (var / 16 + sqr), rel=1e-12)
    sqr, var = 0.5477127448154356, 1.891044577150018  # epoch 2
    assert cifar.efficiency(2048, 400.0) == pytest.approx((var + sqr) / (var / 16 + sqr), rel=1e-12)
    sqr = lerp(1536, 1024, 2048, 8.978532644212862, 10.73321269096998)  # validation-1024.csv / -2048.csv
    var = lerp(1536, 1024, 2048, 6.740279795719679, 5.4859538034431825)
    assert cifar.efficiency(1536, 0.0) == pytest.approx((var + sqr) / (var / 12 + sqr), rel=1e-12)
    assert cifar.efficiency(128, 0.0) == 1.0


def test_real_workloads_are_tuned_jobs():
    """Every job of the study's 32 TunedJobs workloads is one of our TunedJobs choices."""
    root = default_root()
    files = [f for d in ("workloads", "workloads-0.5", "workloads-1.5", "workloads-2.0")
             for f in sorted((root / d).glob("workload-*.csv"))]
    if not files:
        pytest.skip(f"Pollux workloads not present: {root}")
    models = load_applications(root)
    configs = {name: {(r, b) for r, b, _ in m.tuned_configs()} for name, m in models.items()}
    seen = set()
    for f in files:
        for row in pd.read_csv(f).itertuples():
            assert (row.num_replicas, row.batch_size) in configs[row.application], (f, row)
            seen.add((row.application, row.num_replicas, row.batch_size))
    assert len(seen) == sum(map(len, configs.values()))  # and every choice occurs somewhere


def test_real_run_time_sensible():
    for name in ("cifar10", "bert", "deepspeech2", "imagenet", "ncf", "yolov3"):
        model = real(name)
        for r, b, seconds in model.tuned_configs():
            run = model.run_time(r, b)
            if r == 1 and b > model.min_batch:  # the run accumulates (at least 1 pass on 1 GPU); TunedJobs did not
                assert run > seconds
                continue
            # the goodput integral and TunedJobs' measured-iterations estimate agree within 10%
            assert 0.9 < run / seconds < 1.1, (name, r, b, run, seconds)
        one = model.run_time(1, model.min_batch)
        assert 0 < one < 7 * 86400


def test_real_interpolation_matches_a_fresh_interpolator_per_query():
    """The study builds a new interpolator per query; lone queries on ours must give the same
    values (a batched query walks the degenerate triangulation differently). One reference
    interpolator asked one point per call is the study's: each call starts its walk afresh (only its
    first call pays the triangulation's set-up, seconds here, which a new one per query paid five times)."""
    from scipy.interpolate import LinearNDInterpolator

    cifar = real("cifar10")
    study = LinearNDInterpolator(cifar.points, cifar.values)
    for nodes, replicas, micro in [(5, 5, 100), (6, 20, 200), (12, 48, 171), (7, 25, 300), (10, 33, 91)]:
        fresh = study([[nodes, replicas, micro]])[0]
        assert cifar._interpolate_nd(nodes, replicas, micro) == (fresh[0], fresh[1])
