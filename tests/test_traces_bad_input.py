"""Bad trace input found by the issue #13 probe: each defect is a clear TraceError (file, row, the
file's own column) or a correct reading, checked through the loaders and the ``replay`` CLI."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from schedlab.cli import main
from schedlab.sched.traces import LoadOptions, TraceError, load_trace

ITP_HEADER = "job_id,submission_time,duration,num_gpu\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def replay(tmp_path: Path, capsys: pytest.CaptureFixture, trace: Path, *args: str) -> tuple[int, str]:
    """Run ``schedlab replay`` (fifo) on ``trace``: (exit status, stdout + stderr)."""
    rc = main(["replay", "--trace", str(trace), "--policy", "fifo", "--no-progress",
               "--out", str(tmp_path / "out"), *args])
    out = capsys.readouterr()
    return rc, out.out + out.err


# ---------------------------------------------------------------- Parquet datetimes


def test_parquet_datetime_submit_time_is_seconds_as_in_csv(tmp_path: Path) -> None:
    times = ["2020-01-01 00:00:00", "2020-01-01 00:01:00", "2020-01-01 02:00:30"]
    frame = pd.DataFrame({"job_id": ["a", "b", "c"], "submit_time": times, "num_gpus": [1, 2, 1],
                          "duration": [10.0, 20.0, 30.0]})
    csv = tmp_path / "t.csv"
    frame.to_csv(csv, index=False)
    naive = tmp_path / "naive.parquet"
    frame.assign(submit_time=pd.to_datetime(times)).to_parquet(naive)
    aware = tmp_path / "aware.parquet"  # 01:00+01:00 is 00:00 UTC: the same instants
    frame.assign(submit_time=pd.to_datetime(times).tz_localize("UTC").tz_convert("Europe/Berlin")).to_parquet(aware)
    expected, _ = load_trace(csv, "canonical")
    assert expected["submit_time"].tolist() == [0.0, 60.0, 7230.0]
    for path in (naive, aware):
        df, _ = load_trace(path)
        pd.testing.assert_frame_equal(df, expected)


def test_parquet_datetime_deadline_and_timedelta_duration(tmp_path: Path) -> None:
    p = tmp_path / "t.parquet"
    pd.DataFrame({"job_id": ["a", "b"], "submit_time": pd.to_datetime(["2020-01-01 00:00", "2020-01-01 00:10"]),
                  "num_gpus": [1, 1], "duration": pd.to_timedelta([90, 120], unit="s"),
                  "deadline": pd.to_datetime(["2020-01-01 01:00", pd.NaT])}).to_parquet(p)
    df, _ = load_trace(p)
    assert df["submit_time"].tolist() == [0.0, 600.0] and df["duration"].tolist() == [90.0, 120.0]
    assert df["deadline"].iat[0] == 3600.0 and pd.isna(df["deadline"].iat[1])


def test_parquet_datetime_duration_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "t.parquet"
    pd.DataFrame({"job_id": ["a"], "submit_time": [0.0], "num_gpus": [1],
                  "duration": pd.to_datetime(["2020-01-01"])}).to_parquet(p)
    with pytest.raises(TraceError, match="column 'duration': a datetime column where a number"):
        load_trace(p)


def test_cli_parquet_datetime_trace(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    p = tmp_path / "t.parquet"
    pd.DataFrame({"job_id": ["a", "b"], "submit_time": pd.to_datetime(["2020-01-01 00:00", "2020-01-01 00:01"]),
                  "num_gpus": [1, 1], "duration": [10.0, 20.0]}).to_parquet(p)
    rc, _ = replay(tmp_path, capsys, p)
    assert rc == 0
    jobs = pd.read_parquet(tmp_path / "out" / "jobs.parquet")
    assert sorted(jobs["submit_time"].tolist()) == [0.0, 60.0]
