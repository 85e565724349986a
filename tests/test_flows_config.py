"""Experiment configs: validation errors name the file and the field; expansion into replays; keys."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
import pytest
from schedlab.sched.spec import CONF_DIR, ConfigError, load_config
from schedlab.sched.policies import POLICIES
from schedlab.sched.reporting import compare

BASE = """\
name: t
seeds: [0, 1]
traces:
  - name: syn
    format: synthetic
    options: {num_jobs: 50, load: 2.0}
clusters: [4x8]
policies: [fifo, sjf]
"""


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_quickstart_is_every_registered_policy_two_seeds():
    config = load_config(CONF_DIR / "quickstart.yaml")
    assert [e.name for e in config.policy_entries()] == list(POLICIES)
    assert config.seeds == [0, 1]
    specs = config.grid("v1")
    assert len(specs) == 2 * len(POLICIES)
    assert config.baseline_label == "fifo"
    assert load_config("quickstart").name == "quickstart"  # a bare name looks in conf/experiments


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ("bogus: 1\n", "bogus"),
        ("placement: consolidated\nseeds: []\n", "seeds"),
    ],
)
def test_top_level_errors_name_file_and_field(tmp_path, change, where):
    path = write(tmp_path, BASE.replace("seeds: [0, 1]\n", "") + change)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and where in str(err.value)


def _config_error(tmp_path, old: str, new: str) -> tuple:
    """The BASE experiment with ``old`` replaced by ``new``: its path and the ConfigError's message."""
    path = write(tmp_path, BASE.replace(old, new))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    return path, str(err.value)


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("{num_jobs: 50, load: 2.0}", "{num_jobs: 50, lod: 2.0}", "traces[0].options"),
        ("{num_jobs: 50, load: 2.0}", "{num_jobs: 50, load: [1.0, -2]}", "traces[0].options"),
        ("format: synthetic", "format: nope", "traces[0].format"),
        ("policies: [fifo, sjf]", "policies: [fifo, nosuch]", "policies[1].name"),
        ("policies: [fifo, sjf]", "policies: [fifo, {name: tiresias, params: {promote_knob: x}}]",
         "policies[1].params"),
        ("policies: [fifo, sjf]", "policies: [fifo, {name: sjf, parms: {}}]", "policies[1].parms"),
        ("clusters: [4x8]", "clusters: [no-such-cluster]", "clusters[0]"),
        ("format: synthetic", "source: missing.csv", "traces[0].source"),
        ("seeds: [0, 1]", "seeds: [0, 1]\nbaseline: srtf", "baseline"),
    ],
)
def test_field_errors_name_file_and_field(tmp_path, old, new, where):
    path, message = _config_error(tmp_path, old, new)
    assert str(path) in message and where in message, message


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("clusters: [4x8]", "clusters: [4x8]\npreemption_overhead_s: -5", "preemption_overhead_s"),
        ("clusters: [4x8]", "clusters: [4x8]\npreemption_overhead_s: .inf", "preemption_overhead_s"),
        ("clusters: [4x8]", "clusters: [4x8]\npreemption_overhead_s: .nan", "preemption_overhead_s"),
        ("seeds: [0, 1]", "seeds: [0, -1]", "seeds[1]"),
        ("load: 2.0", "load: .inf", "traces[0].options.load"),
        ("load: 2.0", "load: [1.0, .nan]", "traces[0].options.load"),
        ("load: 2.0", "load: 2.0, start: .nan", "traces[0].options.start"),
        ("load: 2.0", "load: 2.0, seed: -3", "traces[0].options.seed"),
        ("load: 2.0", "load: 2.0, max_jobs: 0", "traces[0].options.max_jobs"),
        ("policies: [fifo, sjf]", "policies: [fifo, {name: tiresias, params: {promote_knob: .inf}}]",
         "policies[1].params"),
        ("clusters: [4x8]", "clusters: [4x8]\nplacement: bogus", "placement"),
        ("clusters: [4x8]", "clusters: [4x8]\nmodels: {interference: 'analytic:nan'}", "models.interference"),
        ("clusters: [4x8]", "clusters: [4x8]\nmodels: {interference: nosuch}", "models.interference"),
        ("clusters: [4x8]", "clusters: [4x8]\nallocation_stall_s: -1", "allocation_stall_s"),
        ("clusters: [4x8]", "clusters: [4x8]\nallocation_stall_s: .inf", "allocation_stall_s"),
    ],
)
def test_numbers_and_names_are_checked_when_the_file_is_read(tmp_path, old, new, where):
    """Issue #13: negative/inf/nan numbers and unknown placements used to pass and fail (or hang) in a replay."""
    path, message = _config_error(tmp_path, old, new)
    assert str(path) in message and where in message and "Value error" not in message, message
    assert "pydantic" not in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("seeds: [0, 1]", f"seeds: [{', '.join(map(str, range(10_000)))}]", "seeds: List should have at most 100"),
        ("seeds: [0, 1]", "seeds: [0, true]", "seeds: expected a number, got a boolean (at [1])"),
        ("load: 2.0", "load: 2.0, sample: true", "traces[0].options.sample: expected a number, got a boolean"),
        ("load: 2.0", "load: 2.0, max_jobs: 5000001", "traces[0].options.max_jobs: Input should be less than or"
         " equal to 5000000"),
        ("policies: [fifo, sjf]", "policies: [fifo, {name: tiresias, params: {promote_knob: true}}]",
         "policies[1].params: bad parameters for policy 'tiresias': promote_knob: expected a number"),
        ("clusters: [4x8]", "clusters: [4x8]\ninference: {load: 'constant:0.5', headroom: true}",
         "inference.headroom: expected a number, got a boolean"),
        ("clusters: [4x8]", "clusters: [4x8]\ninference: {load: 'constant:0.5'}",
         "clusters[0]: cluster '4x8' has no 'inference' pool to lend from"),
        ("clusters: [4x8]", "clusters: [4x8]\nclusters: [8x8]", "not valid YAML: line 8: duplicate key 'clusters'"
         " (first at line 7)"),
        ("clusters: [4x8]", "clusters: [4x8:b300]", "clusters[0]: cluster '4x8:b300': gpu_type: unknown GPU type"),
    ],
)
def test_issue_30_counts_booleans_and_repeated_keys(tmp_path, old, new, expected):
    """Issue #30: 10,000 seeds, `true` for a number and a key given twice used to pass without a word."""
    path, message = _config_error(tmp_path, old, new)
    assert message.startswith(f"{path}: ") and expected in message, message


def test_grid_load_sweep_labels_and_relative_sources(tmp_path):
    trace = tmp_path / "traces" / "t.csv"
    trace.parent.mkdir()
    trace.write_text("job_id,submit_time,num_gpus,duration\nj1,0,1,10\n")
    path = write(tmp_path, """\
        name: t
        seeds: [0, 1]
        traces:
          - {name: syn, format: synthetic, options: {num_jobs: 50, load: [1, 2]}}
          - {name: file, source: traces/t.csv, format: canonical}
        clusters: [4x8]
        policies: [fifo, sjf]
        """)
    config = load_config(path)
    specs = config.grid("v1")
    assert len(specs) == (2 + 1) * 1 * 2 * 2  # (2 loads + 1 file) x cluster x policies x seeds
    assert {s.trace_label for s in specs} == {"syn@1x", "syn@2x", "file"}
    assert {s.source for s in specs if s.trace == "file"} == {str(trace.resolve())}
    assert config.sweeps_load
    # the synthetic trace's seed follows the replay seed unless the options fix it
    assert {(s.seed, s.options["seed"]) for s in specs} == {(0, 0), (1, 1)}


def test_duplicate_policy_names_get_distinct_labels(tmp_path):
    path = write(tmp_path, BASE.replace("policies: [fifo, sjf]",
                                        "policies: [fifo, {name: tiresias, params: {promote_knob: 4}},"
                                        " {name: tiresias, params: {promote_knob: 2}, label: t2}]"))
    labels = [e.label for e in load_config(path).policy_entries()]
    assert labels == ["fifo", "tiresias[promote_knob=4]", "t2"]


def test_keys_are_stable_and_cover_what_changes_a_result(tmp_path):
    config = load_config(write(tmp_path, BASE))
    a, b = config.grid("v1"), load_config(write(tmp_path, BASE, "again.yaml")).grid("v1")
    assert [s.key for s in a] == [s.key for s in b]
    assert len({s.key for s in a}) == len(a)
    assert {s.key for s in config.grid("v2")}.isdisjoint(s.key for s in a)  # code version
    other = load_config(write(tmp_path, BASE.replace("num_jobs: 50", "num_jobs: 51"), "o.yaml")).grid("v1")
    assert {s.key for s in other}.isdisjoint(s.key for s in a)  # loader options


def test_allocation_stall_reaches_the_replay_and_its_key_only_when_set(tmp_path):
    """``allocation_stall_s`` (a scaling cost for every policy of the experiment, e.g. afs vs lyra on
    Lyra Table 5's scaling rows) reaches each replay and changes its key; unset, the keys are the
    ones before the option existed (the policies' own defaults apply)."""
    plain = load_config(write(tmp_path, BASE)).grid("v1")
    stalled = load_config(write(tmp_path, BASE + "allocation_stall_s: 63\n", "s.yaml")).grid("v1")
    assert all(s.allocation_stall_s is None and s.spec().allocation_stall_s is None for s in plain)
    assert all("allocation_stall_s" not in s.identity for s in plain)
    assert all(s.spec().allocation_stall_s == 63.0 for s in stalled)
    assert {s.key for s in stalled}.isdisjoint(s.key for s in plain)


def test_comparison_ratios_are_baseline_over_policy():
    rows = [
        {"trace": "t", "cluster": "c", "policy": p, "seed": s, "avg_jct_s": jct, "p95_jct_s": jct * 2,
         "avg_wait_s": 2.0, "avg_queue_s": 1.0, "makespan_s": 100.0, "gpu_util": 0.5, "preemptions": 0}
        for p, s, jct in [("fifo", 0, 100.0), ("fifo", 1, 300.0), ("sjf", 0, 50.0), ("sjf", 1, 50.0)]
    ]
    table = compare.comparison(rows, "fifo", ["sjf", "fifo"])
    assert list(table["policy"]) == ["fifo", "sjf"]  # the baseline first
    sjf = table.set_index("policy").loc["sjf"]
    assert sjf["avg_jct_s"] == 50.0 and sjf["seeds"] == 2
    assert sjf["avg_jct_speedup"] == pytest.approx(4.0)  # fifo's seed mean 200 / 50
    assert "4.00x" in compare.to_markdown(table) and "avg_jct_speedup" in compare.to_text(table)
    assert compare.comparison([], "fifo").empty and isinstance(pd.DataFrame(), pd.DataFrame)


def test_placement_is_logged_by_its_canonical_name_and_strict_only_with_policies_that_wait(tmp_path):
    """Issue #23: ``consolidated`` is the old name of ``fewest-servers``; ``strict-consolidated`` may
    refuse a job with GPUs free, so a policy that assumes any free GPUs will do is refused when read."""
    alias = load_config(write(tmp_path, BASE.replace("clusters: [4x8]", "clusters: [4x8]\nplacement: consolidated")))
    assert alias.placement == "fewest-servers"
    assert {spec.placement for spec in alias.grid("v")} == {"fewest-servers"}
    path, message = _config_error(tmp_path, "policies: [fifo, sjf]",
                                  "policies: [fifo, afs]\nplacement: strict-consolidated")
    assert "placement: placement 'strict-consolidated' may refuse" in message and "policy 'afs'" in message
    strict = BASE.replace("policies: [fifo, sjf]", "policies: [fifo, sjf, tiresias, srtf]").replace(
        "clusters: [4x8]", "clusters: [4x8]\nplacement: strict-consolidated")
    config = load_config(write(tmp_path, strict))
    assert config.placement == "strict-consolidated"


def test_replays_are_submitted_baseline_first_then_costliest(tmp_path):
    """The live comparison needs the baseline at once; pollux (relative_cost 20) must not start last."""
    path = write(tmp_path, BASE.replace("policies: [fifo, sjf]", "policies: [sjf, pollux, fifo]\nbaseline: fifo"))
    config = load_config(path)
    order = [(s.label, s.seed) for s in config.submission_order(config.grid("v1"))]
    assert order == [("fifo", 0), ("fifo", 1), ("pollux", 0), ("pollux", 1), ("sjf", 0), ("sjf", 1)]
