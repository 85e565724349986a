"""``schedlab replay`` options: every value checked before any work (exit 2 naming the option as typed),
clean exits on bad ``--set`` YAML and Ctrl-C, ``--version`` and help text for every flag (issue #13)."""

from __future__ import annotations

import argparse
import math

import pytest

from schedlab import __version__
from schedlab.cli import build_parser, main
from helpers import replay_table
from schedlab.sched.traces import LoadOptions, load_trace

SMALL = ["replay", "--policy", "fifo", "--num-jobs", "12", "--no-progress"]


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse's own errors
        return int(stop.code)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--preemption-overhead", "-5"], "--preemption-overhead"),
        (["--preemption-overhead", "inf"], "--preemption-overhead"),
        (["--preemption-overhead", "nan"], "--preemption-overhead"),
        (["--load", "inf"], "--load"),
        (["--load", "0"], "--load"),
        (["--load", "-1"], "--load"),
        (["--start", "nan"], "--start"),
        (["--start", "-3"], "--start"),
        (["--end", "1e400"], "--end"),
        (["--start", "100", "--end", "50"], "--end"),
        (["--max-jobs", "0"], "--max-jobs"),
        (["--max-jobs", "2.5"], "--max-jobs"),
        (["--num-jobs", "-1"], "--num-jobs"),
        (["--seed", "-1"], "--seed"),
        (["--seed", "x"], "--seed"),
        (["--interference", "analytic:nan"], "--interference"),
        (["--interference", "analytic:abc"], "--interference"),
        (["--set", "fifo.x=1"], "--set"),
    ],
)
def test_bad_numbers_exit_2_naming_the_option_before_any_work(tmp_path, capsys, args, option):
    out = tmp_path / "out"
    assert _exit_code([*SMALL, "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err and "pydantic" not in err
    assert not out.exists()  # nothing was written: the check came first


@pytest.mark.parametrize(("cluster", "field"), [("servers: 0", "pools.0.servers"),
                                                ("servers: 2\n    gpu_memory_gb: .inf", "pools.0.gpu_memory_gb"),
                                                ("0x8", "servers")])
def test_bad_clusters_are_one_line_errors_naming_the_field(tmp_path, capsys, cluster, field):
    if "x" not in cluster:
        spec = tmp_path / "c.yaml"
        spec.write_text(f"name: c\npools:\n  - gpus_per_server: 8\n    {cluster}\n")
        cluster = str(spec)
    assert _exit_code([*SMALL, "--cluster", cluster, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert cluster in err and field in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--cluster", "-1x8"], ["--cluster: cluster '-1x8': servers:", "greater than or equal to 1", "(got -1)"]),
        (["--cluster", "4x-8"], ["gpus_per_server:", "(got -8)"]),
        (["--cluster", "100000x8"], ["servers:", "less than or equal to 10000"]),
        (["--cluster", "4x8:b300"], ["unknown GPU type 'b300'", "known: "]),
        (["--cluster", "."], ["a folder, not a cluster file"]),
        (["--num-jobs", "10000000"], ["--num-jobs", "5000000"]),
        (["--inference-headroom", "1.5"], ["--inference-headroom", "must be < 1"]),
        (["--inference-headroom", "0.1"], ["--inference-headroom: applies only with --inference-load"]),
        (["--keep-progress"], ["--keep-progress: applies only with --inference-load"]),
        (["--cluster", "lyra-testbed", "--inference-load", "constant:0.5", "--inference-headroom", "-0.1"],
         ["--inference-headroom", "must be >= 0"]),
        (["--policy", "tiresias", "--set", "tiresias.promote_knob=true"],
         ["promote_knob: expected a number, got a boolean"]),
        (["--policy", "tiresias", "--set", "tiresias.promote_knob=1", "--set", "tiresias.promote_knob=2"],
         ["tiresias.promote_knob is set twice"]),
        (["--policy", "tiresias", "--set", "tiresias.queue_thresholds={a: 1, a: 2}"], ["duplicate key 'a'"]),
    ],
)
def test_issue_30_bad_values_exit_2_saying_what_is_wrong(tmp_path, capsys, args, expected):
    """Sizes, GPU types, loaning options, booleans and repeated keys: refused before any work (issue #30)."""
    out = tmp_path / "out"
    assert _exit_code([*SMALL, "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert all(e in err for e in expected) and "Traceback" not in err, err
    assert "expected one argument" not in err and not out.exists()


def test_library_replay_refuses_negative_and_non_finite_overheads():
    table, _ = load_trace(None, "synthetic", LoadOptions(num_jobs=5, max_gpus=32))
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="preemption_overhead_s"):
            replay_table(table, "4x8", "tiresias", preemption_overhead_s=bad)
        with pytest.raises(ValueError, match="allocation_stall_s"):
            replay_table(table, "4x8", "fifo", allocation_stall_s=bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "tiresias.nope=3"], "nope"),
        (["--set", "tiresias.promote_knob=.inf"], "finite"),
        (["--set", "tiresias.promote_knob=:"], "not valid YAML"),
        (["--set", "tiresias.promote_knob=["], "not valid YAML"),
        (["--placement", "bogus"], "--placement"),
        (["--placement", "strict-consolidated", "--policy", "fifo", "afs"], "--placement: placement"
         " 'strict-consolidated' may refuse a job although enough GPUs are free, and policy 'afs'"),
        (["--placement", "strict-best-fit", "--policy", "sjf", "optimus"], "--placement: placement"
         " 'strict-best-fit' may refuse a job although enough GPUs are free, and policy 'optimus'"),
    ],
)
def test_options_of_a_later_policy_are_checked_before_the_first_replay(tmp_path, capsys, args, message):
    """With several policies, a bad option of the second used to surface after the first had run."""
    out = tmp_path / "out"
    argv = ["replay", "--policy", "fifo", "tiresias", "--num-jobs", "12", "--no-progress", "--out", str(out), *args]
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert "\n" not in err.strip() or err.startswith("usage")  # one line (argparse adds its usage)
    assert not out.exists()


def test_ctrl_c_exits_130_without_a_traceback_and_releases_the_folder(tmp_path, capsys, monkeypatch):
    from schedlab.sched.contained import ContainedRunner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # where a Ctrl-C lands: the command waits there while each policy's replay runs in its child
    monkeypatch.setattr(ContainedRunner, "replay", interrupted)
    out = tmp_path / "out"
    assert main([*SMALL, "--out", str(out)]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not (out / ".schedlab-replay.lock").exists()


def test_version(capsys):
    assert _exit_code(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"schedlab {__version__}"


def _parsers(parser: argparse.ArgumentParser, path: str = "schedlab"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_of_every_command_has_help():
    missing = [f"{path} {'/'.join(a.option_strings) or a.dest}"
               for path, parser in _parsers(build_parser()) for a in parser._actions
               if not isinstance(a, argparse._SubParsersAction) and not (a.help and a.help.strip())]
    assert missing == []
    commands = [path for path, _ in _parsers(build_parser())]
    assert "schedlab replay" in commands and "schedlab experiment" in commands  # the walk reaches them


def test_help_has_no_internal_references():
    internal = ("DESIGN.md", "``", ".py ", "sched/", "flows/", "tasks/", "tests/")
    for path, parser in _parsers(build_parser()):
        text = parser.format_help()
        found = [word for word in internal if word in text]
        assert found == [], f"{path} --help mentions {found}"


@pytest.mark.parametrize(("command", "workers", "expected"), [
    ("experiment", "0", "must be >= 1"), ("reproduce", "100000", "must be <= 256"), ("end-to-end", "x", "an integer")])
def test_worker_counts_are_bounded(tmp_path, capsys, command, workers, expected):
    """Issue #30 (unbounded sizes): --workers is a count of processes, 1-256, checked before any work."""
    config = tmp_path / "exp.yaml"
    config.write_text("name: w\ntraces: [{name: s, source: synthetic, options: {num_jobs: 5}}]\npolicies: [fifo]\n")
    argv = [command, str(config)] if command != "end-to-end" else [command]
    assert _exit_code([*argv, "--workers", workers]) == 2
    err = capsys.readouterr().err
    assert "--workers" in err and expected in err and "Traceback" not in err


def test_experiment_seeds_must_fit_numpy(tmp_path):
    """Issue #30: a seed numpy cannot take is refused in the experiment file, not deep in a replay."""
    from schedlab.sched.spec import load_config

    config = tmp_path / "exp.yaml"
    config.write_text(f"name: s\nseeds: [{2**63}]\ntraces: [{{name: s, source: synthetic}}]\npolicies: [fifo]\n")
    with pytest.raises(ValueError, match="seeds"):
        load_config(str(config))
