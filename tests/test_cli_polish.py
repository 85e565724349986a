"""Terminal polish and the pieces of the live comparison that need no flow (issue #29 §1, §2, §7)."""

from __future__ import annotations

import ipaddress
import math
import re
import textwrap
from pathlib import Path

import pytest

from schedlab import settings
from schedlab.cli import main
from schedlab.cli.policies import policy_listing
from schedlab.sched.reporting.terminal import counted
from schedlab.flows import REPRODUCE_CONFIGS
from schedlab.sched.reporting.live import elapsed, knobs
from schedlab.tasks.live import LiveComparison
from schedlab.sched.policies import POLICIES, make_policy
from schedlab.sched.reporting import compare
from schedlab.sched.spec import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("width", [60, 100, 160])
def test_policies_wrap_to_the_width_with_one_name_column(width):
    text = policy_listing(width)
    column = max(map(len, POLICIES)) + 2
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines if " " in line.strip()), [l for l in lines if len(l) > width]
    starts = [line for line in lines if line[:1] != " "]
    assert sorted(line.split()[0] for line in starts) == sorted(POLICIES)
    for line in starts:  # the body starts in the same column, long names included
        assert line[column - 2:column] == "  " and line[column] != " ", line
    assert any(line.startswith("gandiva-elastic  ") for line in starts)


def test_unknown_names_get_did_you_mean_and_the_valid_parameters(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"unknown policy 'tiresas' \(did you mean 'tiresias'\?\)"):
        make_policy("tiresas")
    with pytest.raises(ValueError) as err:
        make_policy("tiresias", {"promote_knb": 4})
    assert "has no parameter 'promote_knb' (did you mean 'promote_knob'?)" in str(err.value)
    assert "parameters of tiresias (default): " in str(err.value) and "promote_knob" in str(err.value)
    assert main(["replay", "--policy", "tiresas"]) == 2
    assert "(did you mean 'tiresias'?)" in capsys.readouterr().err
    assert main(["replay", "--policy", "tiresias", "--set", "tiresias.promote_knob=[1]"]) == 2
    message = capsys.readouterr().err
    assert "--set: bad parameters for policy 'tiresias'" in message and "parameters of tiresias (default): " in message
    assert main(["replay", "--policy", "tiresias", "--set", "tiresia.promote_knob=4"]) == 2
    assert "(did you mean 'tiresias'?)" in capsys.readouterr().err
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent("""\
        name: typo
        traces: [{name: syn, options: {num_jobs: 10}}]
        clusters: [4x8]
        policies: [fifo, srft]
        """))
    with pytest.raises(ConfigError, match=r"unknown policy 'srft' \(did you mean 'srtf'\?\)"):
        load_config(path)


def test_replay_header_prints_repairs_as_words(tmp_path, capsys):
    assert counted({}) == "0" and counted({"oversize": 0}) == "0"
    assert counted({"oversize": 2, "unsorted_sorted": 1}) == "3 (2 oversize, 1 sorted by submit time)"
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,num_gpus,duration\nb,10,1,5\na,0,1,5\nc,20,64,5\n")
    assert main(["replay", "--trace", str(trace), "--policy", "fifo", "--cluster", "1x8", "--on-oversize", "drop",
                 "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("trace: "))
    assert "{" not in header and "dropped 1 (1 oversize), repaired 1 (1 sorted by submit time)" in header, header


def test_reproduce_help_lists_the_configs_it_runs(capsys):
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: " + ", ".join(REPRODUCE_CONFIGS) + ")" in text
    assert all((ROOT / "conf" / "experiments" / f"{name}.yaml").exists() for name in REPRODUCE_CONFIGS)


def test_no_message_names_a_missing_markdown_file():
    """Every ``something.md`` a message string (not a docstring or comment) names exists in the checkout."""
    missing = []
    for path in ROOT.rglob("*.py"):
        if "tests" in path.parts or ".venv" in path.parts or path.relative_to(ROOT).parts[0] == "docs":
            continue  # the site's generator names its pages relative to docs/ (tests/test_docs.py checks them)
        for line in path.read_text().splitlines():
            code = line.split("#", 1)[0]
            if not re.search(r"\b(print|raise|help=|Error\()", code) and not code.strip().startswith(('"', "f\"")):
                continue
            for name in re.findall(r"\b((?:[\w-]+/)*[\w-]+\.md)\b", code):
                if name in ("comparison.md", "reproduce.md"):
                    continue  # an artifact's name
                if not (ROOT / name).exists():
                    missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert missing == []


def test_links_use_the_recorded_ui(tmp_path, monkeypatch):
    from schedlab.cli.ui import ui_hint
    from schedlab.sched.reporting import mlflow_view

    home = tmp_path / "home"
    assert settings.ui_base(home) == settings.DEFAULT_UI and ui_hint(home) == "schedlab ui"
    wildcard = str(ipaddress.IPv4Address(0))  # `schedlab ui --host` of every interface, reached on 127.0.0.1
    settings.record_ui(wildcard, 5077, home)
    assert settings.ui_base(home) == "http://127.0.0.1:5077" and ui_hint(home) == "schedlab ui --port 5077"
    (home / "ui.json").write_text("{not json")
    assert settings.ui_base(home) == settings.DEFAULT_UI
    settings.record_ui("127.0.0.1", 5078, home)
    monkeypatch.setenv("SCHEDLAB_HOME", str(home))
    assert mlflow_view.runs_url("sqlite:///x.db", "3").startswith("http://127.0.0.1:5078/#/experiments/3/runs?")
    assert mlflow_view.run_url("sqlite:///x.db", "3", "r").startswith("http://127.0.0.1:5078/#/experiments/3/runs/r")
    assert mlflow_view.runs_url("http://server:80", "3").startswith("http://server:80/#/")  # a tracking server's own UI


def rows(label: str, jcts: list[float]) -> list[dict]:
    return [{"trace": "syn", "cluster": "4x8", "policy": label, "seed": i, "avg_jct_s": v, "gpu_util": 1 / v,
             **{m: v for m in compare.METRICS if m not in ("avg_jct_s", "gpu_util")}} for i, v in enumerate(jcts)]


def test_rank_orders_each_group_best_first_and_values_last():
    table = compare.comparison(rows("fifo", [300.0, 310.0]) + rows("srtf", [100.0, 90.0]) + rows("sjf", [200.0]), "fifo")
    assert list(compare.rank(table, "avg_jct_s")["policy"]) == ["srtf", "sjf", "fifo"]
    assert list(compare.rank(table, "gpu_util")["policy"]) == ["srtf", "sjf", "fifo"]  # higher is better
    with pytest.raises(ValueError, match="cannot rank by 'jobs'"):
        compare.rank(table, "jobs")


def test_live_table_has_every_policy_its_progress_and_knobs(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent("""\
        name: live
        seeds: [0, 1]
        traces: [{name: syn, options: {num_jobs: 10}}]
        clusters: [4x8]
        policies: [fifo, srtf, {name: tiresias, params: {promote_knob: 4, queue_thresholds: [3600.0]}}]
        """))
    config = load_config(path)
    specs = config.grid("test")
    live = LiveComparison("sqlite:///unused.db", "0", "parent", config, specs, "avg_jct_s")
    by = {(s.label, s.seed): s for s in specs}
    live.finished(by[("fifo", 0)], rows("fifo", [300.0])[0])
    live.finished(by[("srtf", 0)], rows("srtf", [100.0])[0])
    live.failed.add(by[("fifo", 1)].key)
    table = live.table(running={by[("srtf", 1)].key: (0.0, "")})
    assert list(table["policy"]) == ["srtf", "fifo", "tiresias"]
    assert list(table[compare.PROGRESS]) == ["1/1/0", "1/0/0 (1 failed)", "0/0/2"]
    assert list(table["seeds"]) == [1, 1, 0] and math.isnan(table.loc[2, "avg_jct_s"])
    assert table.loc[2, compare.KNOBS] == "promote_knob=4.0"  # the default thresholds are no knob
    assert knobs("fifo", {}) == ""
    text = compare.to_text(table)
    assert "done/running/queued" in text and "knobs" in text and "promote_knob=4.0" in text
    assert "| tiresias | 0 | 0/0/2 |" in live.markdown(table)
    assert elapsed(75) == "1m15s" and elapsed(3 * 3600 + 120) == "3h02m"
    import time

    text = live.in_flight({by[("srtf", 1)].key: (time.time() - 75, "12,000/60,000 jobs"), by[("fifo", 1)].key: (time.time(), "")})
    assert text.splitlines() == ["in flight (2):", "  srtf | syn | 4x8 | seed 1: running for 1m15s, 12,000/60,000 jobs",
                                 "  fifo | syn | 4x8 | seed 1: running for 0m00s"]
