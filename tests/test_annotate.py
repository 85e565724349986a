"""Workload annotation of canonical job tables (schedlab.sched.models.annotate)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from schedlab.sched.models.annotate import LAMBDA_RANGE, AnnotationError, annotate
from schedlab.sched.models.workloads import default_catalog
from helpers import SHARED_DATA

PHILLY = SHARED_DATA / "traces" / "philly" / "philly_jobs_pollux.csv"


def _jobs(n: int = 400, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 1, 1, 2, 4, 8, 16, 32], size=n)
    duration = np.exp(rng.uniform(np.log(30), np.log(400_000), size=n)).round(1)
    return pd.DataFrame(
        {
            "job_id": [f"job{i}" for i in range(n)],
            "submit_time": np.sort(rng.uniform(0, 86_400, size=n)),
            "num_gpus": gpus,
            "duration": duration,
        }
    )


def test_adds_columns_and_keeps_duration():
    jobs = _jobs()
    before = jobs.copy()
    out = annotate(jobs, seed=1)
    pd.testing.assert_frame_equal(jobs, before)  # input not mutated
    for col in ("model", "batch_size", "iterations", "deadline", "duration"):
        assert col in out.columns
    pd.testing.assert_series_equal(out["duration"], jobs["duration"])
    assert out["model"].notna().all()
    assert out["batch_size"].dtype.kind == "i"
    assert (out["iterations"] >= 1).all()
    cat = default_catalog()
    for m, b in zip(out["model"], out["batch_size"]):
        assert b in cat.workloads[m].batch_sizes


def test_deterministic_per_seed():
    jobs = _jobs()
    a = annotate(jobs, seed=3)
    b = annotate(jobs, seed=3)
    pd.testing.assert_frame_equal(a, b)
    c = annotate(jobs, seed=4)
    assert not a["model"].equals(c["model"]) or not a["batch_size"].equals(c["batch_size"])
    assert not np.allclose(a["deadline"], c["deadline"])


def test_iterations_times_solo_time_reproduce_duration():
    jobs = _jobs()
    out = annotate(jobs, seed=0, gpus_per_server=8)
    cat = default_catalog()
    t = np.array(
        [
            cat.solo_iteration_time(m, b, n, "t4", gpus_per_server=8)
            for m, b, n in zip(out["model"], out["batch_size"], out["num_gpus"])
        ]
    )
    long_enough = out["duration"].to_numpy() >= t
    assert long_enough.mean() > 0.95
    np.testing.assert_allclose(
        out["iterations"].to_numpy()[long_enough] * t[long_enough],
        out["duration"].to_numpy()[long_enough],
        rtol=1e-9,
    )
    # jobs shorter than one iteration get exactly one
    assert (out["iterations"].to_numpy()[~long_enough] == 1).all()


def test_gpu_type_and_servers_change_iterations():
    jobs = _jobs()
    t4 = annotate(jobs, seed=0)
    v100 = annotate(jobs, seed=0, gpu_type="v100")
    assert (t4["model"] == v100["model"]).all()
    assert (v100["iterations"] >= t4["iterations"]).all()  # faster GPU: more iterations in the same time
    assert (v100["iterations"] > t4["iterations"]).mean() > 0.9


def test_models_follow_size_classes():
    jobs = _jobs(2000)
    out = annotate(jobs, seed=0)
    gpu_h = out["num_gpus"] * out["duration"] / 3600
    cat = default_catalog()
    classes = cat.size_classes
    for i, sc in enumerate(classes):
        lo = 0.0 if i == 0 else classes[i - 1].max_gpu_hours
        hi = np.inf if sc.max_gpu_hours is None else sc.max_gpu_hours
        sel = (gpu_h >= lo) & (gpu_h < hi)
        assert sel.any()
        assert set(out.loc[sel, "model"]) <= set(sc.models)
    assert set(out.loc[gpu_h < 1, "model"]) == {"cifar10", "ncf"}  # Pollux: < 1 GPU-h
    assert set(out.loc[gpu_h >= 100, "model"]) == {"imagenet"}


def test_deadline_lambda_range():
    jobs = _jobs(3000)
    out = annotate(jobs, seed=11)
    lam = (out["deadline"] - out["submit_time"]) / out["duration"]
    assert lam.min() >= LAMBDA_RANGE[0] and lam.max() <= LAMBDA_RANGE[1]
    assert lam.min() < 1.55 and lam.max() > 2.45
    assert abs(lam.mean() - 2.0) < 0.05


def test_no_deadlines_and_existing_deadlines_kept():
    jobs = _jobs()
    out = annotate(jobs, deadlines=False)
    assert "deadline" not in out.columns
    jobs["deadline"] = np.nan
    jobs.loc[0, "deadline"] = 123.0
    out = annotate(jobs)
    assert out.loc[0, "deadline"] == 123.0
    assert out["deadline"].notna().all()


def test_fully_annotated_table_passes_through():
    jobs = pd.DataFrame(
        {
            "job_id": ["a", "b"],
            "submit_time": [0.0, 5.0],
            "num_gpus": [1, 4],
            "model": ["bert", "imagenet"],
            "batch_size": [12, 64],
            "iterations": [100, 2000],
        }
    )
    out = annotate(jobs)
    assert out is jobs
    pd.testing.assert_frame_equal(out, jobs)


def test_partially_annotated_rows_unchanged():
    jobs = _jobs(50)
    jobs["model"] = None
    jobs["batch_size"] = np.nan
    jobs["iterations"] = np.nan
    jobs.loc[[2, 5], ["model", "batch_size", "iterations"]] = ["yolov3", 4, 77.0]
    out = annotate(jobs, seed=2)
    assert list(out.loc[[2, 5], "model"]) == ["yolov3", "yolov3"]
    assert list(out.loc[[2, 5], "iterations"]) == [77.0, 77.0]
    assert list(out.loc[[2, 5], "batch_size"]) == [4, 4]
    assert out["model"].notna().all() and out["iterations"].notna().all()
    # pre-annotated rows do not shift other rows' draws
    fresh = annotate(_jobs(50), seed=2)
    others = ~out.index.isin([2, 5])
    assert (out.loc[others, "model"] == fresh.loc[others, "model"]).all()


def test_unknown_model_names_row_and_model():
    jobs = pd.DataFrame(
        {
            "job_id": ["a", "b", "c"],
            "submit_time": [0.0, 1.0, 2.0],
            "num_gpus": [1, 1, 2],
            "duration": [100.0, 200.0, 300.0],
            "model": ["bert", "gpt9", None],
        }
    )
    with pytest.raises(AnnotationError) as exc:
        annotate(jobs)
    assert str(exc.value).startswith("job table, row 2 (job 'b'), column 'model': unknown model; the catalog's "
                                     "models: bert, cifar10,")  # rows 1-based, as everywhere
    assert exc.value.value == "gpt9" and exc.value.position == 1


def test_bad_rows_give_clear_errors():
    jobs = _jobs(5)
    jobs.loc[3, "duration"] = np.nan
    with pytest.raises(AnnotationError, match="job3"):
        annotate(jobs)
    jobs.loc[[1, 4], "duration"] = [-1.0, 0.0]  # the first named, the others counted
    with pytest.raises(AnnotationError, match=r"^job table, row 2 \(job 'job1'\), column 'duration': must be a "
                       r"positive number for rows to annotate \(2 more such jobs\) \(value -1.0\)$"):
        annotate(jobs)
    with pytest.raises(AnnotationError, match="duration"):
        annotate(_jobs(5).drop(columns="duration"))


@pytest.mark.skipif(not PHILLY.exists(), reason="shared Philly trace not available")
def test_philly_pollux_trace_model_mix():
    raw = pd.read_csv(PHILLY)
    ts = pd.to_datetime(raw["timestamp"])
    jobs = pd.DataFrame(
        {
            "job_id": np.arange(len(raw)).astype(str),
            "submit_time": (ts - ts.min()).dt.total_seconds(),
            "num_gpus": raw["num_gpus"],
            "duration": raw["duration"],
        }
    )
    out = annotate(jobs, seed=0)
    assert out["model"].notna().all()
    # Pollux's buckets: most Philly jobs are < 1 GPU-hour, so cifar10/ncf dominate
    share = out["model"].value_counts(normalize=True)
    assert share["cifar10"] + share["ncf"] > 0.6


def test_lyra_scheme_in_experiments_is_validated_and_applied(tmp_path):
    """``annotate: {scheme: lyra, scenario: ...}`` (Lyra §7.1 scenarios) is checked when the config is
    read, naming the bad field, and gives lyra_scenario's columns with the replay's seed."""
    from schedlab.sched.models.annotate import LyraScheme, annotation_scheme, lyra_scenario
    from schedlab.sched.spec import ConfigError, load_config

    assert annotation_scheme("lyra") == LyraScheme()
    assert annotation_scheme({"scheme": "lyra", "scenario": "ideal"}).scenario == "ideal"
    with pytest.raises(ValueError, match="annotation scheme lyra: scenario"):
        annotation_scheme({"scheme": "lyra", "scenario": "fancy"})
    with pytest.raises(ValueError, match="annotation scheme lyra: checkpoint"):
        annotation_scheme({"scheme": "lyra", "checkpoint": 2})
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ntraces: [{name: t, format: synthetic, annotate: {scheme: lyra, scenario: big}}]\n"
                    "clusters: [4x8]\n")
    with pytest.raises(ConfigError, match="annotate"):
        load_config(path)
    table = pd.DataFrame({"job_id": [f"j{i}" for i in range(400)], "submit_time": np.arange(400.0),
                          "num_gpus": np.tile([1, 2, 4, 8], 100), "duration": np.tile([600.0, 7200.0], 200)})
    out = annotate(table, seed=4, scheme={"scheme": "lyra", "scenario": "advanced"})
    pd.testing.assert_frame_equal(out, lyra_scenario(table, "advanced", seed=4))
    assert "model" not in out.columns and out["heterogeneous"].any()
