"""Streamed reads (``schedlab.sched.traces.stream``): a window or ``max_jobs`` reads only the rows it
needs, and gives the whole-file read's table, counts and errors, except as documented there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from schedlab.sched.traces import LoadOptions, LoadReport, TraceError, load_trace
from schedlab.sched.traces import canonical, helios, itp, philly, stream, tiresias
from schedlab.sched.traces.common import finalize
from helpers import SHARED_DATA

FIX = Path(__file__).parent / "fixtures" / "traces"
READERS = {"philly": philly.read, "helios": helios.read, "itp": itp.read, "tiresias": tiresias.read,
           "canonical": canonical.read}
SELECTED_OUT = ("outside_window", "max_jobs")  # the reasons rows left unread are counted under


def whole(path: Path, fmt: str, opts: LoadOptions) -> tuple[pd.DataFrame, LoadReport]:
    """The whole-file read: every row parsed, then filtered."""
    return finalize(READERS[fmt](path, opts), fmt, opts)


def same(path: Path, fmt: str, opts: LoadOptions) -> tuple[LoadReport, LoadReport]:
    """Streamed and whole reads give the same table, read and kept counts and unsorted repairs; rows
    left unread are counted as outside_window or max_jobs instead of a reason only their other columns
    show, and are not counted as repaired (clipped, renamed)."""
    table, report = load_trace(path, fmt, opts)
    wtable, wreport = whole(path, fmt, opts)
    pd.testing.assert_frame_equal(table, wtable, check_exact=True)
    assert (report.read, report.kept) == (wreport.read, wreport.kept)
    assert report.repaired.get("unsorted_sorted") == wreport.repaired.get("unsorted_sorted")
    for reason, n in report.repaired.items():
        assert n <= wreport.repaired[reason], (reason, report.repaired, wreport.repaired)
    assert sum(report.dropped.values()) == sum(wreport.dropped.values())
    for reason, n in report.dropped.items():
        if reason not in SELECTED_OUT:
            assert n <= wreport.dropped.get(reason, 0), (reason, report.dropped, wreport.dropped)
    if opts.max_jobs is None and fmt != "helios":  # a window alone: the same counts, reason by reason
        assert (report.dropped, report.repaired) == (wreport.dropped, wreport.repaired)
    return report, wreport


FIXTURES = [("philly", "philly_small.csv"), ("helios", "helios_small.csv"), ("itp", "itp_small.csv"),
            ("tiresias", "tiresias_small.csv"), ("canonical", "canonical_small.csv")]
OPTIONS = [{"max_jobs": 1}, {"max_jobs": 2}, {"max_jobs": 3}, {"max_jobs": 99}, {"start": 60},
           {"end": 1800}, {"start": 30, "end": 100_000}, {"start": 30, "max_jobs": 2},
           {"max_jobs": 2, "on_bad_duration": "drop", "max_gpus": 4, "on_oversize": "drop"},
           {"max_jobs": 1, "max_gpus": 2, "on_oversize": "clip"}]


@pytest.mark.parametrize(("fmt", "name"), FIXTURES)
@pytest.mark.parametrize("opts", OPTIONS, ids=str)
def test_fixtures_stream_as_whole_reads(fmt: str, name: str, opts: dict) -> None:
    try:
        expected = whole(FIX / name, fmt, LoadOptions(**opts))
    except TraceError as exc:  # nothing left, or an error among the rows read: the same error
        with pytest.raises(TraceError) as info:
            load_trace(FIX / name, fmt, LoadOptions(**opts))
        assert str(info.value) == str(exc)
        return
    assert expected
    same(FIX / name, fmt, LoadOptions(**opts))


def test_unread_rows_are_counted_by_their_selection_reason() -> None:
    # helios j3 (no GPU) is submitted at 120 s: a window from 600 s never reads its GPU count
    report, wreport = same(FIX / "helios_small.csv", "helios", LoadOptions(start=600))
    assert wreport.dropped == {"no_gpu": 1, "outside_window": 2}
    assert report.dropped == {"outside_window": 3}
    # the only vcC job is 4th in submit order: max_jobs reads 1 row, then 2, then 4
    report, wreport = same(FIX / "philly_small.csv", "philly", LoadOptions(vcs=["vcC"], max_jobs=1))
    assert wreport.dropped == {"vc_filter": 5}
    assert report.dropped == {"vc_filter": 3, "max_jobs": 2}
    # repairs are counted for the rows read: the whole read clips 2 jobs, of which 1 is among the first 2
    report, wreport = same(FIX / "philly_small.csv", "philly", LoadOptions(max_gpus=2, on_oversize="clip",
                                                                          max_jobs=2))
    assert wreport.repaired == {"unsorted_sorted": 2, "oversize_clipped": 2}
    assert report.repaired == {"unsorted_sorted": 2, "oversize_clipped": 1}


# ---------------------------------------------------------------- a larger, unsorted file


def _big(path: Path, n: int = 2000, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "job_id": [f"j{i}" for i in rng.permutation(n)],
        "submit_time": rng.integers(0, n // 4, n).astype(float),  # unsorted, many ties
        "num_gpus": rng.choice([1, 2, 4, 8, 16], n),
        "duration": rng.choice([0.0, 10.0, 60.0, 3600.0], n, p=[0.05, 0.3, 0.35, 0.3]),
        "vc": rng.choice(["a", "b", "c", "rare"], n, p=[0.4, 0.3, 0.29, 0.01]),
    })
    df.loc[rng.choice(n, 40, replace=False), "job_id"] = "dup"
    df.to_csv(path, index=False)
    return df


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks and spans far smaller than the file, so that scan and reads cross their borders."""
    monkeypatch.setattr(stream, "CHUNK", 333)
    monkeypatch.setattr(stream, "GAP", 150)


BIG_OPTIONS = [
    {"max_jobs": 1}, {"max_jobs": 50}, {"max_jobs": 1999}, {"start": 100, "end": 400}, {"start": 490},
    {"start": 100, "max_jobs": 70}, {"vcs": ["rare"], "max_jobs": 5}, {"vcs": ["rare", "a"], "end": 500},
    {"max_jobs": 300, "max_gpus": 4, "on_oversize": "drop"}, {"max_jobs": 300, "max_gpus": 4, "on_oversize": "clip"},
]
BIG_REPAIRS = {"on_bad_duration": "drop", "on_duplicate_id": "drop"}


@pytest.mark.parametrize("opts", BIG_OPTIONS, ids=str)
@pytest.mark.parametrize("dup", ["drop", "rename"])
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_unsorted_file_streams_as_whole_read(tmp_path: Path, small_chunks: None, opts: dict, dup: str,
                                             suffix: str) -> None:
    path = tmp_path / "big.csv"
    df = _big(path)
    if suffix == ".parquet":
        path = tmp_path / "big.parquet"
        df.to_parquet(path, row_group_size=250)
    report, _ = same(path, "canonical", LoadOptions(**opts, **{**BIG_REPAIRS, "on_duplicate_id": dup}))
    assert report.repaired["unsorted_sorted"] > 0


def test_max_jobs_reads_only_the_rows_it_keeps(tmp_path: Path, small_chunks: None) -> None:
    # a sorted file whose later rows hold values the whole read rejects: only their submit time is read
    lines = ["job_id,submit_time,num_gpus,duration"] + [f"j{i},{i},1,10" for i in range(1000)]
    lines[800] = "j799,799,many,-5"
    lines[900] = "j1,899,1,10"  # a duplicate id
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match="row 800, column 'num_gpus': not a finite number"):
        load_trace(path)
    table, report = load_trace(path, options=LoadOptions(max_jobs=10))
    assert table["job_id"].tolist() == [f"j{i}" for i in range(10)]
    assert (report.read, report.kept, report.dropped) == (1000, 10, {"max_jobs": 990})
    table, report = load_trace(path, options=LoadOptions(start=100, end=200))
    assert len(table) == 100 and report.dropped == {"outside_window": 900}
    with pytest.raises(TraceError, match="row 800"):  # a window holding the bad row reads it
        load_trace(path, options=LoadOptions(start=700, end=900))


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("j999,soon,1,10", "row 1000, column 'submit_time': a datetime among numbers"),
        ("j999,2020-13-01,1,10", "row 1000, column 'submit_time': a datetime among numbers"),
        ("j999,1e300,1,10", "row 1000, column 'submit_time': implausible submit time"),
        ("j999,,1,10", "row 1000, column 'submit_time': missing value"),
        ("j999,5,1,10", "row 1000, column 'submit_time': submit time is earlier than a previous row's"),
    ],
)
def test_submit_time_errors_anywhere_still_error(tmp_path: Path, small_chunks: None, bad: str, why: str) -> None:
    """Every submit time is read: a bad one is the whole read's error, wherever it is."""
    lines = ["job_id,submit_time,num_gpus,duration"] + [f"j{i},{i},1,10" for i in range(999)] + [bad]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    opts = LoadOptions(max_jobs=10, on_unsorted="error")
    with pytest.raises(TraceError) as expected:
        whole(path, "canonical", opts)
    assert why in str(expected.value)
    with pytest.raises(TraceError) as info:
        load_trace(path, options=opts)
    assert str(info.value) == str(expected.value)


def test_malformed_rows(tmp_path: Path) -> None:
    """A row with more fields than the header is the whole read's error where it is read in full;
    outside the selection only its submit-time field is parsed (the documented limit)."""
    lines = ["job_id,submit_time,num_gpus,duration"] + [f"j{i},{i},1,10" for i in range(20)]
    lines[6] = "j5,5,1,10,extra"
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"t.csv, row 6: 5 fields, but the header has 4 columns"):
        load_trace(path, options=LoadOptions(start=4, end=8))
    table, report = load_trace(path, options=LoadOptions(max_jobs=3))
    assert table["job_id"].tolist() == ["j0", "j1", "j2"] and report.dropped == {"max_jobs": 17}


def test_blank_lines_are_skipped_as_in_whole_read(tmp_path: Path, small_chunks: None) -> None:
    lines = ["job_id,submit_time,num_gpus,duration"] + [f"j{i},{i},1,10" for i in range(1000)]
    for at in (900, 500, 3):
        lines.insert(at, "")
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n\n")
    for opts in ({"max_jobs": 5}, {"start": 400, "end": 600}, {"start": 990}):
        report, _ = same(path, "canonical", LoadOptions(**opts))
        assert report.read == 1000


def test_datetimes_across_chunks(tmp_path: Path, small_chunks: None) -> None:
    times = pd.date_range("2017-10-01", periods=1000, freq="37s")
    rows = [f"{t:%Y-%m-%d %H:%M:%S},{60 + i % 7},{1 + i % 3},{'vcA' if i % 2 else 'vcB'}" for i, t in enumerate(times)]
    path = tmp_path / "p.csv"
    path.write_text("timestamp,duration,num_gpus,cluster\n" + "\n".join(reversed(rows)) + "\n")
    for opts in ({"max_jobs": 7}, {"start": 3600, "end": 7200}, {"vcs": ["vcA"], "max_jobs": 400}):
        same(path, "philly", LoadOptions(**opts))
    # times with a UTC offset in one chunk, without one in another: the whole read's error
    mixed = [r.replace(",", "+02:00,", 1) if i < 500 else r for i, r in enumerate(rows)]
    path.write_text("timestamp,duration,num_gpus,cluster\n" + "\n".join(mixed) + "\n")
    with pytest.raises(TraceError) as expected:
        whole(path, "philly", LoadOptions(max_jobs=7))
    with pytest.raises(TraceError) as info:
        load_trace(path, "philly", LoadOptions(max_jobs=7))
    assert str(info.value) == str(expected.value)


REAL_PHILLY = SHARED_DATA / "traces" / "philly" / "philly_jobs_pollux.csv"


@pytest.mark.skipif(not REAL_PHILLY.exists(), reason="real Philly trace absent")
@pytest.mark.parametrize("opts", [{"max_jobs": 1000}, {"start": 864_000, "end": 950_400},
                                  {"vcs": ["6214e9", "ee9e8c"], "max_jobs": 5000}], ids=str)
def test_real_philly_streams_as_whole_read(opts: dict) -> None:
    same(REAL_PHILLY, "philly", LoadOptions(**opts))
