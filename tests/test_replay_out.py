"""``replay --out``: never mixes two runs, one writer at a time, unusable folders fail before the replay,
unique temp names (issue #13)."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from schedlab import settings
from schedlab.cli import main
from schedlab.sched.results.outdir import LOCK, MARKER, OutputError, claim
from schedlab.sched.replay import write_atomic

SMALL = ["replay", "--num-jobs", "12", "--no-progress"]


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:
        return int(stop.code)


def test_a_folder_with_results_is_refused_unless_overwrite_and_runs_never_mix(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*SMALL, "--policy", "fifo", "sjf", "--out", str(out)]) == 0
    assert (out / "fifo" / "jobs.parquet").exists() and (out / "sjf" / "summary.json").exists()
    before = (out / "comparison.csv").read_text()

    assert main([*SMALL, "--policy", "fifo", "--seed", "1", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (out / "comparison.csv").read_text() == before  # untouched

    assert main([*SMALL, "--policy", "fifo", "--seed", "1", "--out", str(out), "--overwrite"]) == 0
    left = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert left == ["comparison.csv", "jobs.parquet", "summary.json", "utilization.parquet"]  # no old policy folders
    assert json.loads((out / "summary.json").read_text())["seed"] == 1
    assert list(pd.read_csv(out / "comparison.csv")["policy"]) == ["fifo"]
    assert not (out / LOCK).exists()


def test_overwrite_never_empties_a_folder_that_is_not_a_replays(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main([*SMALL, "--policy", "fifo", "--out", str(out), "--overwrite"]) == 2
    assert "not a replay's" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "keep me"


def test_a_file_or_unwritable_out_fails_before_the_replay(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert _exit_code([*SMALL, "--policy", "fifo", "--out", str(a_file)]) == 2
    assert "is a file" in capsys.readouterr().err
    assert _exit_code([*SMALL, "--policy", "fifo", "--out", str(a_file / "sub")]) == 2
    captured = capsys.readouterr()
    assert "cannot create" in captured.err and "trace:" not in captured.out  # nothing was loaded
    assert a_file.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_out_fails_before_the_replay(tmp_path, capsys):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert main([*SMALL, "--policy", "fifo", "--out", str(out)]) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        out.chmod(0o755)


def test_a_folder_another_live_replay_writes_is_refused(tmp_path):
    out = tmp_path / "out"
    held = claim(out)
    try:
        with pytest.raises(OutputError, match=f"pid {os.getpid()}"):
            claim(out, overwrite=True)
    finally:
        held.release()
    claim(out).release()  # free again once released


def test_a_lock_left_by_a_dead_replay_is_taken_over(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text(json.dumps({"pid": 999999999, "host": "gone", "started": "2020-01-01T00:00:00Z"}))
    (out / MARKER).write_text("{}")
    lock = claim(out)  # nobody holds the flock: stale
    assert json.loads((out / LOCK).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (out / LOCK).exists()


def test_default_out_is_a_fresh_folder_under_schedlab_home(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SCHEDLAB_HOME", str(tmp_path / "home"))
    assert main([*SMALL, "--policy", "fifo"]) == 0
    assert main([*SMALL, "--policy", "fifo"]) == 0
    runs = sorted((settings.replays_dir()).iterdir())
    assert len(runs) == 2 and all((r / "summary.json").exists() for r in runs)
    assert f"results: {runs[-1]}" in capsys.readouterr().out


def test_a_failed_replay_leaves_no_empty_folder_behind(tmp_path, capsys):
    out = tmp_path / "out"
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time,num_gpus,duration\na,0,1,-5\n")
    assert main(["replay", "--trace", str(bad), "--format", "canonical", "--policy", "fifo", "--no-progress",
                 "--out", str(out)]) == 2
    assert not out.exists()
    assert main(["replay", "--trace", str(tmp_path / "missing.csv"), "--out", str(out)]) == 2
    assert "--trace" in capsys.readouterr().err and not out.exists()


def test_atomic_writes_use_unique_temp_names_and_leave_none_behind(tmp_path):
    seen = []

    def record(path):
        seen.append(path.name)
        path.write_text(str(len(seen)))

    target = tmp_path / "x.json"
    write_atomic(target, record)
    write_atomic(target, record)
    assert seen[0] != seen[1] and target.read_text() == "2"

    def fail(path):
        path.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_atomic(target, fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"] and target.read_text() == "2"
