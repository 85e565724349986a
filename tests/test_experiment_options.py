"""An experiment file's ``time_limit_s`` (each replay's limit; ``--time-limit`` overrides it) and
``annotate: null`` (the key left out), as the file is read: refused values in one line naming the key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from schedlab.sched.contained import DEFAULT_TIME_LIMIT_S
from schedlab.sched.spec.experiment_file import ConfigError, load_config

BASE = """\
    name: options
    policies: [fifo, sjf]
    clusters: [2x4]
    traces:
      - {name: syn, format: synthetic, options: {num_jobs: 5}%s}
    """


def write(tmp_path: Path, extra: str = "", annotate: str = "") -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent(BASE % annotate) + extra)
    return path


def test_time_limit_defaults_reaches_every_replay_and_is_not_part_of_a_replays_key(tmp_path: Path) -> None:
    default = load_config(write(tmp_path))
    assert default.time_limit_s == DEFAULT_TIME_LIMIT_S == 7200
    assert {r.time_limit_s for r in default.grid("v")} == {DEFAULT_TIME_LIMIT_S}
    limited = load_config(write(tmp_path, "time_limit_s: 30\n"))
    assert {r.time_limit_s for r in limited.grid("v")} == {30.0}
    # how a replay is run, not what it computes: the same replays, resumed under another limit
    assert [r.key for r in limited.grid("v")] == [r.key for r in default.grid("v")]


@pytest.mark.parametrize("value", ["0", "-5", ".inf", ".nan", "soon", "true"])
def test_a_bad_time_limit_is_refused_naming_the_key(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, f"time_limit_s: {value}\n"))
    assert "time_limit_s" in str(error.value) and str(error.value).count("\n") == 1  # the file, then one line


@pytest.mark.parametrize("annotate", [", annotate: null", ", annotate: "])
def test_annotate_null_is_the_key_left_out(tmp_path: Path, annotate: str) -> None:
    assert load_config(write(tmp_path, annotate=annotate)).traces[0].annotate is False
    assert [r.annotate for r in load_config(write(tmp_path, annotate=annotate)).grid("v")] == [False, False]


def test_a_bad_annotate_is_still_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, annotate=", annotate: 3"))
    assert "annotate" in str(error.value) and str(error.value).count("\n") == 1


def test_cli_time_limit_is_checked_before_any_work(tmp_path: Path) -> None:
    from helpers import cli_env, run_cli

    done = run_cli(["experiment", str(write(tmp_path)), "--time-limit", "0"], cli_env(tmp_path / "home"), tmp_path,
                   timeout=120)
    assert done.returncode == 2 and "argument --time-limit: must be > 0" in done.stderr
    assert not (tmp_path / "home" / "mlflow.db").exists()
