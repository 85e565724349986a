"""The shipped paper set-ups (``conf/experiments``) read their data from the same place whatever the working
folder: their relative paths (``../shared/data/…``, the development data beside the repository) resolve
against the checkout's root, after the file's folder and before the working folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import cli_env, run_cli
from schedlab import conf
from schedlab.sched.spec.experiment_file import ConfigError, load_config

CHECKOUT = conf.ROOT.parent
DATA = CHECKOUT.parent / "shared" / "data"


def test_a_shipped_experiment_finds_its_trace_from_any_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a folder with no shared/ beside it
    if DATA.is_dir():
        config = load_config("castor-philly")
        sources = {replay.source for replay in config.grid("v")}
        assert sources == {str((DATA / "traces" / "philly" / "philly_jobs_pollux.csv").resolve())}
    else:  # the development data is not beside this checkout: the error says where it looked
        with pytest.raises(ConfigError, match=rf"not found.*\(a relative path: looked in {conf.path('experiments')},"
                                              rf" {CHECKOUT} and {tmp_path}\)"):
            load_config("castor-philly")


def test_a_shipped_experiments_models_are_read_where_the_file_means(tmp_path: Path, monkeypatch) -> None:
    """The ξ source's table names a file relative to the checkout: the replays get its absolute path."""
    monkeypatch.chdir(tmp_path)
    gavel = DATA / "profiles" / "gavel" / "simulation_throughputs.json"
    if not gavel.is_file():
        pytest.skip(f"the development data is not beside this checkout: {gavel}")
    config = load_config("gimbal-jct")
    assert {r.models["interference"] for r in config.grid("v")} == {f"mpscap:gavel:{gavel.resolve()}"}


def test_another_file_resolves_against_its_folder_then_the_working_folder(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "jobs.csv").write_text("job_id,submit_time,num_gpus,duration\nj0,0,1,60\n")
    path = tmp_path / "mine" / "exp.yaml"
    path.write_text("name: mine\npolicies: [fifo]\nclusters: [1x4]\ntraces: [{name: t, source: jobs.csv}]\n")
    monkeypatch.chdir(tmp_path / "work")
    config = load_config(path)
    assert config.search_path() == [tmp_path / "mine", tmp_path / "work"]  # no checkout for a file of one's own
    assert config.grid("v")[0].source == str(tmp_path / "work" / "jobs.csv")


@pytest.mark.slow
def test_reproduce_with_its_report_from_another_folder(tmp_path: Path, seed_home) -> None:
    if not DATA.is_dir():
        pytest.skip(f"the development data is not beside this checkout: {DATA}")
    # gimbal-jct: the shipped set-up with the fewest replays (4 of 150 Philly jobs) that reads the
    # development data twice (the trace and Gavel's measured pairs) and has a paper table
    done = run_cli(["reproduce", "gimbal-jct", "--seeds", "0", "--workers", "1", "--report", "report"],
                   cli_env(seed_home(tmp_path / "home")), tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "report" / "index.html").is_file() and "gimbal-philly" in done.stdout
