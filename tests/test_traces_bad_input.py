"""Bad trace input found by the issue #13 probe: each defect is a clear TraceError (file, row, the
file's own column) or a correct reading, checked through the loaders and the ``replay`` CLI."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
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
    """Run ``schedlab replay`` (fifo) on ``trace`` into a fresh ``tmp_path/out``: (exit status, output)."""
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
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


# ---------------------------------------------------------------- job ids pandas reads as missing

NA_IDS = ["NA", "NULL", "nan", "None", "n/a", "#N/A"]


def test_na_like_ids_are_ids_in_every_csv_format(tmp_path: Path) -> None:
    files = {
        "itp": ITP_HEADER + "".join(f"{i},{t},10,1\n" for t, i in enumerate(NA_IDS)),
        "tiresias": "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
        + "".join(f"{i},1,{t},5,None,10,0\n" for t, i in enumerate(NA_IDS)),
        "helios": "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
        + "".join(f"{i},NA,null,1,4,1,COMPLETED,{t},,,60,0\n" for t, i in enumerate(NA_IDS)),
        "canonical": "job_id,submit_time,num_gpus,duration,user,vc\n"
        + "".join(f"{i},{t},1,5,NA,None\n" for t, i in enumerate(NA_IDS)),
    }
    for fmt, text in files.items():
        df, rep = load_trace(write(tmp_path, f"{fmt}.csv", text), fmt)
        assert df["job_id"].tolist() == NA_IDS, fmt
        assert rep.kept == len(NA_IDS) and rep.dropped == {}
    assert df["user"].tolist() == ["NA"] * len(NA_IDS) and df["vc"].tolist() == ["None"] * len(NA_IDS)


def test_na_like_ids_in_pai_and_philly_raw_and_parquet(tmp_path: Path) -> None:
    write(tmp_path, "pai_job_table.csv", "".join(f"{i},x,u,Terminated,{t},9\n" for t, i in enumerate(NA_IDS)))
    write(tmp_path, "pai_task_table.csv",
          "".join(f"{i},worker,1,Terminated,{t},{t + 50},600,29,100,V100\n" for t, i in enumerate(NA_IDS)))
    df, _ = load_trace(tmp_path, "alibaba-pai")
    assert df["job_id"].tolist() == NA_IDS and df["duration"].tolist() == [50.0] * len(NA_IDS)
    job = {"vc": "v", "user": "u", "status": "Pass", "submitted_time": "2017-10-01 00:00:00",
           "attempts": [{"start_time": "2017-10-01 00:00:01", "end_time": "2017-10-01 00:10:00",
                         "detail": [{"ip": "x", "gpus": ["g0"]}]}]}
    raw = write(tmp_path, "log.json", json.dumps([{**job, "jobid": i} for i in NA_IDS]))
    df, _ = load_trace(raw, "philly-raw")
    assert sorted(df["job_id"]) == sorted(NA_IDS)
    pq = tmp_path / "t.parquet"
    pd.DataFrame({"job_id": NA_IDS, "submit_time": range(6), "num_gpus": 1, "duration": 5.0}).to_parquet(pq)
    assert load_trace(pq)[0]["job_id"].tolist() == NA_IDS


def test_na_like_ids_are_not_duplicates(tmp_path: Path) -> None:
    # "NA" and "nan" were both read as NaN: a duplicate (or a crash) though the ids differ
    p = write(tmp_path, "itp.csv", ITP_HEADER + "NA,0,10,1\nnan,1,10,1\n")
    assert load_trace(p, "itp")[0]["job_id"].tolist() == ["NA", "nan"]
    p = write(tmp_path, "dup.csv", ITP_HEADER + "NA,0,10,1\nNA,1,10,1\n")
    with pytest.raises(TraceError, match="row 2, column 'job_id': duplicate job_id.*first seen in row 1"):
        load_trace(p, "itp")


@pytest.mark.parametrize("value", ["", "  ", '""'])
def test_empty_id_is_an_error_naming_file_and_row(tmp_path: Path, value: str) -> None:
    p = write(tmp_path, "itp.csv", ITP_HEADER + f"a,0,10,1\n\n{value},1,10,1\n")
    with pytest.raises(TraceError, match=r"itp.csv, row 3, column 'job_id': missing job id") as info:
        load_trace(p, "itp")
    assert info.value.file == str(p) and info.value.row == 3


def test_null_id_in_parquet_and_philly_raw_is_an_error(tmp_path: Path) -> None:
    pq = tmp_path / "t.parquet"
    pd.DataFrame({"job_id": ["a", None], "submit_time": [0.0, 1.0], "num_gpus": 1, "duration": 5.0}).to_parquet(pq)
    with pytest.raises(TraceError, match="row 2, column 'job_id': missing job id"):
        load_trace(pq)
    raw = write(tmp_path, "log.json", json.dumps([{"jobid": None, "submitted_time": "2017-10-01", "attempts": []}]))
    with pytest.raises(TraceError, match="row 1, column 'jobid': missing job id"):
        load_trace(raw)


def test_cli_na_like_ids(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    p = write(tmp_path, "itp.csv", ITP_HEADER + "NA,0,10,1\nNULL,1,10,1\nnan,2,10,1\nNone,3,10,1\n")
    rc, _ = replay(tmp_path, capsys, p)
    assert rc == 0
    assert sorted(pd.read_parquet(tmp_path / "out" / "jobs.parquet")["job_id"]) == ["NA", "NULL", "None", "nan"]
    rc, out = replay(tmp_path, capsys, write(tmp_path, "e.csv", ITP_HEADER + "a,0,10,1\n,1,10,1\n"))
    assert rc == 2 and "e.csv, row 2, column 'job_id': missing job id" in out and "Traceback" not in out


# ---------------------------------------------------------------- nothing left to replay

PHILLY = Path(__file__).parent / "fixtures" / "traces" / "philly_small.csv"  # VCs vcA, vcB, vcC; 0-7200 s


@pytest.mark.parametrize(
    ("source", "opts", "why"),
    [
        ("header", {}, "the file has no jobs"),
        ("philly", {"vcs": ["nope"]}, r"\(vc_filter: 6\); no job is in VC 'nope'; VCs in the file: \['vcA', 'vcB', 'vcC'\]"),
        ("philly", {"start": 8000}, r"no job is submitted in the window \[8000, end\) s; submit times span 0 to 7200 s"),
        ("philly", {"vcs": ["vcC"], "start": 4000}, r"every job read \(6\) was dropped \(outside_window: 4, vc_filter: 2\)$"),
    ],
)
def test_no_job_left_is_an_error_naming_why(tmp_path: Path, source: str, opts: dict, why: str) -> None:
    path = write(tmp_path, "h.csv", ITP_HEADER) if source == "header" else PHILLY
    with pytest.raises(TraceError, match=why) as info:
        load_trace(path, None, LoadOptions(**opts))
    assert str(info.value).startswith(f"{path}: no job")


def test_no_job_left_after_format_drops(tmp_path: Path) -> None:
    p = write(tmp_path, "h.csv", "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,"
              "end_time,duration,queue\nj1,u,v,0,4,1,COMPLETED,0,,,60,0\n")
    with pytest.raises(TraceError, match=r"every job read \(1\) was dropped \(no_gpu: 1\)"):
        load_trace(p, "helios")


@pytest.mark.parametrize("args", [["--vc", "nope"], ["--start", "9000"], ["--header-only"]])
def test_cli_empty_result_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str]) -> None:
    trace = PHILLY
    if args == ["--header-only"]:
        trace, args = write(tmp_path, "h.csv", ITP_HEADER), []
    rc, out = replay(tmp_path, capsys, trace, *args)
    assert rc == 2 and "no job" in out and "nan" not in out and "Traceback" not in out
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- unreadable files


def test_latin1_file_is_an_error_naming_encoding_and_row(tmp_path: Path) -> None:
    p = tmp_path / "itp.csv"
    p.write_bytes((ITP_HEADER + "a,0,10,1\nb,1,10,1\nJos\xe9,2,10,1\n").encode("latin-1"))
    for fmt in ("itp", None):
        with pytest.raises(TraceError, match=r"row 3: not UTF-8 text: byte 0xe9 on line 4.*re-encode") as info:
            load_trace(p, fmt)
        assert info.value.file == str(p)
    header = tmp_path / "h.csv"  # the bad byte in the header line: no data row to name
    header.write_bytes("job_id,submission_time,duration,num_gpu\xe9\n".encode("latin-1"))
    with pytest.raises(TraceError, match=r"h.csv: not UTF-8 text: byte 0xe9 on line 1"):
        load_trace(header, "itp")
    raw = tmp_path / "log.json"
    raw.write_bytes('[{"jobid": "Jos\xe9"}]'.encode("latin-1"))
    with pytest.raises(TraceError, match=r"log.json: not UTF-8 text: byte 0xe9 on line 1"):
        load_trace(raw, "philly-raw")


def test_utf8_with_byte_order_mark_reads(tmp_path: Path) -> None:
    p = tmp_path / "itp.csv"
    p.write_bytes(b"\xef\xbb\xbf" + (ITP_HEADER + "a,0,10,1\n").encode())
    for fmt in ("itp", None):
        assert load_trace(p, fmt)[0]["job_id"].tolist() == ["a"]


def test_directory_and_not_parquet_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(TraceError, match="d.csv: is a directory, not a trace file"):
        load_trace(tmp_path / "d.csv", "itp")
    bad = tmp_path / "t.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(TraceError, match="t.parquet: not a readable Parquet file"):
        load_trace(bad)


def test_cli_unreadable_file_exits_2_without_traceback(tmp_path: Path) -> None:
    """A file the user may not read: exit 2 naming it (root reads everything, so as root the
    command runs without the capability that bypasses file permissions, where capsh exists)."""
    p = write(tmp_path, "itp.csv", ITP_HEADER + "a,0,10,1\n")
    p.chmod(0)
    cmd = [sys.executable, "-m", "schedlab.cli", "replay", "--trace", str(p), "--format", "itp",
           "--policy", "fifo", "--no-progress", "--out", str(tmp_path / "out")]
    if os.geteuid() == 0:
        if not shutil.which("capsh"):
            pytest.skip("running as root without capsh: every file is readable")
        cmd = ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--", "-c", shlex.join(cmd)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"{p}: cannot read the file: Permission denied" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["latin", "dir", "parquet"])
def test_cli_unreadable_inputs_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture, name: str) -> None:
    if name == "latin":
        trace = tmp_path / "itp.csv"
        trace.write_bytes((ITP_HEADER + "Jos\xe9,0,10,1\n").encode("latin-1"))
    elif name == "dir":
        trace = tmp_path / "d.csv"
        trace.mkdir()
    else:
        trace = write(tmp_path, "t.parquet", "junk")
    rc, out = replay(tmp_path, capsys, trace, *(["--format", "itp"] if name == "dir" else []))
    assert rc == 2 and str(trace) in out and "Traceback" not in out


# ---------------------------------------------------------------- malformed philly-raw attempts

RAW_JOB = {"jobid": "j", "vc": "v", "user": "u", "status": "Pass", "submitted_time": "2017-10-01 00:00:00"}
GOOD_ATTEMPT = {"start_time": "2017-10-01 00:00:01", "end_time": "2017-10-01 00:10:00",
                "detail": [{"ip": "x", "gpus": ["g0"]}]}


@pytest.mark.parametrize(
    ("attempts", "match"),
    [
        ([1, 2], "attempt 1 is not a JSON object"),
        ([GOOD_ATTEMPT, 5], "attempt 2 is not a JSON object"),
        ([GOOD_ATTEMPT, "x"], "attempt 2 is not a JSON object"),
        ("x", "attempts must be a list"),
        ([{**GOOD_ATTEMPT, "detail": "abc"}], "attempt detail must be a list"),
        ([{**GOOD_ATTEMPT, "detail": [{"ip": "x", "gpus": "abc"}]}], "attempt detail must be a list"),  # not 3 GPUs
        ([{**GOOD_ATTEMPT, "detail": [{"ip": "x", "gpus": None}]}], "attempt detail must be a list"),
        ([{**GOOD_ATTEMPT, "detail": ["x"]}], "attempt detail must be a list"),
    ],
)
def test_philly_raw_malformed_attempts(tmp_path: Path, attempts: object, match: str) -> None:
    p = write(tmp_path, "log.json", json.dumps([{**RAW_JOB, "attempts": [GOOD_ATTEMPT]},
                                                {**RAW_JOB, "jobid": "k", "attempts": attempts}]))
    with pytest.raises(TraceError, match=f"log.json, row 2, column 'attempts': {match}"):
        load_trace(p, "philly-raw")


def test_cli_philly_raw_malformed_attempts_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    p = write(tmp_path, "log.json", json.dumps([{**RAW_JOB, "attempts": [GOOD_ATTEMPT, 7]}]))
    rc, out = replay(tmp_path, capsys, p)
    assert rc == 2 and "row 1, column 'attempts': attempt 2 is not a JSON object" in out
    assert "Traceback" not in out


# ---------------------------------------------------------------- the file's own names, the user's own options

HELIOS_HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"


@pytest.mark.parametrize(
    ("name", "text", "fmt", "column", "opts"),
    [
        ("h.csv", HELIOS_HEADER + "j1,u,v,-1,4,1,DONE,0,,,60,0\n", "helios", "gpu_num", {}),
        ("h.csv", HELIOS_HEADER + "j1,u,v,9,4,1,DONE,0,,,60,0\n", "helios", "gpu_num", {"max_gpus": 8}),
        ("i.csv", ITP_HEADER + "a,5,10,1\nb,1,10,1\n", "itp", "submission_time", {"on_unsorted": "error"}),
        ("i.csv", ITP_HEADER + "a,0,10,1\na,1,10,1\n", "itp", "job_id", {}),
        ("t.csv", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,0,0,5,vgg,10,0\n",
         "tiresias", "num_gpu", {}),
        ("p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:10:00,60,1,60,a\n"
         "2017-10-01 00:00:00,60,1,60,a\n", "philly", "timestamp", {"on_unsorted": "error"}),
    ],
)
def test_errors_name_the_files_own_column(tmp_path: Path, name: str, text: str, fmt: str, column: str,
                                          opts: dict) -> None:
    with pytest.raises(TraceError) as info:
        load_trace(write(tmp_path, name, text), fmt, LoadOptions(**opts))
    assert info.value.column == column and f"column {column!r}" in str(info.value)
    assert "np." not in str(info.value)  # values as written (5), not numpy reprs (np.int64(5))


def test_hint_names_python_option_in_api_and_flag_in_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    unknown = write(tmp_path, "x.csv", "foo,bar\n1,2\n")
    with pytest.raises(TraceError, match=r"cannot detect the trace format .*; pass fmt=one of \['philly'"):
        load_trace(unknown)
    rc, out = replay(tmp_path, capsys, unknown)
    assert rc == 2 and "pass --format one of philly, philly-raw" in out and "fmt=" not in out
    cases = {
        "dup.csv": (ITP_HEADER + "a,0,10,1\na,1,10,1\n", "pass --on-duplicate-id drop or rename"),
        "bad.csv": (ITP_HEADER + "a,0,10,1\nb,1,0,1\n", "pass --on-bad-duration drop to drop such jobs (value 0.0)"),
        "big.csv": (ITP_HEADER + "a,0,10,100000\n", "column 'num_gpu': demand exceeds the cluster's 128 GPUs; "
                    "pass --on-oversize drop or clip (value 100000)"),
    }
    for name, (text, expected) in cases.items():
        rc, out = replay(tmp_path, capsys, write(tmp_path, name, text), "--cluster", "16x8")
        assert rc == 2 and expected in out and "='drop'" not in out, out
    rc, out = replay(tmp_path, capsys, write(tmp_path, "u.csv", ITP_HEADER + "a,5,10,1\nb,1,10,1\n"),
                     "--on-unsorted", "error")
    assert rc == 2 and "column 'submission_time'" in out and "pass --on-unsorted sort to sort" in out


# ---------------------------------------------------------------- overflowing integers


@pytest.mark.parametrize("value", ["1e308", "99999999999999999999", "-1e19", "1e18"])
def test_overflowing_integer_is_reported_as_written(tmp_path: Path, value: str) -> None:
    # read as -9223372036854775808 (int64 wrap-around) and reported as "must be >= 1" before
    p = write(tmp_path, "i.csv", ITP_HEADER + f"a,0,10,1\nb,1,10,{value}\n")
    with pytest.raises(TraceError, match=rf"row 2, column 'num_gpu': integer out of range .*\(value '{value}'\)"):
        load_trace(p, "itp")


def test_largest_exact_integer_is_kept(tmp_path: Path) -> None:
    p = write(tmp_path, "i.csv", ITP_HEADER + f"a,0,10,{2**53}\n")
    assert load_trace(p, "itp")[0]["num_gpus"].tolist() == [2**53]


def test_pai_overflowing_gpu_demand(tmp_path: Path) -> None:
    write(tmp_path, "pai_job_table.csv", "j1,x,u,Terminated,0,9\n")
    tasks = write(tmp_path, "pai_task_table.csv", "j1,worker,1000,Terminated,0,50,600,29,1e300,V100\n")
    with pytest.raises(TraceError, match="GPU demand of job 'j1'.*out of range") as info:
        load_trace(tmp_path, "alibaba-pai")
    assert info.value.file == str(tasks) and info.value.column == "plan_gpu"


def test_cli_overflowing_gpus(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, out = replay(tmp_path, capsys, write(tmp_path, "i.csv", ITP_HEADER + "a,0,10,1e308\n"))
    assert rc == 2 and "column 'num_gpu': integer out of range" in out and "-9223372036854775808" not in out


# ---------------------------------------------------------------- mixed time zones and forms

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def philly(tmp_path: Path, *times: str) -> Path:
    return write(tmp_path, "p.csv", PHILLY_HEADER + "".join(f"{t},60,1,60,vcA\n" for t in times))


def test_times_with_different_offsets_are_converted_to_utc(tmp_path: Path) -> None:
    df, _ = load_trace(philly(tmp_path, "2017-10-01 00:00:00+02:00", "2017-10-01T00:00:00Z",
                              "2017-10-01 00:30:00-00:30"), "philly")
    assert df["submit_time"].tolist() == [0.0, 7200.0, 10800.0]


@pytest.mark.parametrize(
    ("times", "row", "match"),
    [
        (["2017-10-01 00:00:00+02:00", "2017-10-01 00:00:00"], 2, "a time without a UTC offset among times with one"),
        (["2017-10-01 00:00:00", "2017-10-01 00:00:00", "2017-10-01 01:00:00Z"], 3,
         "a time with a UTC offset among times without one"),
        (["2017-10-01 00:00:00", "1500"], 2, "a number among datetimes"),
        (["2017-10-01 00:00:00", "1.5", "2017-10-01 00:00:00"], 2, "a number among datetimes"),
    ],
)
def test_mixed_time_zones_or_forms_are_an_error(tmp_path: Path, times: list[str], row: int, match: str) -> None:
    p = philly(tmp_path, *times)
    with pytest.raises(TraceError, match=match) as info:
        load_trace(p, "philly")
    assert info.value.row == row and info.value.column == "timestamp" and info.value.file == str(p)


def test_philly_raw_numbers_and_datetimes_across_time_fields(tmp_path: Path) -> None:
    job = {**RAW_JOB, "attempts": [{**GOOD_ATTEMPT, "start_time": 1.5}]}  # 1.5 s and a 2017 end
    with pytest.raises(TraceError, match="column 'start_time': start_time holds numbers of seconds but "
                       "submitted_time datetimes"):
        load_trace(write(tmp_path, "log.json", json.dumps([job])), "philly-raw")


def test_cli_mixed_time_zones(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, out = replay(tmp_path, capsys, philly(tmp_path, "2017-10-01 00:00:00+02:00", "2017-10-01 00:00:00"))
    assert rc == 2 and "row 2, column 'timestamp': a time without a UTC offset" in out
    assert "Mixed timezones" not in out and "utc=True" not in out


# ---------------------------------------------------------------- implausible values


@pytest.mark.parametrize(
    ("row", "column", "value"),
    [
        ("b,1e308,10,1", "submission_time", "1e+308"),
        ("b,1700000000000,10,1", "submission_time", "1700000000000.0"),  # milliseconds, not seconds
        ("b,1,1e308,1", "duration", "1e+308"),
        ("b,1,2e10,1", "duration", "20000000000.0"),
    ],
)
def test_implausible_times_are_errors(tmp_path: Path, row: str, column: str, value: str) -> None:
    p = write(tmp_path, "i.csv", ITP_HEADER + "a,0,10,1\n" + row + "\n")
    with pytest.raises(TraceError, match=rf"i.csv, row 2, column '{column}': implausible .*\(value {re.escape(value)}\)"):
        load_trace(p, "itp", LoadOptions(on_bad_duration="drop"))


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "NaN"])
def test_non_finite_submit_time_is_an_error(tmp_path: Path, value: str) -> None:
    p = write(tmp_path, "i.csv", ITP_HEADER + f"a,0,10,1\nb,{value},10,1\n")
    with pytest.raises(TraceError, match=r"row 2, column 'submission_time': (not a finite number|missing value)"):
        load_trace(p, "itp")


def test_implausible_parquet_values(tmp_path: Path) -> None:
    base = {"job_id": ["a", "b"], "submit_time": [0.0, 1.0], "num_gpus": [1, 1], "duration": [1.0, 1.0]}
    for column, value in [("submit_time", 1e300), ("submit_time", float("inf")), ("duration", float("inf")),
                          ("deadline", -1e11)]:
        p = tmp_path / "t.parquet"
        pd.DataFrame({**base, "deadline": [5.0, float("nan")], column: [base.get(column, [5.0])[0], value]}).to_parquet(p)
        with pytest.raises(TraceError, match=rf"row 2, column '{column}': (implausible|not a finite)"):
            load_trace(p)


def test_plausible_extremes_are_kept(tmp_path: Path) -> None:
    # a Unix time in 2262 (pandas' last datetime) and a 100-year job are odd but readable
    p = write(tmp_path, "i.csv", ITP_HEADER + "a,9200000000,3153600000,1\n")
    assert load_trace(p, "itp")[0]["duration"].tolist() == [3153600000.0]


def test_cli_implausible_submit_time(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, out = replay(tmp_path, capsys, write(tmp_path, "i.csv", ITP_HEADER + "a,0,10,1\nb,1e308,10,1\n"))
    assert rc == 2 and "row 2, column 'submission_time': implausible submit time" in out


def test_pollux_na_like_names_are_ids(tmp_path: Path) -> None:
    header = "name,time,application,num_replicas,batch_size\n"
    p = write(tmp_path, "w.csv", header + "".join(f"{i},{t},toy,1,8\n" for t, i in enumerate(NA_IDS)))
    assert load_trace(p, "pollux")[0]["job_id"].tolist() == NA_IDS
    p = write(tmp_path, "e.csv", header + "a,0,toy,1,8\n,1,toy,1,8\n")
    with pytest.raises(TraceError, match="e.csv, row 2, column 'name': missing job id"):
        load_trace(p, "pollux")
    p = write(tmp_path, "d.csv", header + "a,5,toy,1,8\nb,1,toy,1,8\n")
    with pytest.raises(TraceError, match="row 2, column 'time': submit time is earlier"):  # the file's column
        load_trace(p, "pollux", LoadOptions(on_unsorted="error"))


# ---------------------------------------------------------------- issue #30: the held-out probe's defects

CANONICAL_HEADER = "job_id,submit_time,num_gpus,duration\n"


@pytest.mark.parametrize(
    ("name", "text", "row", "match"),
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000, None, "invalid JSON: nested too deeply to parse"),
        ("deep.jsonl", json.dumps({**RAW_JOB, "attempts": []}) + "\n\n" + "[" * 100_000 + "]" * 100_000 + "\n",
         2, "invalid JSON: nested too deeply to parse"),
        ("long.json", "[" + "1" * 5000 + "]", None, "invalid JSON: .*4300"),  # a ValueError, not a JSONDecodeError
        ("bad.jsonl", json.dumps({**RAW_JOB, "attempts": []}) + "\n{\"jobid\": \n", 2, "invalid JSON: Expecting value"),
    ],
)
def test_philly_raw_parser_errors_name_the_file(tmp_path: Path, name: str, text: str, row: int | None,
                                                match: str) -> None:
    p = write(tmp_path, name, text)
    with pytest.raises(TraceError, match=match) as info:
        load_trace(p, "philly-raw")
    assert (info.value.file, info.value.row) == (str(p), row)


def test_cli_deeply_nested_json_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, out = replay(tmp_path, capsys, write(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000))
    assert rc == 2 and "deep.json: invalid JSON: nested too deeply" in out and "RecursionError" not in out


@pytest.mark.parametrize(
    ("name", "text", "fmt", "row", "column"),
    [
        ("c.csv", CANONICAL_HEADER + "a,0,1,10\nb,-50,1,10\n", "canonical", 2, "submit_time"),
        ("i.csv", ITP_HEADER + "a,-1,10,1\n", "itp", 1, "submission_time"),
        ("p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n1969-12-31 23:59:00,60,1,60,a\n", "philly", 1,
         "timestamp"),
        ("w.csv", "name,time,application,num_replicas,batch_size\na,-5,toy,1,8\n", "pollux", 1, "time"),
    ],
)
def test_negative_submit_time_is_an_error(tmp_path: Path, name: str, text: str, fmt: str, row: int,
                                          column: str) -> None:
    # it was rebased to 0 with every other job shifted, and counted nowhere
    p = write(tmp_path, name, text)
    with pytest.raises(TraceError, match="negative submit time") as info:
        load_trace(p, fmt)
    assert (info.value.file, info.value.row, info.value.column) == (str(p), row, column)


def test_negative_submit_time_outside_a_streamed_window_is_an_error(tmp_path: Path) -> None:
    p = write(tmp_path, "c.csv", CANONICAL_HEADER + "".join(f"j{i},{i},1,10\n" for i in range(10)) + "k,-3,1,10\n")
    for opts in ({"max_jobs": 2}, {"start": 0, "end": 5}):
        with pytest.raises(TraceError, match="row 11, column 'submit_time': negative submit time"):
            load_trace(p, "canonical", LoadOptions(**opts))


def test_cli_negative_submit_time_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, out = replay(tmp_path, capsys, write(tmp_path, "c.csv", CANONICAL_HEADER + "a,0,1,10\nb,-50,1,10\n"))
    assert rc == 2 and "c.csv, row 2, column 'submit_time': negative submit time" in out and "(value -50.0)" in out


@pytest.mark.parametrize(("task", "column"), [("j2,worker,1,Terminated,0,50,600,29,-50,V100", "plan_gpu"),
                                              ("j2,worker,-2,Terminated,0,50,600,29,100,V100", "inst_num")])
def test_pai_negative_gpu_demand_is_an_error_not_a_drop(tmp_path: Path, task: str, column: str) -> None:
    write(tmp_path, "pai_job_table.csv", "j1,x,u,Terminated,0,9\nj2,x,u,Terminated,1,9\n")
    tasks = write(tmp_path, "pai_task_table.csv", f"j1,worker,1,Terminated,0,50,600,29,100,V100\n{task}\n")
    with pytest.raises(TraceError, match="must be >= 0") as info:
        load_trace(tmp_path, "alibaba-pai")
    assert (info.value.file, info.value.row, info.value.column) == (str(tasks), 2, column)


WORKLOAD_HEADER = "job_id,submit_time,num_gpus,model,batch_size,iterations\n"


def test_unknown_model_in_workload_trace_names_file_row_and_models(tmp_path: Path) -> None:
    from schedlab.sched.core.cluster import load_cluster
    from helpers import prepared_table

    # row 2 is submitted first: the table's first job, named by its row in the file
    p = write(tmp_path, "w.csv", WORKLOAD_HEADER + "a,9,1,bert,8,100\nb,0,1,nosuch,8,100\n")
    table, report = load_trace(p)
    with pytest.raises(TraceError) as info:
        prepared_table(table, load_cluster("16x8"), report=report)
    err = info.value
    assert (err.file, err.row, err.column, err.value, err.job) == (str(p), 2, "model", "nosuch", "b")
    assert "unknown model; the catalog's models: bert, cifar10," in str(err)
    # a catalog model with no published parameters was a KeyError too
    p = write(tmp_path, "g.csv", WORKLOAD_HEADER + "a,0,1,gpt,8,100\n")
    table, report = load_trace(p)
    with pytest.raises(TraceError, match=r"g.csv, row 1 \(job 'a'\), column 'model': catalog entry 'gpt' has no "
                       "published parameters"):
        prepared_table(table, load_cluster("16x8"), report=report)


def test_cli_unknown_model_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc, out = replay(tmp_path, capsys, write(tmp_path, "w.csv", WORKLOAD_HEADER + "a,0,1,nosuch,8,100\n"))
    assert rc == 2 and "Traceback" not in out and "KeyError" not in out
    assert "w.csv, row 1 (job 'a'), column 'model': unknown model; the catalog's models: bert" in out
    assert "(value 'nosuch')" in out


def test_cli_annotate_names_the_file_and_its_row(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # tiresias names the column model_name; row 3 is submitted first (the table's row 1, "row 0" before)
    p = write(tmp_path, "t.csv", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
              "a,1,5,10,bert,60,0\nb,1,6,10,bert,60,0\nc,1,0,10,vgg99,60,0\n")
    rc, out = replay(tmp_path, capsys, p, "--annotate")
    assert rc == 2 and f"{p}, row 3 (job 'c'), column 'model_name': unknown model" in out


def test_cli_extra_field_names_row_and_field_count(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    p = write(tmp_path, "c.csv", CANONICAL_HEADER + "a,0,1,10\nb,1,1,10\nc,2,1,10\nd,3,1,10,7\n")
    rc, out = replay(tmp_path, capsys, p)
    assert rc == 2 and "c.csv, row 4: 5 fields, but the header has 4 columns" in out and "Expected" not in out


def _special(tmp_path: Path, kind: str) -> Path:
    """A path that is not a regular file: a FIFO, a device, a symlink loop, a dangling symlink."""
    path = tmp_path / "t.csv"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        return Path("/dev/null")
    elif kind == "loop":
        path.symlink_to(tmp_path / "u.csv")
        (tmp_path / "u.csv").symlink_to(path)
    else:
        path.symlink_to(tmp_path / "gone.csv")
    return path


SPECIAL = {"fifo": "is a pipe (FIFO), not a regular file", "device": "is a character device, not a regular file",
           "loop": "a symbolic link loop", "dangling": "a symbolic link to a missing file"}


@pytest.mark.parametrize("kind", SPECIAL)
def test_special_files_are_named_for_what_they_are(tmp_path: Path, capsys: pytest.CaptureFixture, kind: str) -> None:
    path = _special(tmp_path, kind)
    for fmt in ("canonical", None):
        with pytest.raises(TraceError) as info:
            load_trace(path, fmt)
        assert str(info.value).startswith(f"{path}: {SPECIAL[kind]}") and "not found" not in str(info.value)
    rc, out = replay(tmp_path, capsys, path)
    assert rc == 2 and f"--trace {path}: {SPECIAL[kind]}" in out and "no such file" not in out


@pytest.mark.parametrize(("compress", "kind"), [(gzip.compress, "gzip"), (bz2.compress, "bzip2"),
                                                 (lzma.compress, "xz")])
def test_compressed_file_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture,
                                          compress: Callable[[bytes], bytes], kind: str) -> None:
    p = tmp_path / "c.csv"
    p.write_bytes(compress((CANONICAL_HEADER + "a,0,1,10\n").encode()))
    for fmt in ("canonical", None):
        with pytest.raises(TraceError, match=rf"^{re.escape(str(p))}: a {kind}-compressed file, not text: "
                           "decompress it first") as info:
            load_trace(p, fmt)
        assert "latin" not in str(info.value)
    rc, out = replay(tmp_path, capsys, p)
    assert rc == 2 and f"a {kind}-compressed file" in out
