"""Every trace format on its small fixture, and on the real files in ../shared/data when present."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from schedlab.sched.traces.jobtable import CANONICAL_COLUMNS
from schedlab.sched.traces import (
    FORMATS,
    LoadOptions,
    LoadReport,
    detect_format,
    load_trace,
)
from helpers import SHARED_DATA

FIX = Path(__file__).parent / "fixtures" / "traces"
DATA = SHARED_DATA / "traces"
PHILLY = DATA / "philly" / "philly_jobs_pollux.csv"


def check_canonical(df: pd.DataFrame, report: LoadReport) -> None:
    """The contract every loader output meets."""
    assert list(df.columns) == [c for c in CANONICAL_COLUMNS if c in df.columns]
    assert {"job_id", "submit_time", "num_gpus"} <= set(df.columns)
    assert "duration" in df.columns or {"model", "batch_size", "iterations"} <= set(df.columns)
    assert pd.api.types.is_string_dtype(df["job_id"])
    assert df["submit_time"].dtype == "float64" and df["num_gpus"].dtype == "int64"
    assert isinstance(df.index, pd.RangeIndex) and df.index.start == 0
    if len(df):
        assert df["submit_time"].iloc[0] == 0.0
        assert (df["num_gpus"] >= 1).all()
    assert df.equals(df.sort_values(["submit_time", "job_id"]).reset_index(drop=True))
    assert df["job_id"].is_unique
    assert report.kept == len(df)
    assert report.read == report.kept + sum(report.dropped.values())
    assert set(report.to_dict()) == {"source", "format", "read", "kept", "dropped", "repaired"}


def test_formats_registry() -> None:
    assert set(FORMATS) == {"philly", "philly-raw", "helios", "alibaba-pai", "itp", "tiresias",
                            "canonical", "synthetic", "pollux", "pollux-philly"}


def test_philly_fixture() -> None:
    df, rep = load_trace(FIX / "philly_small.csv")
    check_canonical(df, rep)
    assert rep.format == "philly" and rep.read == 6 and rep.kept == 6
    assert rep.repaired == {"unsorted_sorted": 2}
    assert df["submit_time"].tolist() == [0, 300, 600, 3600, 7200, 7200]
    assert df["job_id"].tolist() == ["philly-2", "philly-3", "philly-1", "philly-4", "philly-5", "philly-6"]
    assert df["num_gpus"].tolist() == [8, 2, 1, 1, 4, 1]
    assert df["vc"].tolist() == ["vcB", "vcA", "vcA", "vcC", "vcB", "vcA"]
    assert df["duration"].iloc[0] == 3600.0


def test_philly_raw_fixture() -> None:
    df, rep = load_trace(FIX / "philly_raw_small.json")
    check_canonical(df, rep)
    assert rep.format == "philly-raw" and rep.read == 5 and rep.kept == 3
    assert rep.dropped == {"never_ran": 1, "no_end_time": 1}
    assert rep.repaired == {"unsorted_sorted": 1}
    assert df["job_id"].tolist() == ["application_1_0003", "application_1_0001", "application_1_0005"]
    assert df["submit_time"].tolist() == [0.0, 400.0, 10500.0]
    # span from first attempt's start to last attempt's end; most GPUs of any attempt
    assert df["duration"].tolist() == [600.0, 3660.0, 1800.0]
    assert df["num_gpus"].tolist() == [1, 6, 8]
    assert df["user"].tolist() == ["u2", "u1", "u3"] and df["vc"].tolist() == ["vcB", "vcA", "vcC"]


def test_philly_raw_jsonlines(tmp_path: Path) -> None:
    import json

    jobs = json.loads((FIX / "philly_raw_small.json").read_text())
    p = tmp_path / "cluster_job_log"
    p.write_text("\n".join(json.dumps(j) for j in jobs) + "\n")
    df, rep = load_trace(p)
    assert rep.format == "philly-raw" and rep.kept == 3


def test_helios_fixture() -> None:
    df, rep = load_trace(FIX / "helios_small.csv")
    check_canonical(df, rep)
    assert rep.format == "helios" and rep.read == 5 and rep.kept == 4
    assert rep.dropped == {"no_gpu": 1}
    assert df["job_id"].tolist() == ["j1", "j2", "j4", "j5"]
    assert df["submit_time"].tolist() == [0.0, 60.0, 1800.0, 3600.0]
    assert df["num_gpus"].tolist() == [1, 8, 16, 2]
    assert df["user"].tolist() == ["uA", "uB", "uC", "uB"]


def _pai_expect(df: pd.DataFrame, rep: LoadReport) -> None:
    check_canonical(df, rep)
    assert rep.format == "alibaba-pai" and rep.read == 6 and rep.kept == 3
    assert rep.dropped == {"no_gpu": 1, "never_ran": 1, "no_end_time": 1}
    assert rep.repaired == {"fractional_gpu_rounded_up": 1}
    assert df["job_id"].tolist() == ["job_a", "job_b", "job_e"]
    assert df["submit_time"].tolist() == [0.0, 100.0, 400.0]
    assert df["num_gpus"].tolist() == [2, 1, 8]  # 2x100% ; 50%+25% -> 1 ; 800%
    assert df["duration"].tolist() == [990.0, 3800.0, 80.0]


def test_alibaba_pai_headerless_dir_and_file() -> None:
    _pai_expect(*load_trace(FIX / "pai"))
    _pai_expect(*load_trace(FIX / "pai" / "pai_job_table.csv"))


def test_alibaba_pai_with_header(tmp_path: Path) -> None:
    from schedlab.sched.traces.alibaba_pai import JOB_COLUMNS, TASK_COLUMNS

    for name, cols in (("pai_job_table.csv", JOB_COLUMNS), ("pai_task_table.csv", TASK_COLUMNS)):
        body = (FIX / "pai" / name).read_text()
        (tmp_path / name).write_text(",".join(cols) + "\n" + body)
    _pai_expect(*load_trace(tmp_path, "alibaba-pai"))


def test_itp_fixture() -> None:
    df, rep = load_trace(FIX / "itp_small.csv")
    check_canonical(df, rep)
    assert rep.format == "itp" and rep.kept == 5
    assert df["submit_time"].tolist() == [0.0, 68556.0, 81912.0, 82108.0, 167975.0]
    assert df["num_gpus"].tolist() == [64, 1, 8, 1, 2]
    assert (df["vc"] == "itp_small").all()


def test_tiresias_fixture() -> None:
    df, rep = load_trace(FIX / "tiresias_small.csv")
    check_canonical(df, rep)
    assert rep.format == "tiresias" and rep.kept == 4
    assert df["model"].tolist() == ["vgg19", "vgg11", "inception4", "resnet50"]
    assert df["iterations"].tolist() == [500, 120, 160, 400]
    assert df["duration"].tolist() == [180.0, 150.0, 130.0, 110.0]


def test_canonical_csv_and_parquet_roundtrip(tmp_path: Path) -> None:
    df, rep = load_trace(FIX / "canonical_small.csv")
    check_canonical(df, rep)
    assert rep.format == "canonical"
    assert df["job_id"].tolist() == ["c1", "c3", "c2"]
    assert df["submit_time"].tolist() == [0.0, 30.0, 60.0]
    assert df["deadline"].iloc[0] == 300.0  # slack after submission kept
    assert df["fungible"].tolist() == [True, True, False]
    p = tmp_path / "t.parquet"
    df.to_parquet(p)
    again, rep2 = load_trace(p)
    assert rep2.format == "canonical"
    pd.testing.assert_frame_equal(again, df, check_dtype=False)


def test_canonical_workload_columns(tmp_path: Path) -> None:
    p = tmp_path / "w.csv"
    p.write_text("job_id,submit_time,num_gpus,model,batch_size,iterations\nx,5,2,resnet50,64,1000\n")
    df, rep = load_trace(p)
    check_canonical(df, rep)
    assert df.loc[0, "model"] == "resnet50" and df.loc[0, "iterations"] == 1000


def test_synthetic_default() -> None:
    df, rep = load_trace(None)
    check_canonical(df, rep)
    assert rep.format == "synthetic" and rep.read == 1000 == len(df)
    assert df["num_gpus"].max() <= 64
    assert (df["duration"] > 0).all()


@pytest.mark.parametrize("source", [FIX / "philly_small.csv", FIX / "helios_small.csv"])
def test_detect_format(source: Path) -> None:
    assert detect_format(source) in FORMATS


# ---------------------------------------------------------------- real files (skipped when absent)

needs_philly = pytest.mark.skipif(not PHILLY.is_file(), reason="real Philly trace absent")


@needs_philly
def test_real_philly() -> None:
    df, rep = load_trace(PHILLY)
    check_canonical(df, rep)
    assert rep.read == rep.kept == 82_247
    assert df["vc"].nunique() == 15
    assert df["num_gpus"].value_counts()[1] == 76_627


@needs_philly
def test_real_philly_options() -> None:
    day = 86_400.0
    df, rep = load_trace(PHILLY, options=LoadOptions(start=30 * day, end=37 * day, vcs=["6214e9"],
                                                     max_jobs=500, load=2.0, max_gpus=8,
                                                     on_oversize="drop"))
    check_canonical(df, rep)
    assert len(df) == 500 and (df["vc"] == "6214e9").all() and df["num_gpus"].max() <= 8
    assert df["submit_time"].max() <= 7 * day / 2.0
    assert rep.read == 82_247


# per-cluster job counts stated in ../shared/data/traces/itp/README.txt
ITP_ROWS = {1: 1595, 2: 5778, 3: 3011, 4: 15802, 5: 3629, 6: 2396, 7: 12699, 8: 13047, 9: 11134, 10: 260}


@pytest.mark.parametrize("n", sorted(ITP_ROWS))
def test_real_itp(n: int) -> None:
    path = DATA / "itp" / f"cluster{n:02d}.csv"
    if not path.is_file():
        pytest.skip(f"{path} absent")
    df, rep = load_trace(path)
    check_canonical(df, rep)
    assert rep.read == rep.kept == ITP_ROWS[n]
    assert (df["vc"] == f"cluster{n:02d}").all()


@pytest.mark.skipif(not (DATA / "tiresias" / "60_job.csv").is_file(), reason="Tiresias trace absent")
def test_real_tiresias() -> None:
    df, rep = load_trace(DATA / "tiresias" / "60_job.csv")
    check_canonical(df, rep)
    assert rep.format == "tiresias" and rep.kept == 60
    assert set(df["num_gpus"]) <= {1, 2, 4, 8}
