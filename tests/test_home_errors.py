"""An unusable ``$SCHEDLAB_HOME`` or ``--out`` (issue #30): nothing is created on import, so the commands
that do not write there still work; those that do exit 2 naming the path, never with a traceback.

Tests run as root, for whom a read-only folder is writable: the home lies under a regular file
instead (mkdir fails with "Not a directory", as it would with "Read-only file system"), and a full
disk is a file-size limit (``RLIMIT_FSIZE``: writes past it fail with EFBIG, as they would with ENOSPC).
"""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from helpers import cli_env, run_cli

import schedlab

H200_PROFILES = Path(schedlab.__file__).parent / "data" / "profiles" / "h200" / "profiles.parquet"  # shipped

pytestmark = pytest.mark.timeout(240)

SMALL = ["--num-jobs", "20", "--policy", "fifo", "--no-progress"]


@pytest.fixture
def broken_home(tmp_path):
    """A $SCHEDLAB_HOME that cannot be created, and an empty current folder."""
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "cwd").mkdir()
    (tmp_path / "exp.yaml").write_text("name: e\ntraces: [{name: syn, format: synthetic}]\nclusters: [2x4]\n"
                                       "policies: [fifo]\n")
    return tmp_path / "a-file" / "home", tmp_path


def _assert_clean_error(run, *words: str) -> None:
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    for word in words:
        assert word in run.stderr, run.stderr[-3000:]


@pytest.mark.slow
def test_commands_that_need_no_home_work_without_one(broken_home):
    home, tmp = broken_home
    env = cli_env(home)
    assert run_cli(["policies"], env, tmp / "cwd").returncode == 0
    replay = run_cli(["replay", *SMALL, "--out", str(tmp / "out")], env, tmp / "cwd")
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert (tmp / "out" / "summary.json").exists() and list((tmp / "cwd").iterdir()) == []


@pytest.mark.slow
def test_commands_that_write_home_exit_2_naming_the_path(broken_home):
    home, tmp = broken_home
    env = cli_env(home)
    _assert_clean_error(run_cli(["replay", *SMALL], env, tmp / "cwd"), f"{home / 'replays'}", "Not a directory")
    _assert_clean_error(run_cli(["replay", *SMALL, "--track", "--out", str(tmp / "out")], env, tmp / "cwd"),
                        str(home), "Not a directory")
    _assert_clean_error(run_cli(["experiment", str(tmp / "exp.yaml")], env, tmp / "cwd"),
                        f"{home / 'prefect'}", "Not a directory", "SCHEDLAB_HOME")
    _assert_clean_error(run_cli(["fit", "interference", "--profiles", str(H200_PROFILES), "--no-track"], env,
                                tmp / "cwd"), f"{home / 'models'}", "Not a directory")


def _file_size_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_full_disk_under_out_is_an_error_naming_the_file(tmp_path):
    out = tmp_path / "out"
    run = run_cli(["replay", "--num-jobs", "500", "--policy", "fifo", "--no-progress", "--out", str(out)],
                  cli_env(tmp_path / "home"), tmp_path, preexec_fn=_file_size_limit(4096))
    _assert_clean_error(run, f"{out / 'jobs.parquet'}: cannot write (File too large)")
    assert not out.exists()  # the folder made for the replay is removed again, nothing half-written is left
