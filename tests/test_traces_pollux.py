"""Pollux workloads: the ``pollux`` CSV format, the ``pollux-philly`` generator (bucket rules, window,
TunedJobs, determinism) and an end-to-end replay of a fixture workload (specs/pollux.md)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from helpers import FIXTURES, SHARED_DATA
from schedlab.sched.models.goodput import load_applications
from helpers import prepared_table, replay_table
from schedlab.sched.traces import LoadOptions, TraceError, detect_format, load_trace
from schedlab.sched.traces.pollux import generate

POLLUX = FIXTURES / "pollux"
WORKLOAD = POLLUX / "workload-toy.csv"
PHILLY = Path(os.environ.get("SCHEDLAB_SHARED_DATA") or SHARED_DATA) / "traces" / "philly" / "philly_jobs_pollux.csv"
APPS = ("cifar10", "ncf", "deepspeech2", "bert", "yolov3", "imagenet")


# ---- pollux format ----------------------------------------------------------------------------
def test_pollux_fixture_loads():
    df, rep = load_trace(WORKLOAD)
    assert rep.format == "pollux" and rep.read == rep.kept == 6
    assert df["job_id"].tolist() == [f"toy-{i}" for i in range(6)]
    assert df["submit_time"].tolist() == [100.0, 130.0, 160.0, 400.0, 410.0, 900.0]  # the file's clock
    assert df["num_gpus"].tolist() == [1, 2, 1, 3, 1, 2]
    assert df["global_batch"].tolist() == [8, 16, 12, 24, 32, 32]
    assert df["batch_size"].tolist() == [8, 8, 12, 8, 32, 16]  # per GPU, rounded up
    assert set(df["model"]) == {"toy"} and "duration" not in df.columns


@pytest.mark.parametrize(
    "row, column, value, message",
    [
        (2, "num_replicas", "1.5", "not an integer"),
        (3, "batch_size", "0", "must be >= 1"),
        (4, "time", "soon", "not a finite number"),
        (5, "application", "", "missing value"),
    ],
)
def test_pollux_errors_name_row_and_column(tmp_path, row, column, value, message):
    df = pd.read_csv(WORKLOAD, dtype=str)
    df.loc[row - 1, column] = value
    path = tmp_path / "w.csv"
    df.to_csv(path, index=False)
    with pytest.raises(TraceError, match=rf"w.csv, row {row}, column '{column}': {message}"):
        load_trace(path, "pollux")


def test_pollux_missing_column(tmp_path):
    path = tmp_path / "w.csv"
    pd.read_csv(WORKLOAD).rename(columns={"batch_size": "batch"}).to_csv(path, index=False)
    with pytest.raises(TraceError, match="missing column 'batch_size'"):
        load_trace(path, "pollux")
    assert detect_format(path) == "pollux"  # a near miss still selects the format


def test_nominal_duration_is_the_run_alone():
    table, _ = load_trace(WORKLOAD)
    prepared, notes = prepared_table(table, _cluster(), goodput_root=POLLUX)
    toy = load_applications(POLLUX)["toy"]
    assert notes == {"goodput": True}
    assert prepared["duration"].iloc[0] == pytest.approx(600.0)  # 1 GPU at B0, by hand in test_goodput
    assert prepared["duration"].tolist() == [toy.run_time(g, b, 4) for g, b in zip(table["num_gpus"], table["global_batch"])]


def _cluster():
    from schedlab.sched.core.cluster import load_cluster

    return load_cluster("2x4")


@pytest.mark.parametrize("policy", ["fifo", "sjf", "tiresias"])
def test_replay_fixture_workload(policy):
    table, rep = load_trace(WORKLOAD)
    prepared, _ = prepared_table(table, _cluster(), goodput_root=POLLUX)
    # tiresias' default on goodput workloads is the study's round-based TunedJobs mode (own tests)
    params = {"mode": "las"} if policy == "tiresias" else None
    result = replay_table(prepared, "2x4", policy, params, goodput_root=POLLUX)
    jobs = result.jobs.set_index("job_id")
    assert len(jobs) == 6 and jobs["end_time"].notna().all()
    # the first job runs alone from its arrival on its packed GPUs: its JCT is its nominal run time
    assert jobs.loc["toy-0", "jct_s"] == pytest.approx(600.0)
    # nobody finishes faster than alone on its packed placement
    nominal = prepared.set_index("job_id")["duration"]
    assert (jobs["jct_s"] >= nominal.loc[jobs.index] - 1e-6).all()
    assert result.summary["jobs"] == 6


# ---- pollux-philly generator ------------------------------------------------------------------------
class Configs:
    """A stand-in application with three TunedJobs choices (what ``generate`` reads of a model)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def tuned_configs(self):
        return ((1, 8, 1.0), (2, 16, 1.0), (4, 32, 1.0))


MODELS = {name: Configs(name) for name in APPS}
DAY = 86400.0


def philly_like(gpu_hours: list[float], hour_of_day: float = 3.0) -> pd.DataFrame:
    """Jobs submitted one per day at ``hour_of_day`` with the given GPU-hours."""
    n = len(gpu_hours)
    gpus = [max(1, math.ceil(h / 10)) for h in gpu_hours]
    return pd.DataFrame({
        "submit_time": np.arange(n) * DAY + hour_of_day * 3600.0 + np.arange(n),
        "duration": [h * 3600.0 / g for h, g in zip(gpu_hours, gpus)],
        "num_gpus": gpus,
    })


@pytest.mark.parametrize(
    "hours, apps",
    [
        (0.5, {"cifar10", "ncf"}),
        (5.0, {"deepspeech2", "bert"}),
        (50.0, {"yolov3"}),
        (500.0, {"imagenet"}),
    ],
)
def test_generator_buckets(hours, apps):
    out = generate(philly_like([hours] * 200), 200, seed=1, models=MODELS)
    assert set(out["model"]) == apps  # every application of the bucket occurs, nothing else
    if len(apps) == 2:  # even odds
        share = (out["model"] == sorted(apps)[0]).mean()
        assert 0.35 < share < 0.65
    assert {(g, b) for g, b in zip(out["num_gpus"], out["global_batch"])} == {(1, 8), (2, 16), (4, 32)}


def test_generator_filters_and_window():
    ok = philly_like([0.5] * 10)
    too_short = philly_like([50 / 3600] * 10)  # 50 s on one GPU
    too_big = philly_like([2000.0] * 10)
    outside = philly_like([0.5] * 10, hour_of_day=12.0)
    trace = pd.concat([ok, too_short, too_big, outside], ignore_index=True)
    out = generate(trace, 10, seed=0, models=MODELS)
    # only the 10 good jobs in hours 2-10 qualify; times are offsets in the window (3 h - 2 h = 1 h)
    assert sorted(out["submit_time"]) == [3600.0 + i for i in range(10)]
    with pytest.raises(ValueError, match="only 10 Philly jobs pass"):
        generate(trace, 11, seed=0, models=MODELS)
    late = generate(trace, 10, seed=0, window=(11 * 3600.0, 13 * 3600.0), models=MODELS)
    assert sorted(late["submit_time"]) == [3600.0 + i for i in range(10)]
    with pytest.raises(ValueError, match="must span"):
        generate(trace, 10, seed=0, window=(0.0, 2 * DAY), models=MODELS)


def test_arrival_scale_multiplies_submit_times_before_load():
    """``arrival_scale`` (the calibrated length of the papers' "busiest period", issue #26) scales the
    times from the origin, then ``load`` divides them; 1.0 leaves the table identical."""
    base, _ = load_trace(WORKLOAD)
    same, _ = load_trace(WORKLOAD, options=LoadOptions(arrival_scale=1.0))
    pd.testing.assert_frame_equal(base, same)
    scaled, _ = load_trace(WORKLOAD, options=LoadOptions(arrival_scale=5.2, load=2.0))
    assert scaled["submit_time"].tolist() == pytest.approx([t * 5.2 / 2.0 for t in base["submit_time"]])
    assert scaled.drop(columns="submit_time").equals(base.drop(columns="submit_time"))
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="arrival_scale"):
            LoadOptions(arrival_scale=bad)


def test_generator_names_sorted_by_time():
    out = generate(philly_like([0.5, 5.0, 50.0, 500.0] * 10), 40, seed=3, models=MODELS)
    assert out["submit_time"].is_monotonic_increasing
    assert out["job_id"].tolist() == [f"{m}-{i}" for i, m in enumerate(out["model"])]
    assert (out["batch_size"] == -(-out["global_batch"] // out["num_gpus"])).all()


def test_generator_deterministic_per_seed():
    trace = philly_like([0.5, 5.0, 50.0, 500.0] * 50)
    a = generate(trace, 100, seed=7, models=MODELS)
    b = generate(trace, 100, seed=7, models=MODELS)
    c = generate(trace, 100, seed=8, models=MODELS)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_generator_busiest_window():
    quiet = philly_like([0.5] * 30)  # one job a day
    busy = pd.DataFrame({  # 30 jobs of 50 GPU-hours within 2 hours of day 40
        "submit_time": 40 * DAY + np.arange(30) * 200.0, "duration": 3600.0, "num_gpus": 50})
    out = generate(pd.concat([quiet, busy], ignore_index=True), 20, seed=0, busiest_hours=8, models=MODELS)
    assert set(out["model"]) == {"yolov3"}
    assert out["submit_time"].min() >= 40 * DAY  # real submit times kept (the loader rebases them)


def test_the_loader_takes_the_goodput_models_from_its_caller(tmp_path):
    """The trace layer reads no model: ``pollux-philly`` draws from the applications it is given."""
    trace = philly_like([0.5, 5.0, 50.0, 500.0] * 10)
    path = tmp_path / "philly.csv"
    trace.assign(timestamp=trace["submit_time"], cluster="c").to_csv(path, index=False)
    df, rep = load_trace(path, "pollux-philly", LoadOptions(seed=3, num_jobs=40), applications=MODELS)
    assert rep.format == "pollux-philly" and len(df) == 40 and set(df["model"]) <= set(APPS)
    with pytest.raises(ValueError, match="format 'pollux-philly' needs the Pollux applications' goodput models"):
        load_trace(path, "pollux-philly", LoadOptions(seed=3, num_jobs=40))
    with pytest.raises(ValueError, match="format 'pollux' takes no goodput models"):
        load_trace(WORKLOAD, "pollux", applications=MODELS)


# ---- the real Philly trace (skipped without ../shared/data) -------------------------------------
def real_philly() -> Path:
    from schedlab.sched.models.goodput import default_root

    if not PHILLY.is_file() or not (default_root() / "traces").is_dir():
        pytest.skip("Philly trace or Pollux data not present (set SCHEDLAB_SHARED_DATA / SCHEDLAB_POLLUX_DATA)")
    return PHILLY


def test_real_study_workload():
    df, rep = load_trace(real_philly(), "pollux-philly", LoadOptions(seed=0), applications=load_applications())
    assert rep.kept == len(df) == 160 and rep.format == "pollux-philly"
    assert df["submit_time"].min() == 0.0 and df["submit_time"].max() < 8 * 3600
    assert set(df["model"]) <= set(APPS)
    models = load_applications()
    for app, gpus, batch in zip(df["model"], df["num_gpus"], df["global_batch"]):
        assert (gpus, batch) in {(r, b) for r, b, _ in models[app].tuned_configs()}
    # like the study's workloads: mostly small jobs (cifar10/ncf), few imagenet
    small = df["model"].isin(["cifar10", "ncf"]).mean()
    assert 0.5 < small < 0.9 and (df["model"] == "imagenet").sum() < 10
    again, _ = load_trace(real_philly(), "pollux-philly", LoadOptions(seed=0), applications=load_applications())
    pd.testing.assert_frame_equal(df, again)


def test_real_busiest_240_replays():
    opts = LoadOptions(seed=1, busiest_hours=8, num_jobs=240, max_gpus=64)
    df, rep = load_trace(real_philly(), "pollux-philly", opts, applications=load_applications())
    assert len(df) == 240 and df["submit_time"].max() < 8 * 3600
    prepared, _ = prepared_table(df, _cluster16x4())
    assert np.isfinite(prepared["duration"]).all() and (prepared["duration"] > 0).all()
    result = replay_table(prepared, "sjf-bsbf-sim", "fifo")
    assert result.jobs["end_time"].notna().all() and math.isfinite(result.summary["avg_jct_s"])


def _cluster16x4():
    from schedlab.sched.core.cluster import load_cluster

    return load_cluster("sjf-bsbf-sim")



CASTOR_ROWS = {"castor", "sjf", "lucid", "pollux", "tiresias", "fifo"}
SJF_BSBF_ROWS = {"sjf-bsbf", "sjf-ffs", "sjf", "pollux", "tiresias", "fifo"}


@pytest.mark.parametrize("name, cluster, policies, scale", [
    ("castor-pollux", "castor-sim", CASTOR_ROWS, None),
    ("sjf-bsbf-pollux", "sjf-bsbf-sim", SJF_BSBF_ROWS, None),
    ("sjf-bsbf-pollux-480", "sjf-bsbf-sim", SJF_BSBF_ROWS, None),
    ("castor-pollux-calibrated", "castor-sim", CASTOR_ROWS, 0.85),  # fitted on Table 5's FIFO JCT
    ("sjf-bsbf-pollux-calibrated", "sjf-bsbf-sim", SJF_BSBF_ROWS, 5.2),  # fitted on Table III's FIFO JCT
    ("sjf-bsbf-pollux-480-calibrated", "sjf-bsbf-sim", SJF_BSBF_ROWS, 5.2),  # Table III's value, not refitted
])
def test_shipped_pollux_experiments(tmp_path, name, cluster, policies, scale):
    from schedlab.sched.policies import POLICIES
    from schedlab.sched.spec import CONF_DIR, load_config

    shared = real_philly().parents[2]  # the shipped files name ../shared/data: point it at the data here
    path = tmp_path / f"{name}.yaml"
    path.write_text((CONF_DIR / f"{name}.yaml").read_text().replace("../shared/data", str(shared)))
    config = load_config(path)
    assert config.clusters == [cluster] and {e.name for e in config.policy_entries()} == policies <= set(POLICIES)
    assert {t.format for t in config.traces} == {"pollux-philly"} and config.seeds == [0, 1, 2]
    assert config.traces[0].options.get("arrival_scale") == scale
    # the papers' Tiresias is 2D-LAS (Castor §9.1, SJF-BSBF §VI-A3); Pollux's Tiresias+TunedJobs runs beside it
    variants = {e.label: (e.params.get("mode"), e.params.get("blocking", False))
                for e in config.policy_entries() if e.name == "tiresias"}
    if scale is None:
        assert variants == {"tiresias": ("las", False), "tiresias-tuned": ("tuned-jobs", False)}
    else:  # the calibrated tables' tiresias blocks (chosen on Table III, issue #26); skipping runs beside it
        assert variants == {"tiresias": ("las", True), "tiresias-skip": ("las", False),
                            "tiresias-tuned": ("tuned-jobs", False)}
    if "-480" in name:  # SJF-BSBF Table IV: 480 jobs at the trace's own load
        assert config.traces[0].options["num_jobs"] == 480 and config.traces[0].loads == [1.0]
    else:
        assert config.traces[0].options["num_jobs"] == 240 and config.traces[0].loads == [0.5, 1.0, 1.5, 2.0]


def test_infeasible_job_names_the_job(tmp_path):
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\nok,0,toy,1,8\nbig,5,toy,16,32\n")
    table, report = load_trace(path, "pollux")
    with pytest.raises(ValueError, match=r"^job table, row 2 \(job 'big'\): 16 GPUs, global batch 32: toy: "):
        prepared_table(table, _cluster(), goodput_root=POLLUX)
    with pytest.raises(TraceError, match=rf"^{path}, row 2 \(job 'big'\): 16 GPUs, global batch 32: toy: "):
        prepared_table(table, _cluster(), goodput_root=POLLUX, report=report)


def test_unknown_application_names_file_row_and_column(tmp_path):
    """Issue #30: an application without a goodput model named neither file nor row."""
    path = tmp_path / "w.csv"  # row 2 is submitted first: the table's first job is the file's row 2
    path.write_text("name,time,application,num_replicas,batch_size\na,5,toy,1,8\nb,1,nosuch,1,8\n")
    table, report = load_trace(path, "pollux")
    with pytest.raises(TraceError) as info:
        prepared_table(table, _cluster(), goodput_root=POLLUX, report=report)
    err = info.value
    assert (err.file, err.row, err.column, err.value, err.job) == (str(path), 2, "application", "nosuch", "b")
    assert str(err) == (f"{path}, row 2 (job 'b'), column 'application': no goodput model for this application; "
                        "known: toy (value 'nosuch')")
