"""Paper-vs-ours tables: the published tables are well-formed and ours are aggregated as each paper does."""

import math

import pandas as pd
import pytest
from schedlab.sched.reporting.paper_tables import (
    HOUR,
    KINDS,
    RATIO_METRICS,
    SCHEME_COLUMNS,
    compare,
    metric_value,
    our_row,
    paper_tables,
    tables_for_experiment,
)


def test_published_tables_are_well_formed():
    for name, spec in paper_tables().items():
        kind = spec.get("kind", "classes")
        assert kind in KINDS, name
        if kind == "schemes":
            assert spec["experiments"] and spec["baseline"] in spec["rows"], name
            assert tuple(spec["columns"]) == SCHEME_COLUMNS, name
            for row, r in spec["rows"].items():
                assert len(r["paper"]) == len(spec["columns"]), (name, row)
                assert all(v is None or (math.isfinite(v) and v >= 0) for v in r["paper"]), (name, row)
                assert r.get("reference") is None or r["reference"] in spec["rows"], (name, row)
            continue
        if kind != "classes":
            for row, r in spec["rows"].items():
                assert math.isfinite(r["paper"]) and r["paper"] > 0, (name, row)
                if kind == "ratios":
                    assert r["metric"] in RATIO_METRICS and r["baseline"] and r["policy"], (name, row)
            continue
        assert spec["experiments"], name
        assert spec["class_average"] in ("mean", "share"), name
        for policy, row in spec["rows"].items():
            assert len(row) == len(spec["columns"]), (name, policy)
            assert all(math.isfinite(v) and v >= 0 for v in row), (name, policy)
        for experiment, measured in (spec.get("measured") or {}).items():  # ours, per experiment
            assert experiment in spec["experiments"], (name, experiment)
            assert measured["seeds"] >= 1 and measured["rows"], (name, experiment)
            for policy, row in measured["rows"].items():
                assert len(row) == len(spec["columns"]), (name, experiment, policy)
                assert all(math.isfinite(v) and v >= 0 for v in row), (name, experiment, policy)
            # Castor Table 5 is read as `share`: ours, too, have All = Large + Small
            if spec["class_average"] == "share":
                for policy, row in measured["rows"].items():
                    assert row[0] == pytest.approx(row[1] + row[2], abs=0.011), (name, experiment, policy)


def test_castor_table5_all_is_large_plus_small():
    """Why Castor Table 5 is read as `share`: All = Large + Small in its JCT columns, every row."""
    spec = paper_tables()["castor-table5"]
    for policy, row in spec["rows"].items():
        assert row[0] == pytest.approx(row[1] + row[2], abs=0.011), policy


def test_class_average_mean_and_share():
    jobs = pd.DataFrame({"num_gpus": [1, 1, 16], "jct_s": [1.0, 3.0, 8.0], "wait_s": [0.0, 1.0, 2.0]})
    jobs["jct_s"] *= HOUR
    jobs["wait_s"] *= HOUR
    assert our_row(jobs, 8, "mean") == pytest.approx([4.0, 8.0, 2.0, 1.0, 2.0, 0.5])
    share = our_row(jobs, 8, "share")
    assert share == pytest.approx([4.0, 8 / 3, 4 / 3, 1.0, 2 / 3, 1 / 3])
    assert share[0] == pytest.approx(share[1] + share[2])
    with pytest.raises(ValueError, match="class_average"):
        our_row(jobs, 8, "median")


def test_compare_uses_the_tables_aggregation():
    jobs = pd.DataFrame({"num_gpus": [1, 16], "jct_s": [HOUR, 3 * HOUR], "wait_s": [0.0, HOUR]})
    table = compare("castor-table5", {"fifo": [jobs]})
    assert table.loc["fifo", "avg_jct_large ours"] == pytest.approx(1.5)
    assert table.loc["fifo", "avg_jct_large paper"] == 1.04
    assert "castor" in table.index  # published rows we did not replay are still shown
    assert set(tables_for_experiment("sjf-bsbf-pollux-480")) == {"sjf-bsbf-table4"}


def test_gimbal_ratios_follow_the_papers_direction():
    """Times: baseline / policy; deadlines: policy / baseline; the paper's printed values agree with its ratios."""
    base = pd.DataFrame({"num_gpus": [1, 2], "submit_time": [0.0, 0.0], "end_time": [2 * HOUR, 4 * HOUR],
                         "jct_s": [2 * HOUR, 4 * HOUR], "wait_s": [HOUR, 2 * HOUR], "deadline": [HOUR, 5 * HOUR]})
    better = base.assign(end_time=[HOUR, 2 * HOUR], jct_s=[HOUR, 2 * HOUR], wait_s=[0.5 * HOUR, HOUR])
    assert metric_value(base, "makespan") == 4.0 and metric_value(better, "deadline_met") == 2.0
    table = compare("gimbal-philly", {"lucid": [base], "gimbal-jct": [better], "gandiva": [base],
                                      "gimbal-deadline": [better]})
    assert table.loc["jct_vs_lucid", "ratio ours"] == pytest.approx(2.0)
    assert table.loc["queue_vs_lucid", "ratio ours"] == pytest.approx(2.0)
    assert table.loc["deadline_vs_gandiva", "ratio ours"] == pytest.approx(2.0)  # 2 met vs 1
    assert math.isnan(table.loc["makespan_vs_gavel", "ratio ours"])  # gavel not replayed
    assert table.loc["jct_vs_lucid", "ratio paper"] == 1.28
    spec = paper_tables()["gimbal-philly"]["rows"]
    b, p = spec["deadline_vs_gandiva"]["paper_values"]
    assert p / b == pytest.approx(spec["deadline_vs_gandiva"]["paper"], abs=0.005)
    b, p = spec["makespan_vs_gavel"]["paper_values"]
    assert b / p == pytest.approx(spec["makespan_vs_gavel"]["paper"], abs=0.015)  # 4.5/4.05 = 1.11, printed 1.12
    assert set(tables_for_experiment("gimbal-ablation")) == {"gimbal-ablation"}


def test_lyra_table5_reductions_follow_the_paper():
    """Lyra Table 5: `vs fifo` = FIFO / row (Basic: the paper's 1.53x queueing, 1.48x JCT), `vs ref` =
    row / the group's Lyra row ("Reduction = scheme / Lyra": SCF's 1.26x queueing, AFS's 1.25x JCT);
    ours from the job tables and summaries, averaged over seeds."""
    def jobs(queue: list[float], run: float, preemptions: int = 0) -> pd.DataFrame:
        q = pd.Series(queue)
        return pd.DataFrame({"num_gpus": 1, "queue_s": q, "jct_s": q + run, "wait_s": q,
                             "preemptions": [preemptions] + [0] * (len(q) - 1)})

    fifo = [jobs([0.0, 100.0, 200.0, 300.0], 100.0)]
    lyra = [jobs([0.0, 50.0, 50.0, 100.0], 100.0, 1), jobs([0.0, 0.0, 50.0, 50.0], 100.0, 3)]
    summaries = {"fifo": [{"gpu_util": 0.5, "training_usage": 0.7, "overall_usage_raw": 0.5}],
                 "lyra-loan": [{"training_usage": 0.8, "overall_usage_raw": 0.6}, {"training_usage": 0.9}]}
    table = compare("lyra-table5", {"fifo": fifo, "lyra-loan": lyra, "lyra-loan-scf": fifo}, summaries)
    assert table.loc["fifo", "queue_mean_s ours"] == pytest.approx(150.0)
    assert table.loc["fifo", "queue_p50_s ours"] == pytest.approx(150.0)
    assert table.loc["lyra-loan", "queue_mean_s ours"] == pytest.approx(37.5)  # seed mean of 50 and 25
    assert table.loc["lyra-loan", "jct_mean_s ours"] == pytest.approx(137.5)
    assert table.loc["lyra-loan", "preemption_ratio ours"] == pytest.approx((1 / 4 + 3 / 4) / 2)
    assert table.loc["fifo", "usage_training ours"] == 0.7  # training_usage before gpu_util
    assert table.loc["lyra-loan", "usage_training ours"] == pytest.approx(0.85)
    assert math.isnan(table.loc["lyra-loan", "usage_overall ours"])  # a seed without it: NaN, not 0.6
    assert table.loc["lyra-loan", "queue_mean_s vs fifo ours"] == pytest.approx(4.0)
    assert table.loc["lyra-loan-scf", "queue_mean_s vs ref ours"] == pytest.approx(4.0)  # SCF / Lyra
    assert table.loc["lyra-loan-scf", "jct_mean_s vs ref ours"] == pytest.approx(250 / 137.5)
    assert math.isnan(table.loc["lyra-basic", "queue_mean_s ours"])  # not replayed: paper only
    paper = paper_tables()["lyra-table5"]["rows"]
    assert table.loc["lyra-basic", "queue_mean_s vs fifo paper"] == pytest.approx(1.53, abs=0.005)
    assert table.loc["lyra-basic", "jct_mean_s vs fifo paper"] == pytest.approx(1.48, abs=0.005)
    assert table.loc["lyra-loan-scf", "queue_mean_s vs ref paper"] == pytest.approx(1.26, abs=0.005)
    assert table.loc["lyra-loan-random", "jct_mean_s vs ref paper"] == pytest.approx(1.13, abs=0.005)
    assert table.loc["afs", "jct_mean_s vs ref paper"] == pytest.approx(1.25, abs=0.005)  # spec A12
    assert "reference" not in paper["lyra-scaling"] and paper["afs"]["reference"] == "lyra-scaling"
    assert math.isnan(table.loc["pollux", "usage_overall paper"])  # NA in the paper


def test_window_usage_integrates_the_steps_inside_the_window():
    """Busy 8 of 16 GPUs on [0, 10), 16 on [10, 20), 4 after: over [5, 15) that is (8x5 + 16x5) / (16x10).
    With pools, the on-loan busy GPUs leave the training figure, the on-loan usage is their GPU-seconds
    over the lent ones inside the window (not the makespan's), and overall adds the inference
    GPU-seconds over all GPUs."""
    from schedlab.sched.reporting.paper_tables import window_usage

    steps = pd.DataFrame({"time": [0.0, 10.0, 20.0], "busy_gpus": [8, 16, 4]})
    training, overall, onloan = window_usage(steps, 5.0, 15.0, 16)
    assert training == pytest.approx(0.75) and math.isnan(overall) and math.isnan(onloan)
    # 2 x 8 GPUs lent on [10, 20) with 8 of them busy, then 1 server lent and idle from 20 on
    pooled = steps.assign(servers_on_loan=[0, 2, 1], onloan_busy_gpus=[0, 8, 0])
    training, overall, onloan = window_usage(pooled, 5.0, 15.0, 16, 8, inference_gpus=16, inference_busy=40.0)
    assert training == pytest.approx((40 + 80 - 8 * 5) / (16 * 10))
    assert overall == pytest.approx((120 + 40) / (32 * 10))
    assert onloan == pytest.approx(8 * 5 / (16 * 5))
    assert window_usage(pooled, 5.0, 30.0, 16, 8)[2] == pytest.approx(8 * 10 / (16 * 10 + 8 * 10))  # idle tail
    assert window_usage(steps, 25.0, 30.0, 16)[0] == pytest.approx(0.25)


def test_lyra_configs_replay_every_table5_row():
    """The lyra-*.yaml configs load (scenario annotation and inference key validated) and together give
    every row of lyra-table5 a label; loaning rows have the inference load, scaling rows none (they
    read the ServeGen series in ../shared: skipped without it)."""
    from helpers import shared_data
    from schedlab.sched.spec import load_config

    shared_data("inference", "servegen_total_rate_per_10min.csv")
    spec = paper_tables()["lyra-table5"]
    labels: dict[str, object] = {}
    for name in spec["experiments"]:
        config = load_config(name)
        assert config.clusters == ["lyra-sim"], name
        for entry in config.policy_entries():
            labels[entry.label] = config
    assert set(spec["rows"]) <= set(labels)
    for label in ("lyra-basic", "lyra-loan", "lyra-loan-scf", "lyra-loan-random", "opportunistic", "lyra-ideal"):
        assert labels[label].inference is not None, label
    for label in ("afs", "pollux", "gandiva-elastic", "lyra-scaling", "lyra-tuned"):
        assert labels[label].inference is None, label
    scenarios = {labels[label].traces[0].annotate["scenario"] for label in spec["rows"]}
    assert scenarios == {"basic", "advanced", "heterogeneous", "ideal"}
