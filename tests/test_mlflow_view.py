"""What a researcher reads: the comparison table, the plots, the MLflow links, tags and params
(issue #12 §2). The experiment flow's MLflow view is checked in test_flows_experiment.py."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from schedlab.sched.policies import POLICIES
from schedlab.sched.reporting import compare, mlflow_view, plots
from schedlab.tasks.mlflow_view import log_policy_runs
from schedlab.sched.spec import ExperimentReplay
from schedlab.sched.reporting.mlflow_view import run_params


def _rows(policy: str, jcts: list[float], preemptions: list[int], wait: float = 5.0) -> list[dict]:
    return [{"trace": "t", "cluster": "c", "policy": policy, "seed": seed, "avg_jct_s": jct, "p95_jct_s": jct,
             "avg_wait_s": wait, "avg_queue_s": 1.0, "makespan_s": 1000.0, "gpu_util": 0.5, "preemptions": pre}
            for seed, (jct, pre) in enumerate(zip(jcts, preemptions))]


def test_table_has_seed_spread_integer_preemptions_mlflow_keys_and_flags_identical_policies():
    rows = (_rows("fifo", [3600.0, 10800.0], [0, 0]) + _rows("ssf", [50.0, 70.0], [3, 4], wait=9.0)
            + _rows("lucid", [50.0, 70.0], [3, 4], wait=9.0) + _rows("sjf", [50.0, 70.0], [3, 5], wait=9.0))
    table = compare.comparison(rows, "fifo", ["fifo", "ssf", "lucid", "sjf"])
    by = table.set_index("policy")
    assert by.loc["fifo", "avg_jct_s"] == 7200.0
    assert by.loc["fifo", "avg_jct_s_std"] == pytest.approx(np.std([3600.0, 10800.0], ddof=1))
    assert by.loc["ssf", "preemptions"] == 3.5 and by.loc["ssf", "avg_wait_s"] == 9.0
    # lucid's results equal ssf's seed by seed; sjf differs in one seed's preemptions
    assert by.loc["lucid", "same_as"] == "ssf" and by.loc["sjf", "same_as"] == "" and by.loc["ssf", "same_as"] == ""
    text = compare.to_text(table)
    header = text.splitlines()[1].split()
    assert {"avg_jct_s", "avg_wait_s", "avg_queue_s", "makespan_s", "preemptions", "avg_jct_speedup", "same_as"} <= set(header)
    assert "avg_jct_s (h)" in text.splitlines()[1]  # seconds metrics in hours, under their MLflow keys
    assert text.splitlines()[0] == "trace t, cluster c"
    lucid = next(line for line in text.splitlines() if line.startswith("lucid "))
    assert "= ssf" in lucid and "2.00 ± 1.41" not in lucid
    fifo = next(line for line in text.splitlines() if line.startswith("fifo "))
    assert "2.00 ± 1.41" in fifo  # mean ± sample std over the two seeds, in hours
    ssf = next(line for line in text.splitlines() if line.startswith("ssf "))
    assert " 4 ± 1 " in ssf and "3.5" not in ssf  # preemptions as whole numbers
    assert "| same_as |" in compare.to_markdown(table) and "= ssf" in compare.to_markdown(table)


def test_table_without_identical_policies_has_no_same_as_column_and_one_seed_no_spread():
    table = compare.comparison(_rows("fifo", [100.0], [0]) + _rows("sjf", [50.0], [1]), "fifo")
    assert "same_as" not in compare.to_text(table).splitlines()[1]
    assert math.isnan(table.loc[0, "avg_jct_s_std"]) and "±" not in compare.to_text(table)


def test_policy_styles_distinct_for_many_policies():
    labels = [f"p{i}" for i in range(25)]
    styles = plots.policy_styles(labels)
    assert len({s["color"] for s in styles.values()}) == 25  # a colour of its own (today fifo = tiresias)
    assert len({(s["linestyle"], s["marker"]) for s in styles.values()}) == 25  # and a line style + marker
    assert len({s["hatch"] for s in list(styles.values())[:7]}) == 7
    assert len({s["color"] for s in plots.policy_styles([f"p{i}" for i in range(80)]).values()}) == 80


def test_rank_sorts_by_the_metric_and_compares_each_row_paired_with_the_one_above_and_the_baseline():
    rows = (_rows("fifo", [30000.0, 30100.0, 29000.0], [0, 0, 0]) + _rows("a", [14400.0, 14000.0, 14300.0], [0, 0, 0])
            + _rows("b", [14100.0, 14200.0, 14150.0], [0, 0, 0]) + _rows("c", [9000.0, 9050.0, 9020.0], [0, 0, 0]))
    table = compare.rank(compare.comparison(rows, "fifo", ["fifo", "a", "b", "c"]), "avg_jct_s", rows, "fifo")
    assert list(table["policy"]) == ["c", "b", "a", "fifo"]  # not the config's order, not the finishing order
    above = dict(zip(table["policy"], table[compare.VS_ABOVE]))
    assert above["c"] == "" and above["b"] == "worse than c: 1.42 [1.41, 1.44] h, wins 0/3"  # b - c per seed, in hours
    # a - b: +300, -200, +150 s: the interval holds 0 (the seeds disagree), whatever the means' order
    assert above["a"].startswith("not separated from b:") and above["a"].endswith("wins 1/3")
    assert above["fifo"].startswith("worse than a:")
    baseline = dict(zip(table["policy"], table[compare.VS_BASELINE]))
    assert baseline["fifo"] == "" and all(baseline[p].startswith("better than fifo:") for p in "abc")
    markdown = compare.to_markdown(table)
    assert "| vs_above |" in markdown and "not separated from b" in markdown.splitlines()[4]
    assert [line.split("|")[4].strip() for line in markdown.splitlines()[2:]] == ["c", "b", "a", "fifo"]
    # shown with the baseline first (the row every other is read against), each row keeping its rank
    first = compare.to_markdown(table, "fifo").splitlines()[2:]
    assert [(ln.split("|")[3].strip(), ln.split("|")[4].strip()) for ln in first] == [
        ("4", "fifo"), ("1", "c"), ("2", "b"), ("3", "a")]
    text = compare.to_text(table, "fifo").splitlines()
    assert text[1].split()[:2] == ["#", "policy"] and text[3].split()[:2] == ["4", "fifo"] and text[4].split()[:2] == ["1", "c"]
    assert "3.95 ± 0.06" in markdown.splitlines()[4]  # a: (14400 + 14000 + 14300) / 3 s in hours
    csv = compare.csv_frame(table, compare.pairs_of(table, rows, "fifo", "avg_jct_s"))
    assert {"vs", "paired_diff_mean", "ci95_low", "ci95_high", "wins", "seeds", "verdict"} <= set(csv.columns)
    assert list(csv.loc[csv["policy"] == "a", "vs"]) == ["fifo", "b"] and list(csv.loc[csv["policy"] == "c", "vs"]) == ["fifo"]
    assert list(csv.loc[csv["policy"] == "fifo", "vs"]) == ["a"]  # the baseline, ranked last: against the row above
    a_fifo = csv[(csv["policy"] == "a") & (csv["vs"] == "fifo")].iloc[0]
    assert a_fifo["verdict"] == "better" and a_fifo["ci95_high"] < 0 and a_fifo["wins"] == 3 and a_fifo["seeds"] == 3
    assert a_fifo["paired_diff_mean"] == pytest.approx((14400 + 14000 + 14300 - 30000 - 30100 - 29000) / 3)
    gpu = compare.rank(compare.comparison(rows, "fifo"), "gpu_util", rows, "fifo")
    assert all(cell.startswith("not separated from") for cell in gpu[compare.VS_ABOVE][1:])  # equal utilisation
    one = [r for r in rows if r["seed"] == 0]
    single = compare.rank(compare.comparison(one, "fifo"), "avg_jct_s", one, "fifo")
    assert set(single[compare.VS_ABOVE][1:]) == {f"vs {p}: one seed, nothing separated" for p in "cba"}


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


@pytest.mark.slow
def test_cdf_legend_names_the_tail_in_hours_and_shows_the_top_and_the_baseline(tmp_path):
    rng = np.random.default_rng(0)
    gandiva = np.zeros(1000)
    gandiva[:5] = 354_428.0  # 0.5 % of the jobs wait four days: not "100% at 0"
    series = {f"policy-{i}": [pd.Series(rng.exponential(1000, 200)), pd.Series(rng.exponential(900, 200))]
              for i in range(22)}
    series["gandiva"] = [pd.Series(gandiva)]
    order = ["gandiva", *(f"policy-{i}" for i in range(1, 22)), "policy-0"]
    t = plots.tail(gandiva / 3600)
    assert t["max"] == pytest.approx(98.45, abs=0.01) and t["over_day"] == 5 and plots.tail_text(t).endswith("99% at 0")
    labels = []  # the legend: the top 3 and the baseline, each with its tail
    original = plots._cdf

    def spy(ax, values, label=None, **kw):
        labels.append(label)
        return original(ax, values, label=label, **kw)

    plots._cdf = spy
    try:
        path = plots.cdf_comparison(series, tmp_path / "wait.png", "wait", "wait", order=order, top=3,
                                    baseline="policy-0", stamp="as of 45 of 46 replays")
    finally:
        plots._cdf = original
    width, height = _png_size(path)
    assert width >= 2000 and height >= 1000  # 2x
    assert [lb.split(":")[0] for lb in labels] == ["gandiva", "policy-1", "policy-2", "policy-0 (baseline)"]
    assert labels[0] == "gandiva: p95 0 h, p99 0 h, max 98.5 h, 5 jobs > 24 h, 99% at 0"  # hours, not days
    grid = plots.cdf_grid(series, tmp_path / "grid.png", "wait", "wait", order=order, baseline="policy-0")
    assert _png_size(grid)[1] > _png_size(grid)[0]  # 23 panels, 4 a row
    svg = path.with_suffix(".svg").read_text()
    assert "as of 45 of 46 replays" in svg and "(h; symmetric log" in svg  # stamped; x in hours


def test_jct_cdf_in_hours_on_a_log_axis_and_tails_as_a_ccdf_with_p95_p99_marked(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    series = {"fifo": [pd.Series(rng.exponential(7200, 400)), pd.Series(rng.exponential(7000, 400))],
              "sjf": [pd.Series(rng.exponential(3600, 800))]}
    drawn = {}
    monkeypatch.setattr(plots, "save", lambda fig, path, svg_width=None: drawn.setdefault(path.name, fig) and path)
    plots.cdf_comparison(series, tmp_path / "jct.png", "JCT", "JCT", baseline="fifo")
    ax = drawn["jct.png"].axes[0]
    assert ax.get_xscale() == "log" and "JCT (h; log" in ax.get_xlabel()  # no 0 in a JCT: plain log, hours
    x, _ = ax.lines[0].get_data()
    assert max(x) == pytest.approx(max(max(s) for s in series["fifo"]) / 3600)
    plots.ccdf_comparison(series, tmp_path / "ccdf.png", "JCT", "JCT", baseline="fifo", stamp="as of 3 of 4 replays")
    ax = drawn["ccdf.png"].axes[0]
    assert ax.get_yscale() == "log" and ax.get_xscale() == "linear" and ax.get_xlabel() == "JCT (h, linear)"
    assert {round(line.get_ydata()[0], 6) for line in ax.lines if line.get_linestyle() == "--"
            and len(set(line.get_ydata())) == 1} >= {0.05, 0.01}  # the p95 and p99 levels
    assert {t.get_text().strip() for t in ax.texts} == {"p95", "p99"}
    marks = [line for line in ax.lines if line.get_linestyle() == "None"]
    sjf = np.concatenate(series["sjf"]) / 3600
    assert marks[1].get_xdata() == pytest.approx([np.quantile(sjf, 0.95), np.quantile(sjf, 0.99)])
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[1].startswith(f"sjf: p95 {plots.hours_text(float(np.quantile(sjf, 0.95)))}")
    assert "as of 3 of 4 replays" in ax.get_title()
    _, y = ax.lines[0].get_data()
    assert y[0] == 1.0 and min(y) == pytest.approx(1 / 800)  # every job above 0; the last one's level


def _paper_rows(seeds: int = 5) -> list[dict]:
    """fifo, sjf (better on every seed), srtf (no better than fifo: the seeds disagree), makespan and
    utilisation equal within 1 %, waits of a few seconds to an hour."""
    rows = []
    for seed in range(seeds):
        hard = (1.0, 1.4, 0.7, 1.2, 0.9)[seed]  # a hard seed is hard for every policy
        for policy, jct, off, wait in (("fifo", 40000, 0, 3600.0), ("sjf", 20000, 300, 2.0), ("srtf", 40000, 4000, 1.0)):
            rows.append({"trace": "t", "cluster": "c", "policy": policy, "seed": seed,
                         "avg_jct_s": jct * hard + off * (1, -1, 0.5, -0.6, 0.1)[seed], "p95_jct_s": 2.5 * jct * hard,
                         "avg_wait_s": wait, "avg_queue_s": wait, "makespan_s": 1e6 * (1 + 0.001 * len(policy)),
                         "gpu_util": 0.178 + 0.0005 * len(policy), "preemptions": 0})
    return rows


def test_normalised_bars_with_the_paired_interval_absolute_waits_and_what_is_left_out():
    from schedlab.sched.reporting import bars, paired

    rows = _paper_rows()
    frame = pd.DataFrame(rows)
    order = ["sjf", "srtf", "fifo"]
    jct = {b.policy: b for b in bars.bars_of(frame, order, "fifo", "avg_jct_s")}
    means = frame.groupby("policy")["avg_jct_s"].mean()
    assert jct["sjf"].value == pytest.approx(means["sjf"] / means["fifo"]) and jct["fifo"].value == 1.0
    by_seed = paired.by_seed(frame, "avg_jct_s")
    p = paired.paired(by_seed["sjf"], by_seed["fifo"])
    assert (jct["sjf"].low, jct["sjf"].high) == pytest.approx((1 + p.low / means["fifo"], 1 + p.high / means["fifo"]))
    assert jct["sjf"].high < 1 and jct["sjf"].versus.verdict == paired.BETTER  # the whisker excludes 1: better
    assert jct["srtf"].low < 1 < jct["srtf"].high and jct["srtf"].versus.verdict == paired.NOT_SEPARATED
    waits = {b.policy: b.value for b in bars.bars_of(frame, order, "fifo", "avg_wait_s")}
    assert waits == pytest.approx({"sjf": 2 / 3600, "srtf": 1 / 3600, "fifo": 1.0})  # hours, not a 3,600x ratio

    fig, omitted = bars.bars_figure(frame, order, "fifo", "t on c", "as of 15 of 18 replays")
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles == ["normalised avg_jct_s: mean over fifo's", "normalised p95_jct_s: mean over fifo's",
                      "avg_wait_s (h): mean over seeds"]
    assert set(omitted) == {"makespan_s", "gpu_util"} and omitted["makespan_s"] == "every policy within 2% of fifo"
    foot = fig.texts[-1].get_text()
    assert "left out" in foot and "makespan_s: every policy within 2% of fifo" in foot and "gpu_util" in foot
    assert "as of 15 of 18 replays" in fig._suptitle.get_text() and "95 % interval" in fig._suptitle.get_text()
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["sjf", "srtf", "fifo (baseline)"]  # names on the bars
    assert [round(b.get_width(), 6) for b in ax.patches] == [round(jct[p].value, 6) for p in order]
    assert ax.texts[0].get_text().strip().startswith(f"{jct['sjf'].value:.2f}  better, wins 5/5")
    assert len(ax.containers) == 3 + 2  # 3 bars, a whisker for sjf and srtf (none for the baseline)
    wait_ax = fig.axes[2]
    assert wait_ax.get_xlim()[1] < 2 and "0.00 h" in " ".join(t.get_text() for t in wait_ax.texts)

    # separated by less than 2 %, or not separated at all: no panel
    noisy = [{**r, "avg_wait_s": 3600.0 * (1 + (0.5 if (r["seed"] + len(r["policy"])) % 2 else -0.5))} for r in rows]
    _, omitted = bars.bars_figure(pd.DataFrame(noisy), order, "fifo", "t", "as of 15 of 15 replays")
    assert omitted["avg_wait_s"].startswith("no policy 2% or more from fifo is separated from it at 95 %")


def test_normalised_bars_with_one_seed_have_no_whisker_and_say_so():
    from schedlab.sched.reporting import bars

    frame = pd.DataFrame(_paper_rows(seeds=1))
    fig, omitted = bars.bars_figure(frame, ["sjf", "srtf", "fifo"], "fifo", "t", "as of 3 of 3 replays")
    assert "one seed: no interval, no whisker" in fig._suptitle.get_text()
    assert not fig.axes[0].containers[3:]  # bars only
    assert "avg_jct_s" not in omitted  # the ranking metric is always drawn


def test_comparison_html_is_self_contained_ranked_and_has_every_policy():
    from schedlab.sched.reporting import comparison_html

    rows = [r for i, p in enumerate(["fifo", "b<x>", "c", "d"]) for r in _rows(p, [9000.0 - 1000 * i, 9100.0 - 1000 * i], [0, 0])]
    table = compare.rank(compare.comparison(rows, "fifo"), "avg_jct_s")
    styles = plots.policy_styles(["fifo", "b<x>", "c", "d"])
    page = comparison_html.comparison_html(table, rows, "fifo", "avg_jct_s", "quick", "4 of 8 replays finished",
                                       {k: v["color"] for k, v in styles.items()}, [("bars", b"\x89PNG fake")])
    for policy in ("fifo", "b&lt;x&gt;", "c", "d"):
        assert f"</span>{policy}" in page
    # the baseline's row first, then best first; each row's rank in the "#" column
    assert page.index("</span>fifo") < page.index("</span>d") < page.index("</span>c") < page.index("</span>b&lt;x&gt;")
    assert "<th>#</th>" in page and "<tr class='base'>\n<td class='n' data-v='4'>4</td>" in page  # fifo ranks 4th
    assert "<details" not in page and "data:image/png;base64," in page  # open, figures inline
    lowered = page.lower()
    assert "<link" not in lowered and "src='http" not in lowered and 'src="http' not in lowered
    assert "<script src" not in lowered and "@import" not in lowered and "cdn" not in lowered
    assert page.count("<svg") == 4 and styles["d"]["color"] in page  # a seed strip per policy, its colour
    # the strips span the leaders (d 1.68 h, c within 25 %): b and fifo are arrows at the edge
    assert page.count("<polygon") == 2 and "1.6" in page.split("(leaders)")[0][-40:]


def _spec(policy: str, params: dict, overhead: float | None = None) -> ExperimentReplay:
    return ExperimentReplay(experiment="e", trace="syn", trace_label="syn", source=None, format="synthetic",
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


@pytest.mark.slow
def test_policy_runs_write_only_the_rows_that_changed(tmp_path: Path) -> None:
    # a live comparison calls log_policy_runs after every replay: unchanged rows are not written again
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = MlflowClient(uri)
    experiment = c.create_experiment("e", artifact_location=str(tmp_path / "artifacts"))
    parent = c.create_run(experiment).info.run_id
    rows = _rows("fifo", [100.0, 120.0], [0, 0]) + _rows("sjf", [80.0, 90.0], [0, 0])
    first = log_policy_runs(uri, experiment, parent, compare.comparison(rows, "fifo"), "fifo")
    rows[-1]["avg_jct_s"] = 70.0  # sjf's second seed changes, fifo's row does not
    again = log_policy_runs(uri, experiment, parent, compare.comparison(rows, "fifo"), "fifo")
    assert first == again
    history = {c.get_run(run_id).data.tags["schedlab.label"]: len(c.get_metric_history(run_id, "avg_jct_s"))
               for run_id in again.values()}
    assert history == {"fifo": 1, "sjf": 2}
    sjf = next(r for r in again.values() if c.get_run(r).data.tags["schedlab.label"] == "sjf")
    assert c.get_run(sjf).data.metrics["avg_jct_s"] == 75.0


def test_the_mlflow_view_in_hours_baseline_first_and_reachable_from_the_experiments_description(tmp_path: Path) -> None:
    """Against a real sqlite store: the policy runs carry the times in hours (the view's columns and
    charts), the view sorts the baseline first, and the experiment's description links the view."""
    from mlflow.tracking import MlflowClient

    from schedlab.tasks.mlflow_view import comparison_view, describe_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = MlflowClient(uri)
    experiment = c.create_experiment("e", artifact_location=str(tmp_path / "artifacts"))
    parent = c.create_run(experiment).info.run_id
    rows = (_rows("fifo", [36000.0, 39600.0], [0, 0]) + _rows("sjf", [7200.0, 9000.0], [0, 0])
            + _rows("srtf", [18000.0, 18000.0], [0, 0]))
    table = compare.rank(compare.comparison(rows, "fifo"), "avg_jct_s", rows, "fifo")
    ids = log_policy_runs(uri, experiment, parent, table, "fifo")
    runs = {c.get_run(r).data.tags["schedlab.label"]: c.get_run(r).data.metrics for r in ids.values()}
    assert runs["fifo"]["avg_jct_h"] == 10.5 and runs["fifo"]["avg_jct_s"] == 37800.0  # both: the CSV reads seconds
    assert runs["sjf"]["avg_jct_h_sd"] == pytest.approx(np.std([2.0, 2.5], ddof=1), abs=1e-3)
    assert runs["sjf"]["avg_wait_h"] == pytest.approx(5 / 3600, abs=1e-3) and "makespan_h" in runs["sjf"]
    order = sorted(runs, key=lambda p: runs[p][mlflow_view.VIEW_ORDER])
    assert order == ["fifo", "sjf", "srtf"] and [runs[p]["rank"] for p in order] == [3, 1, 2]

    comparison_view(uri, experiment, "avg_jct_s")
    describe_experiment(uri, experiment, "three *policies*", comparison=True)
    tags = c.get_experiment(experiment).tags
    view = json.loads(tags[mlflow_view.SHARED_VIEW_PREFIX + mlflow_view.VIEW_KEY])
    assert view["orderByKey"] == "metrics.`view_order`" and view["orderByAsc"] is True
    columns = [col.split("`")[1] for col in view["selectedColumns"] if col.startswith("metrics.")]
    assert "avg_jct_h" in columns and not any(col.endswith("_s") or col.endswith("_s_std") for col in columns)
    assert max(len(col) for col in columns) <= 13  # MLflow gives a column 100 px: avg_jct_speedup was cut
    assert runs["sjf"]["avg_jct_norm"] == pytest.approx(8100 / 37800, abs=1e-3)  # policy ÷ baseline, as the bars
    shown = [card["metricKey"] for card in view["compareRunCharts"] if not card["deleted"]]
    assert shown[0] == "avg_jct_h" and "makespan_h" in shown
    hidden = {card["metricKey"] for card in view["compareRunCharts"] if card["deleted"]}
    assert set(runs["fifo"]) <= set(shown) | hidden  # no metric for the UI to chart on its own
    link = mlflow_view.runs_url(uri, experiment)
    assert tags[mlflow_view.VIEW_LINK_TAG] == link and "viewStateShareKey=schedlab-comparison" in link
    note = tags["mlflow.note.content"]
    assert note.startswith(f"Comparison view (classic runs view, baseline first): [{link}]({link})")
    assert note.endswith("three &#42;policies&#42;") and tags["mlflow.experimentKind"] == "custom_model_development"
    # a replay run's metrics: the headline times in hours beside the seconds
    metrics = mlflow_view.run_metrics({"avg_jct_s": 7200.0, "makespan_s": 36000.0, "jobs": 3, "seed": 1})
    assert metrics == {"avg_jct_s": 7200.0, "makespan_s": 36000.0, "jobs": 3.0, "avg_jct_h": 2.0, "makespan_h": 10.0}


def test_live_figures_and_page_say_which_replays_they_include(tmp_path: Path) -> None:
    """During a run the bars are redrawn less often than the table: each says which replays it holds."""
    from schedlab.sched.reporting.live import LiveTable
    from schedlab.sched.spec import load_config

    path = tmp_path / "exp.yaml"
    path.write_text("name: e\nbaseline: fifo\nseeds: [0, 1]\ntraces:\n  - {name: syn, format: synthetic,"
                    " options: {num_jobs: 20}}\nclusters: [4x8]\npolicies: [fifo, sjf]\n")
    live = LiveTable(load_config(path), load_config(path).grid("v"))
    jct = {("fifo", 0): 9000.0, ("fifo", 1): 9900.0, ("sjf", 0): 3600.0, ("sjf", 1): 4000.0}
    metrics = {"avg_wait_s": 10.0, "avg_queue_s": 5.0, "makespan_s": 1e5, "gpu_util": 0.5, "preemptions": 0}
    specs = sorted(live.specs, key=lambda s: (s.seed, s.label))
    for spec in specs[:3]:
        live.finished(spec, {**metrics, "avg_jct_s": jct[(spec.label, spec.seed)], "p95_jct_s": 2 * jct[(spec.label, spec.seed)]})
    bars = live.headline_bars(live.table(), tmp_path)
    (caption, png), = bars.values()
    assert caption.startswith("headline__syn__4x8.png: normalised bars, as of 3 of 4 replays")
    assert "makespan_s left out: every policy within 2% of fifo" in caption and png.startswith(b"\x89PNG")
    spec = specs[3]
    live.finished(spec, {**metrics, "avg_jct_s": jct[(spec.label, spec.seed)], "p95_jct_s": 2 * jct[(spec.label, spec.seed)]})
    page = live.page(live.table(), list(bars.values()))  # the table has moved on, the bars not yet
    assert "table as of 4 of 4 replays" in page and "normalised bars, as of 3 of 4 replays" in page
    assert page.index("</span>fifo") < page.index("</span>sjf")  # the baseline first, though ranked second
