"""Gimbal's annotation scheme (Gimbal §7.1, Table 1-2; spec gimbal.md A15-A16)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from schedlab.sched.models.annotate import (
    GIMBAL_MODELS,
    LAMBDA_RANGE,
    AnnotationError,
    GimbalScheme,
    annotate,
    annotation_scheme,
)
from schedlab.sched.spec import ConfigError, TraceEntry


def _jobs(n: int = 150, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "job_id": [f"j{i}" for i in range(n)],
        "submit_time": np.sort(rng.uniform(0, 10_000, n)),
        "num_gpus": rng.choice([1, 2, 4, 8, 16], n),
        "duration": np.exp(rng.uniform(np.log(60), np.log(200_000), n)),
    })


def test_table2_class_counts_and_longest_jobs_are_large():
    jobs = _jobs()
    out = annotate(jobs, seed=1, scheme="gimbal")
    assert np.bincount(out["size_class"], minlength=3).tolist() == [43, 86, 21]  # Table 2, Philly
    shortest_large = jobs["duration"][out["size_class"] == 2].min()
    assert (jobs["duration"][out["size_class"] < 2] <= shortest_large).all()
    for c, group in enumerate(GIMBAL_MODELS):
        assert set(out["model"][out["size_class"] == c]) <= set(group)


def test_gpu_counts_follow_the_class_distributions():
    jobs = _jobs(n=6000, seed=5)
    out = annotate(jobs, seed=2, scheme="gimbal")
    small_medium = out["num_gpus"][out["size_class"] < 2]
    large = out["num_gpus"][out["size_class"] == 2]
    assert set(small_medium) == {1, 2, 4} and set(large) == {4, 8}
    assert small_medium.mean() == pytest.approx(2.4, abs=0.06)  # Table 2: 2.39 / 2.41
    assert large.mean() == pytest.approx(4.85, abs=0.1)  # Table 2: 4.85


def test_deadlines_lambda_range_and_seeded():
    jobs = _jobs()
    out = annotate(jobs, seed=4, scheme="gimbal")
    lam = (out["deadline"] - out["submit_time"]) / out["duration"]
    assert lam.between(*LAMBDA_RANGE).all() and lam.max() - lam.min() > 0.5
    again = annotate(jobs, seed=4, scheme="gimbal")
    pd.testing.assert_frame_equal(out, again)
    other = annotate(jobs, seed=5, scheme="gimbal")
    assert not out["num_gpus"].equals(other["num_gpus"])


def test_durations_cut_and_scaled():
    jobs = _jobs()
    out = annotate(jobs, seed=0, scheme={"scheme": "gimbal", "duration_scale": 0.5, "max_duration_s": 3600,
                                          "min_duration_s": 120})
    expected = np.minimum(np.maximum(jobs["duration"], 120) * 0.5, 3600)
    np.testing.assert_allclose(out["duration"], expected)
    assert (out["iterations"] >= 1).all()


def test_bad_schemes_are_named():
    with pytest.raises(ValueError, match="unknown annotation scheme"):
        annotation_scheme("helios")
    with pytest.raises(ValueError, match="class_shares"):
        annotation_scheme({"scheme": "gimbal", "class_shares": [0.5, 0.5, 0.5]})
    with pytest.raises(ValueError, match="large_gpus"):
        annotation_scheme({"scheme": "gimbal", "large_gpus": {4: 0.5}})
    with pytest.raises(ValueError, match="max_duration_s"):
        annotation_scheme({"scheme": "gimbal", "max_duration_s": -1})
    with pytest.raises(AnnotationError, match="cannot be annotated"):
        annotate(_jobs(), scheme={"scheme": "gimbal", "models": [["gpt"], ["imagenet"], ["bert"]]})
    assert annotation_scheme(True) is None and annotation_scheme("pollux") is None
    assert isinstance(annotation_scheme("gimbal"), GimbalScheme)


def test_default_scheme_unchanged():
    jobs = _jobs()
    pd.testing.assert_frame_equal(annotate(jobs, seed=1), annotate(jobs, seed=1, scheme="pollux"))


def test_experiment_config_validates_the_scheme():
    assert TraceEntry(name="t", annotate={"scheme": "gimbal", "max_duration_s": 7200}).annotate["max_duration_s"] == 7200
    with pytest.raises((ValueError, ConfigError), match="duration_scale"):
        TraceEntry(name="t", annotate={"scheme": "gimbal", "duration_scale": 0})
