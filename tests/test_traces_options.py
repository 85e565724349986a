"""Options every loader honours (window, VC filter, first N, load scaling) and the synthetic generator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydantic
import pytest
from schedlab.sched.traces import LoadOptions, TraceError, load_trace
from schedlab.sched.traces.synthetic import generate, load_config

FIX = Path(__file__).parent / "fixtures" / "traces"
PHILLY = FIX / "philly_small.csv"  # submit offsets 0, 300, 600, 3600, 7200, 7200 s


def test_time_window_is_on_offsets_from_trace_start_and_rebased() -> None:
    df, rep = load_trace(PHILLY, options=LoadOptions(start=300, end=3600))
    assert df["job_id"].tolist() == ["philly-3", "philly-1"]
    assert df["submit_time"].tolist() == [0.0, 300.0]
    assert rep.dropped == {"outside_window": 4} and rep.read == 6 and rep.kept == 2


def test_vc_filter() -> None:
    df, rep = load_trace(PHILLY, options=LoadOptions(vcs=["vcA", "vcC"]))
    assert set(df["vc"]) == {"vcA", "vcC"} and len(df) == 4
    assert df["submit_time"].iloc[0] == 0.0
    assert rep.dropped == {"vc_filter": 2}


def test_vc_filter_needs_vc_column() -> None:
    with pytest.raises(TraceError, match="no VC column"):
        load_trace(FIX / "tiresias_small.csv", options=LoadOptions(vcs=["x"]))


def test_max_jobs_takes_first_in_submit_order() -> None:
    df, rep = load_trace(PHILLY, options=LoadOptions(max_jobs=2))
    assert df["job_id"].tolist() == ["philly-2", "philly-3"]
    assert rep.dropped == {"max_jobs": 4}


@pytest.mark.parametrize("load", [0.5, 1.0, 2.0])
def test_load_scaling_divides_submit_times(load: float) -> None:
    base, _ = load_trace(PHILLY)
    df, _ = load_trace(PHILLY, options=LoadOptions(load=load))
    np.testing.assert_allclose(df["submit_time"], base["submit_time"] / load)
    assert df["duration"].equals(base["duration"])


def test_load_scaling_keeps_deadline_slack() -> None:
    df, _ = load_trace(FIX / "canonical_small.csv", options=LoadOptions(load=2.0))
    assert df["submit_time"].tolist() == [0.0, 15.0, 30.0]
    assert df["deadline"].iloc[0] == 300.0 and df["deadline"].iloc[1] == 15.0 + 870.0


def test_options_combined_counts_add_up() -> None:
    df, rep = load_trace(PHILLY, options=LoadOptions(start=100, vcs=["vcA", "vcB"], max_jobs=2,
                                                     max_gpus=2, on_oversize="drop"))
    # a streamed read (schedlab.sched.traces.stream): the 3 window rows after the 2 jobs kept are not
    # read past their submit time, so they count as max_jobs (a whole read: vc_filter 1, oversize 1, max_jobs 1)
    assert rep.dropped == {"outside_window": 1, "max_jobs": 3}
    assert rep.read == rep.kept + sum(rep.dropped.values())
    assert df["job_id"].tolist() == ["philly-3", "philly-1"]


@pytest.mark.parametrize("bad", [{"load": 0}, {"load": -1}, {"start": 10, "end": 5}, {"max_gpus": 0},
                                 {"on_oversize": "ignore"}, {"typo_option": 1}])
def test_invalid_options(bad: dict) -> None:
    with pytest.raises(pydantic.ValidationError):
        LoadOptions(**bad)


# ---------------------------------------------------------------- synthetic


def test_synthetic_deterministic_per_seed() -> None:
    a, _ = load_trace("synthetic", options=LoadOptions(seed=7, num_jobs=300))
    b, _ = load_trace(None, options=LoadOptions(seed=7, num_jobs=300))
    c, _ = load_trace(None, options=LoadOptions(seed=8, num_jobs=300))
    assert a.equals(b)
    assert not a["submit_time"].equals(c["submit_time"])
    assert not a["duration"].equals(c["duration"])
    assert len(a) == 300


@pytest.mark.parametrize("load", [0.5, 1.0, 2.0])
def test_synthetic_offered_load(load: float) -> None:
    gpus = 64
    df, _ = load_trace(None, options=LoadOptions(seed=3, num_jobs=2000, load=load, max_gpus=gpus))
    offered = float((df["num_gpus"] * df["duration"]).sum())
    span = float(df["submit_time"].max())
    assert offered / (gpus * span) == pytest.approx(load, rel=0.05)
    assert df["num_gpus"].max() <= gpus


def test_synthetic_respects_cluster_size() -> None:
    df, _ = load_trace(None, options=LoadOptions(num_jobs=2000, max_gpus=4))
    assert set(df["num_gpus"]) <= {1, 2, 4}


def test_synthetic_matches_philly_statistics() -> None:
    cfg = load_config()
    df = generate(50_000, seed=1, target_gpus=128, config=cfg)
    mix = {int(g): c for g, c in cfg.gpu_mix.items()}
    assert (df["num_gpus"] == 1).mean() == pytest.approx(mix[1] / sum(mix.values()), abs=0.01)
    single = df.loc[df["num_gpus"] == 1, "duration"]
    assert single.median() == pytest.approx(1117.0, rel=0.1)  # Philly 1-GPU median
    # diurnal: the busiest 6-hour block of the day lies around the configured peak hour
    hour = (df["submit_time"] % cfg.diurnal.period_s) / 3600.0
    counts = np.histogram(hour, bins=24, range=(0, 24))[0]
    assert counts[2:8].sum() > counts[14:20].sum() * 1.3


def test_synthetic_custom_config(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[1] / "conf" / "synthetic.yaml").read_text()
    p = tmp_path / "syn.yaml"
    p.write_text(text.replace("num_jobs: 1000", "num_jobs: 42"))
    df, rep = load_trace(p)
    assert rep.format == "synthetic" and len(df) == 42


def test_synthetic_bad_config(tmp_path: Path) -> None:
    p = tmp_path / "syn.yaml"
    p.write_text("num_jobs: 0\n")
    with pytest.raises(TraceError, match="bad synthetic config"):
        load_trace(p, "synthetic")
