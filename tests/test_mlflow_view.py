"""What a researcher reads: the comparison table, the plots, the MLflow links, tags and params
(issue #12 §2). The experiment flow's MLflow view is checked in test_flows_experiment.py."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from schedlab.sched.policies import POLICIES
from schedlab.tasks import compare, mlflow_view, plots
from schedlab.tasks.config import ReplaySpec
from schedlab.tasks.replay import run_params


def _rows(policy: str, jcts: list[float], preemptions: list[int], wait: float = 5.0) -> list[dict]:
    return [{"trace": "t", "cluster": "c", "policy": policy, "seed": seed, "avg_jct_s": jct, "p95_jct_s": jct,
             "avg_wait_s": wait, "avg_queue_s": 1.0, "makespan_s": 1000.0, "gpu_util": 0.5, "preemptions": pre}
            for seed, (jct, pre) in enumerate(zip(jcts, preemptions))]


def test_table_has_seed_spread_integer_preemptions_mlflow_keys_and_flags_identical_policies():
    rows = (_rows("fifo", [100.0, 300.0], [0, 0]) + _rows("ssf", [50.0, 70.0], [3, 4], wait=9.0)
            + _rows("lucid", [50.0, 70.0], [3, 4], wait=9.0) + _rows("sjf", [50.0, 70.0], [3, 5], wait=9.0))
    table = compare.comparison(rows, "fifo", ["fifo", "ssf", "lucid", "sjf"])
    by = table.set_index("policy")
    assert by.loc["fifo", "avg_jct_s"] == 200.0
    assert by.loc["fifo", "avg_jct_s_std"] == pytest.approx(np.std([100.0, 300.0], ddof=1))
    assert by.loc["ssf", "preemptions"] == 3.5 and by.loc["ssf", "avg_wait_s"] == 9.0
    # lucid's results equal ssf's seed by seed; sjf differs in one seed's preemptions
    assert by.loc["lucid", "same_as"] == "ssf" and by.loc["sjf", "same_as"] == "" and by.loc["ssf", "same_as"] == ""
    text = compare.to_text(table)
    header = text.splitlines()[1].split()
    assert {"avg_jct_s", "avg_wait_s", "avg_queue_s", "makespan_s", "preemptions", "avg_jct_speedup", "same_as"} <= set(header)
    assert text.splitlines()[0] == "trace t, cluster c"
    lucid = next(line for line in text.splitlines() if line.startswith("lucid "))
    assert "= ssf" in lucid and "200 ± 141" not in lucid
    fifo = next(line for line in text.splitlines() if line.startswith("fifo "))
    assert "200 ± 141" in fifo  # mean ± sample std over the two seeds
    ssf = next(line for line in text.splitlines() if line.startswith("ssf "))
    assert " 4 ± 1 " in ssf and "3.5" not in ssf  # preemptions as whole numbers
    assert "| same_as |" in compare.to_markdown(table) and "= ssf" in compare.to_markdown(table)


def test_table_without_identical_policies_has_no_same_as_column_and_one_seed_no_spread():
    table = compare.comparison(_rows("fifo", [100.0], [0]) + _rows("sjf", [50.0], [1]), "fifo")
    assert "same_as" not in compare.to_text(table).splitlines()[1]
    assert math.isnan(table.loc[0, "avg_jct_s_std"]) and "±" not in compare.to_text(table)


def test_policy_styles_distinct_for_many_policies():
    labels = [f"p{i}" for i in range(24)]
    styles = plots.policy_styles(labels)
    assert len({(s["color"], s["linestyle"]) for s in styles.values()}) == 24
    assert len({s["color"] for s in list(styles.values())[:20]}) == 20  # colours first


def test_zero_waits_make_a_visible_cdf_step_at_zero():
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    plots._cdf(ax, pd.Series([0.0] * 9 + [500.0]))
    x, y = ax.lines[0].get_data()
    assert x[0] == 0.0 and y[0] == 0.0 and y[1] == pytest.approx(0.9)  # 90 % of the jobs at 0 s
    assert ax.get_xscale() == "symlog" and ax.get_xlim()[0] == 0.0


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[16:24]
    return struct.unpack(">II", data)


def test_comparison_plots_are_large_with_legend_outside_and_seed_band(tmp_path):
    rng = np.random.default_rng(0)
    series = {f"policy-{i}": [pd.Series(rng.exponential(1000, 200)), pd.Series(np.zeros(200))] for i in range(22)}
    path = plots.cdf_comparison(series, tmp_path / "wait.png", "wait", "wait_s (s)")
    width, height = _png_size(path)
    assert width >= 1200 and height >= 600
    table = compare.comparison([r for i in range(22) for r in _rows(f"policy-{i}", [100.0 + i, 120.0], [i, i])], "policy-0")
    width, _ = _png_size(plots.metric_bars(table, {"avg_jct_s": "avg_jct_s", "avg_wait_s": "avg_wait_s"},
                                           tmp_path / "bars.png", "bars"))
    assert width >= 1200


def test_headline_bars_have_one_colour_per_policy_and_whiskers_not_below_zero():
    table = compare.comparison([r for i in range(12) for r in _rows(f"p{i}", [100.0 + i, 3000.0], [i, i])], "p0")
    fig = plots.metric_bars_figure(table, {"avg_jct_s": "avg_jct_s"}, "bars")
    bars = fig.axes[0].patches
    assert len(bars) == 12 and len({tuple(b.get_facecolor()) for b in bars}) == 12
    lowest = min(seg[:, 1].min() for c in fig.axes[0].collections for seg in c.get_segments())
    assert lowest >= 0.0  # std (~2,000 s) > mean's distance to 0 would draw below 0 unclipped


def _spec(policy: str, params: dict, overhead: float | None = None) -> ReplaySpec:
    return ReplaySpec(experiment="e", trace="syn", trace_label="syn", source=None, format="synthetic",
                      options={"num_jobs": 10, "seed": 0}, annotate=False, load=1.0, cluster="4x8", policy=policy,
                      label=policy, params=params, seed=3, placement="consolidated", preemption_overhead_s=overhead,
                      models={"interference": "analytic", "iteration_time": "catalog"}, code_version="v")


def test_run_params_are_the_effective_configuration():
    params = run_params(_spec("tiresias", {"promote_knob": 4}))
    defaults = POLICIES["tiresias"].Params().model_dump()
    assert set(defaults) - {"promote_knob"}  # the policy has parameters left at their defaults
    for name in defaults:
        assert f"params.{name}" in params  # every parameter, defaults included
    assert params["params.promote_knob"] == "4.0"  # the validated value
    assert float(params["preemption_overhead_s"]) == POLICIES["tiresias"].default_preemption_overhead_s
    assert params["preemption_overhead.source"] == "policy default"
    assert params["trace"] == "syn" and params["cluster"] == "4x8" and params["seed"] == "3"
    assert params["model.interference"] == "analytic"
    given = run_params(_spec("sjf-bsbf", {}, overhead=12.5))
    assert given["preemption_overhead_s"] == "12.5" and given["preemption_overhead.source"] == "config"


def test_links_open_the_classic_runs_view():
    url = mlflow_view.runs_url("sqlite:///x.db", "7")
    assert url.startswith("http://127.0.0.1:5000/#/experiments/7/runs?") and "workflowType=machine_learning" in url
    assert "viewStateShareKey=schedlab-comparison" in url
    url = mlflow_view.runs_url("sqlite:///x.db", "7", search=mlflow_view.COMPARISON_FILTER)
    assert "searchFilter=tags.%60schedlab.kind%60%20%3D%20%27policy%27" in url
    assert mlflow_view.run_url("http://srv:5000/", "7", "abc") == (
        "http://srv:5000/#/experiments/7/runs/abc?workflowType=machine_learning")
    tags = mlflow_view.standard_tags("a note")
    assert tags["mlflow.note.content"] == "a note" and tags["mlflow.user"]
    table = "head\n" + "\n".join(f"| row {i} |" for i in range(2000))
    cut = mlflow_view.note_text(table)
    assert len(cut) <= 8000 and cut.splitlines()[-3].startswith("| row")


def test_replay_track_logs_an_adhoc_run(tmp_path, monkeypatch, capsys, seed_home):
    from schedlab.cli import main
    from schedlab.tasks import tracking

    home = seed_home(tmp_path / "home", prefect=False)
    monkeypatch.setenv("SCHEDLAB_HOME", str(home))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code = main(["replay", "--num-jobs", "60", "--cluster", "4x8", "--policy", "fifo", "tiresias", "--seed", "2",
                 "--set", "tiresias.promote_knob=4", "--out", str(tmp_path / "out"), "--no-progress", "--track"])
    assert code == 0
    out = capsys.readouterr().out
    assert "avg_wait_s" in out and "workflowType=machine_learning" in out
    c = tracking.client(f"sqlite:///{home / 'mlflow.db'}")
    exp = c.get_experiment_by_name("replay")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = {r.data.tags.get("schedlab.policy", "parent"): r for r in c.search_runs([exp.experiment_id])}
    assert set(runs) == {"fifo", "tiresias", "parent"}
    tiresias = runs["tiresias"]
    assert tiresias.info.status == "FINISHED"
    assert tiresias.data.tags["mlflow.parentRunId"] == runs["parent"].info.run_id
    assert tiresias.data.params["params.promote_knob"] == "4.0" and tiresias.data.params["seed"] == "2"
    assert set(f"params.{k}" for k in POLICIES["tiresias"].Params().model_dump()) <= set(tiresias.data.params)
    assert tiresias.data.metrics["jobs"] == 60 and "avg_wait_s" in tiresias.data.metrics
    assert "mlflow.user" in tiresias.data.tags and "mlflow.note.content" in tiresias.data.tags
    names = {a.path for a in c.list_artifacts(tiresias.info.run_id)}
    assert {"jobs.parquet", "summary.json", "wait_cdf.png"} <= names


def test_replay_track_checks_the_store_before_replaying(tmp_path, monkeypatch, capsys):
    from schedlab.cli import main

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    code = main(["replay", "--num-jobs", "20", "--policy", "fifo", "--out", str(tmp_path / "out"), "--track"])
    assert code == 2 and "unreachable" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
