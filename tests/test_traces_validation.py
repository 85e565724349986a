"""Bad trace input: every case is a TraceError naming file, row and column, or a counted repair."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from schedlab.sched.traces import LoadOptions, TraceError, load_trace

FIX = Path(__file__).parent / "fixtures" / "traces"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
ITP_HEADER = "job_id,submission_time,duration,num_gpu\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def philly(tmp_path: Path, *rows: str) -> Path:
    return write(tmp_path, "philly.csv", PHILLY_HEADER + "".join(r + "\n" for r in rows))


def itp(tmp_path: Path, *rows: str) -> Path:
    return write(tmp_path, "itp.csv", ITP_HEADER + "".join(r + "\n" for r in rows))


def raises(path: Path, fmt: str | None, row: int | None, column: str | None, match: str | None = None,
           **opts) -> TraceError:
    with pytest.raises(TraceError, match=match) as info:
        load_trace(path, fmt, LoadOptions(**opts))
    err = info.value
    msg = str(err)
    assert str(path) in msg and err.file == str(path)
    if row is not None:
        assert f"row {row}" in msg and err.row == row
    if column is not None:
        assert f"column {column!r}" in msg and err.column == column
    return err


OK = "2017-10-01 00:00:00,60,1,60,vcA"


# ---------------------------------------------------------------- columns and values


def test_misspelled_column_is_named_with_suggestion(tmp_path: Path) -> None:
    p = write(tmp_path, "p.csv", "timestamp,duration,num_gpu,gpu_time,cluster\n" + OK + "\n")
    err = raises(p, "philly", None, "num_gpus", "missing column 'num_gpus'")
    assert "did you mean 'num_gpu'" in str(err)


def test_misspelled_column_autodetect_still_names_it(tmp_path: Path) -> None:
    p = write(tmp_path, "p.csv", "timestamp,duraton,num_gpus,gpu_time,cluster\n" + OK + "\n")
    raises(p, None, None, "duration", "did you mean 'duraton'")


def test_non_numeric_value(tmp_path: Path) -> None:
    p = philly(tmp_path, OK, OK, "2017-10-01 00:00:00,abc,1,60,vcA")
    raises(p, "philly", 3, "duration", "not a finite number.*'abc'")


def test_non_integer_gpus(tmp_path: Path) -> None:
    p = itp(tmp_path, "a,0,10,1", "b,5,10,1.5")
    raises(p, "itp", 2, "num_gpu", "not an integer")


def test_missing_value(tmp_path: Path) -> None:
    p = itp(tmp_path, "a,0,10,1", "b,5,10,")
    raises(p, "itp", 2, "num_gpu", "missing value")


def test_bad_datetime(tmp_path: Path) -> None:
    p = philly(tmp_path, OK, "yesterday,60,1,60,vcA")
    raises(p, "philly", 2, "timestamp", "not a datetime")


def test_row_numbers_count_blank_lines_as_in_file(tmp_path: Path) -> None:
    # data row 3 (line 4) is blank; the bad value is on data row 4 (line 5)
    p = write(tmp_path, "itp.csv", ITP_HEADER + "a,0,10,1\nb,1,10,1\n\nc,2,x,1\n")
    raises(p, "itp", 4, "duration")


def test_malformed_csv_names_file_row_and_field_count(tmp_path: Path) -> None:
    p = itp(tmp_path, "a,0,10,1", "b,1,10,1,9,9")
    err = raises(p, "itp", 2, None, "6 fields, but the header has 4 columns")
    assert "Expected" not in str(err) and "line" not in str(err)  # pandas' words, its line numbers


@pytest.mark.parametrize("rows", [("a,0,10,1,9", "b,1,10,1"), ("a,0,10,1,9", "b,1,10,1,9")])
def test_extra_field_in_first_row_is_an_error_not_an_index(tmp_path: Path, rows: tuple[str, str]) -> None:
    # pandas took the first column of such a file as its index: every value one column off, silently
    raises(itp(tmp_path, *rows), "itp", 1, None, "5 fields, but the header has 4 columns")


def test_extra_field_in_headerless_pai_file(tmp_path: Path) -> None:
    write(tmp_path, "pai_job_table.csv", "j1,x,u,Terminated,0,9\nj2,x,u,Terminated,0,9,extra\n")
    write(tmp_path, "pai_task_table.csv", "j1,worker,1,Terminated,0,50,600,29,100,V100\n")
    raises(tmp_path / "pai_job_table.csv", "alibaba-pai", 2, None, "7 fields, but 6 columns are expected")


def test_zero_gpus_is_an_error(tmp_path: Path) -> None:
    p = itp(tmp_path, "a,0,10,1", "b,1,10,0")
    raises(p, "itp", 2, "num_gpu", ">= 1")  # the file's own column name


# ---------------------------------------------------------------- bad durations


@pytest.mark.parametrize("value", ["0", "-5", ""])
def test_bad_duration_error_and_drop(tmp_path: Path, value: str) -> None:
    p = itp(tmp_path, "a,0,10,1", f"b,1,{value},1", "c,2,30,1")
    raises(p, "itp", 2, "duration", "duration must be > 0.*on_bad_duration")
    df, rep = load_trace(p, "itp", LoadOptions(on_bad_duration="drop"))
    assert df["job_id"].tolist() == ["a", "c"]
    assert rep.dropped == {"bad_duration": 1} and rep.read == 3 and rep.kept == 2


# ---------------------------------------------------------------- oversize


def test_oversize_error_drop_clip(tmp_path: Path) -> None:
    p = itp(tmp_path, "a,0,10,1", "b,1,10,128", "c,2,10,8")
    raises(p, "itp", 2, "num_gpu", "exceeds the cluster's 64 GPUs", max_gpus=64)
    df, rep = load_trace(p, "itp", LoadOptions(max_gpus=64, on_oversize="drop"))
    assert df["job_id"].tolist() == ["a", "c"] and rep.dropped == {"oversize": 1}
    df, rep = load_trace(p, "itp", LoadOptions(max_gpus=64, on_oversize="clip"))
    assert df["num_gpus"].tolist() == [1, 64, 8] and rep.repaired == {"oversize_clipped": 1}
    assert rep.dropped == {}


# ---------------------------------------------------------------- duplicates


def test_duplicate_id_error_drop_rename(tmp_path: Path) -> None:
    p = itp(tmp_path, "a,0,10,1", "b,1,10,1", "a,2,10,2", "a,3,10,4")
    err = raises(p, "itp", 3, "job_id", "duplicate job_id")
    assert "first seen in row 1" in str(err)
    df, rep = load_trace(p, "itp", LoadOptions(on_duplicate_id="drop"))
    assert df["job_id"].tolist() == ["a", "b"] and rep.dropped == {"duplicate_id": 2}
    df, rep = load_trace(p, "itp", LoadOptions(on_duplicate_id="rename"))
    assert df["job_id"].tolist() == ["a", "b", "a#1", "a#2"]
    assert df["num_gpus"].tolist() == [1, 1, 2, 4]
    assert rep.repaired == {"duplicate_id_renamed": 2} and rep.dropped == {}


# ---------------------------------------------------------------- unsorted


def test_unsorted_error_and_sort(tmp_path: Path) -> None:
    p = itp(tmp_path, "a,10,10,1", "b,20,10,1", "c,5,10,1", "d,30,10,1")
    raises(p, "itp", 3, "submission_time", "earlier than a previous row", on_unsorted="error")
    df, rep = load_trace(p, "itp")  # default: sort, counted
    assert df["job_id"].tolist() == ["c", "a", "b", "d"]
    assert df["submit_time"].tolist() == [0.0, 5.0, 15.0, 25.0]
    assert rep.repaired == {"unsorted_sorted": 1}


# ---------------------------------------------------------------- per-format structure


def test_pai_bad_task_value_names_task_file(tmp_path: Path) -> None:
    (tmp_path / "pai_job_table.csv").write_text((FIX / "pai" / "pai_job_table.csv").read_text())
    tasks = (FIX / "pai" / "pai_task_table.csv").read_text().splitlines()
    tasks[2] = tasks[2].replace("50.0", "fifty")
    task_file = write(tmp_path, "pai_task_table.csv", "\n".join(tasks) + "\n")
    with pytest.raises(TraceError) as info:
        load_trace(tmp_path, "alibaba-pai")
    assert info.value.file == str(task_file) and info.value.row == 3
    assert info.value.column == "plan_gpu" and "fifty" in str(info.value)


def test_pai_headerless_wrong_field_count(tmp_path: Path) -> None:
    (tmp_path / "pai_task_table.csv").write_text((FIX / "pai" / "pai_task_table.csv").read_text())
    p = write(tmp_path, "pai_job_table.csv", "job_a,1,u,Terminated,1.0\n")
    raises(p, "alibaba-pai", 1, None, "headerless file must have 6 fields")


def test_pai_missing_task_table(tmp_path: Path) -> None:
    p = write(tmp_path, "pai_job_table.csv", "job_a,1,u,Terminated,1.0,2.0\n")
    with pytest.raises(TraceError, match="pai_task_table"):
        load_trace(p)


def test_philly_raw_missing_key(tmp_path: Path) -> None:
    jobs = json.loads((FIX / "philly_raw_small.json").read_text())
    jobs[2]["submit_time"] = jobs[2].pop("submitted_time")
    p = write(tmp_path, "log.json", json.dumps(jobs))
    err = raises(p, None, 3, "submitted_time", "missing key")
    assert "did you mean 'submit_time'" in str(err)


def test_philly_raw_bad_time(tmp_path: Path) -> None:
    jobs = json.loads((FIX / "philly_raw_small.json").read_text())
    jobs[4]["attempts"][0]["start_time"] = "not a time"
    p = write(tmp_path, "log.json", json.dumps(jobs))
    raises(p, "philly-raw", 5, "start_time", "not a datetime")


def test_philly_raw_invalid_json(tmp_path: Path) -> None:
    p = write(tmp_path, "log.json", "[{]")
    raises(p, "philly-raw", None, None, "invalid JSON")


def test_canonical_unknown_column(tmp_path: Path) -> None:
    p = write(tmp_path, "c.csv", "job_id,submit_time,num_gpus,duration,deadlin\na,0,1,5,9\n")
    err = raises(p, "canonical", None, "deadlin", "unknown column")
    assert "did you mean 'deadline'" in str(err)


def test_canonical_needs_duration_or_workload(tmp_path: Path) -> None:
    p = write(tmp_path, "c.csv", "job_id,submit_time,num_gpus,model\na,0,1,resnet\n")
    raises(p, "canonical", None, "batch_size", "missing column")


def test_canonical_bad_boolean(tmp_path: Path) -> None:
    p = write(tmp_path, "c.csv", "job_id,submit_time,num_gpus,duration,fungible\na,0,1,5,true\nb,1,1,5,maybe\n")
    raises(p, "canonical", 2, "fungible", "not a boolean")


def test_helios_zero_duration(tmp_path: Path) -> None:
    lines = (FIX / "helios_small.csv").read_text().splitlines()
    lines[2] = re.sub(r",7200,60$", ",0,60", lines[2])
    p = write(tmp_path, "helios.csv", "\n".join(lines) + "\n")
    raises(p, "helios", 2, "duration")
    df, rep = load_trace(p, "helios", LoadOptions(on_bad_duration="drop"))
    assert rep.dropped == {"no_gpu": 1, "bad_duration": 1} and rep.kept == 3


# ---------------------------------------------------------------- format resolution


def test_unknown_header_lists_formats(tmp_path: Path) -> None:
    p = write(tmp_path, "x.csv", "foo,bar\n1,2\n")
    with pytest.raises(TraceError, match="cannot detect.*philly-raw.*synthetic"):
        load_trace(p)


def test_unknown_format_name() -> None:
    with pytest.raises(ValueError, match="unknown trace format 'nope'.*canonical"):
        load_trace(FIX / "itp_small.csv", "nope")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="file not found"):
        load_trace(tmp_path / "none.csv", "itp")
