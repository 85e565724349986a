"""Inference-load series (sched/models/inference.py), the orchestrator's predictors, and their CLI / config options."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import shared_data
from schedlab.cli import main
from schedlab.sched.models.inference import (
    InferenceLoad,
    InferenceLoadError,
    from_csv,
    load_inference,
)
from schedlab.sched.core.pools import LoanOptions
from schedlab.sched.spec import ConfigError, load_config


def test_step_function_peak_integral_and_tiling():
    load = InferenceLoad(np.array([0.0, 600.0]), np.array([0.2, 0.8]), 1200.0, "t")
    assert load.at(0) == 0.2 and load.at(599) == 0.2 and load.at(600) == 0.8
    assert load.at(1200) == 0.2 and load.at(1900) == 0.8  # repeats every span
    assert load.peak(0, 300) == 0.2 and load.peak(300, 700) == 0.8 and load.peak(1100, 1300) == 0.8
    assert load.integral(0, 2400) == pytest.approx(2 * (600 * 0.2 + 600 * 0.8))
    assert load.predict("oracle", 500, 300) == 0.8 and load.predict("last", 500, 300) == 0.2


def test_csv_loader_names_file_row_and_field(tmp_path):
    good = tmp_path / "u.csv"
    good.write_text("time,utilization\n0,0.5\n300,0.7\n")
    load = load_inference(str(good))
    assert load.at(400) == 0.7 and load.span == 600
    # rows as in every trace loader: the N-th data row, 1-based, header excluded, blank lines counted
    bad = tmp_path / "bad.csv"
    for body, where in (("time,utilization\n0,0.5\n300,1.5\n", "row 2, column 'utilization': not a fraction in "
                         r"\[0, 1\] \(value 1.5\)"),
                        ("time,utilization\n0,0.5\n300,abc\n", "row 2, column 'utilization': not a finite number "
                         r"\(value 'abc'\)"),
                        ("time,utilization\n0,0.5\n0,0.6\n",
                         r"row 2, column 'time': times must increase \(value 0.0\)"),
                        ("time,util\n0,0.5\nnan,0.6\n", "row 2, column 'time'"),
                        ("time,util\n0,0.5\n\n\n5,0.5\n5,0.6\n", "row 5, column 'time': times must increase"),
                        ("t,u\n0,0.5\n", "needs columns 'time'")):
        bad.write_text(body)
        with pytest.raises(InferenceLoadError, match=f"^{bad}, {where}" if "row" in where else where):
            load_inference(str(bad))
    with pytest.raises(InferenceLoadError, match="missing.csv: file not found"):
        load_inference(str(tmp_path / "missing.csv"))
    with pytest.raises(InferenceLoadError, match="constant:U"):
        load_inference("constant:x")
    with pytest.raises(InferenceLoadError, match="not ServeGen"):
        load_inference(f"{good}:m-small")
    assert from_csv(good, "time", "utilization").util.tolist() == [0.5, 0.7]


def test_servegen_negative_rate_names_file_row_and_column(tmp_path):
    path = tmp_path / "servegen_total_rate_per_10min.csv"
    path.write_text("model,window_start_s,total_rate_req_per_s\nm-small,600,2\nm-large,0,-1\nm-small,0,-3\n")
    with pytest.raises(InferenceLoadError, match=rf"^{path}, row 3, column 'total_rate_req_per_s': negative "
                       r"request rate \(model 'm-small'\) \(value -3.0\)"):
        load_inference(str(path))


@pytest.mark.parametrize("kind", ["fifo", "device", "loop", "gzip"])
def test_inference_file_that_is_not_a_csv_says_what_it_is(tmp_path, kind):
    path = tmp_path / "u.csv"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "loop":
        path.symlink_to(tmp_path / "v.csv")
        (tmp_path / "v.csv").symlink_to(path)
    elif kind == "gzip":
        path.write_bytes(gzip.compress(b"time,utilization\n0,0.5\n"))
    else:
        path = Path("/dev/null")
    expected = {"fifo": "is a pipe (FIFO), not a regular file",
                "device": "is a character device, not a regular file", "loop": "a symbolic link loop",
                "gzip": "a gzip-compressed file, not text: decompress it"}
    with pytest.raises(InferenceLoadError, match=f"^{re.escape(f'{path}: {expected[kind]}')}"):
        load_inference(str(path))


@pytest.mark.parametrize(("cell", "shown"), [("1.7", "1.7"), ("-0.25", "-0.25"), ("inf", "inf")])
def test_bad_utilization_is_shown_as_a_plain_number(tmp_path, cell, shown):
    """Issue #30: the message said np.float64(1.7)."""
    bad = tmp_path / "bad.csv"
    bad.write_text(f"time,utilization\n0,0.5\n300,{cell}\n")
    with pytest.raises(InferenceLoadError) as err:
        load_inference(str(bad))
    message = str(err.value)
    assert f"row 2, column 'utilization': not a " in message and message.endswith(f"(value {shown})"), message
    assert "np." not in message, message


def test_servegen_mapping_matches_the_spec():
    path = shared_data("inference", "servegen_total_rate_per_10min.csv")
    load = load_inference(str(path))  # m-small by default
    assert load.source.endswith(":m-small") and load.span == pytest.approx(14 * 86400)
    assert np.percentile(load.util, 1) == pytest.approx(0.42) and np.percentile(load.util, 99) == pytest.approx(0.95)
    assert 0.58 < load.util.mean() < 0.66  # specs/lyra.md §5: mean 0.62 (paper ~0.65)
    assert (load.util > 0).all()  # zero windows took the previous value
    with pytest.raises(InferenceLoadError, match="no model 'nope'"):
        load_inference(f"{path}:nope")


def test_loan_options_validate_every_value():
    for bad in ({"headroom": 1.0}, {"period_s": 0}, {"reclaim": "best"}, {"gpu_equivalence": 0},
                {"predictor": "lstm"}, {"heterogeneous_perf": 1.5}, {"surprise": 1}):
        with pytest.raises(ValueError):
            LoanOptions(load="constant:0.5", **bad)


SMALL = ["replay", "--num-jobs", "30", "--no-progress", "--cluster", "lyra-testbed"]


@pytest.mark.parametrize(("args", "message"), [
    (["--inference-load", "constant:2"], "--inference-load"),
    (["--inference-load", "nofile.csv"], "--inference-load"),
    (["--inference-load", "constant:0.5", "--reclaim", "best"], "--reclaim"),
    (["--inference-load", "constant:0.5", "--inference-headroom", "1"], "--inference-headroom"),
    (["--inference-load", "constant:0.5", "--gpu-equivalence", "0"], "--gpu-equivalence"),
    (["--inference-load", "constant:0.5", "--cluster", "16x4"], "no 'inference' pool"),
])
def test_cli_refuses_bad_loaning_options_before_any_work(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    try:
        code = main([*SMALL, "--out", str(out), *args])
    except SystemExit as stop:
        code = int(stop.code)
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (out / "summary.json").exists()


def test_cli_replay_with_inference_load_reports_pool_figures(tmp_path):
    out = tmp_path / "out"
    assert main([*SMALL, "--policy", "fifo", "--out", str(out), "--inference-load", "constant:0.5"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["loan_ops"] == 0 and summary["preemption_ratio"] == 0  # fifo does not borrow
    assert 0 < summary["overall_usage_raw"] < summary["training_usage"] + 0.5


def test_experiment_config_inference_key(tmp_path):
    csv = tmp_path / "u.csv"
    csv.write_text("time,utilization\n0,0.5\n")
    base = ("name: x\ntraces: [{name: synthetic, options: {num_jobs: 5}}]\npolicies: [fifo]\n")
    good = tmp_path / "good.yaml"
    good.write_text(base + "clusters: [lyra-testbed]\ninference: {load: u.csv, reclaim: scf}\n")
    config = load_config(good)
    spec = config.grid("v")[0]
    assert spec.inference["load"] == str(csv) and spec.inference["reclaim"] == "scf"
    assert "inference" in spec.identity
    for body, where in (("clusters: [16x4]\ninference: {load: u.csv}\n", r"clusters\[0\]"),
                        ("clusters: [lyra-testbed]\ninference: {load: missing.csv}\n", "inference.load"),
                        ("clusters: [lyra-testbed]\ninference: {load: u.csv, headroom: 2}\n", "inference.headroom"),
                        ("clusters: [lyra-testbed]\ninference: {load: u.csv, reclaim: x}\n", "inference.reclaim")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(base + body)
        with pytest.raises(ConfigError, match=where):
            load_config(bad)
    bad.write_text(base + "clusters: [lyra-testbed]\ninference: {load: missing.csv}\n")
    with pytest.raises(ConfigError, match="relative path: looked in") as err:
        load_config(bad)
    assert str(tmp_path) in str(err.value) and str(Path.cwd()) in str(err.value)


def test_diurnal_is_a_synthetic_day_between_its_bounds_and_errors_name_the_spec():
    load = load_inference("diurnal:0.42:0.95")
    assert load.span == 86400 and len(load.times) == 144
    assert load.util[0] == pytest.approx(0.42) and load.util.max() == pytest.approx(0.95)
    assert load.util[72] == pytest.approx(0.95)  # noon
    for bad, message in [("diurnal:0.9:0.1", "LOW <= HIGH"), ("diurnal:a:b", "two numbers"),
                         ("diurnal:inf:1", "finite"), ("diurnal:0.1", "two numbers"), ("diurnal:0:2", "HIGH <= 1")]:
        with pytest.raises(InferenceLoadError, match=message):
            load_inference(bad)
