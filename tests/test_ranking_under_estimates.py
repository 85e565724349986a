"""The ranking experiments (each paper set-up's duration readers under five knowledge modes) and the study
that reads them: the shipped files validate and say what their labels say; the analysis keeps, flips and
refuses to separate orders as the paired numbers say."""

from __future__ import annotations

import pandas as pd
import pytest

from schedlab.studies import ranking_under_estimates as study

CONFIGS = study.DEFAULT
MODE_PARAMS = {"history": {"estimator": "history"}, "requested": {"estimator": "requested"},
               "noisy-0.5": {"estimator": "noisy", "sigma": 0.5}, "noisy-1.0": {"estimator": "noisy", "sigma": 1.0}}


@pytest.mark.parametrize("name", CONFIGS)
def test_each_reader_runs_under_every_mode_with_the_parameters_its_label_names(name):
    """(The configs read the Philly trace and Gavel's throughputs in ../shared: skipped without them.)"""
    from helpers import shared_data
    from schedlab.sched.spec import load_config

    shared_data("traces", "philly", "philly_jobs_pollux.csv")
    shared_data("profiles", "gavel", "simulation_throughputs.json")
    config = load_config(name)
    entries = {e.label: e for e in config.policy_entries()}
    readers = {study.split_label(label)[0] for label in entries if "~" in label}
    assert readers, name
    for policy in readers:
        oracle = entries[policy]
        assert oracle.params.get("knowledge", "oracle") == "oracle"
        for mode, params in MODE_PARAMS.items():
            entry = entries[f"{policy}~{mode}"]
            assert entry.name == oracle.name
            assert entry.params["knowledge"] == "estimate"
            assert {k: entry.params[k] for k in params} == params
            # everything else is the oracle run's (the same predictor, the same options)
            rest = {k: v for k, v in entry.params.items() if k not in ("knowledge", *params)}
            assert rest == oracle.params
    assert config.baseline_label == "fifo"
    assert config.grid("test")  # every replay's spec validates


def _runs(jct: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"label": label, "seed": seed, "avg_jct_s": value}
                         for label, values in jct.items() for seed, value in enumerate(values)])


def test_a_policy_that_reads_no_duration_stands_in_every_mode():
    runs = _runs({"fifo": [10.0, 12.0], "sjf": [5.0, 6.0], "sjf~history": [7.0, 8.0], "sjf~requested": [5.0, 6.0],
                  "sjf~noisy-0.5": [5.5, 6.5], "sjf~noisy-1.0": [6.0, 7.0]})
    wide = study.mode_table(runs)
    assert list(wide.columns) == study.MODES
    assert (wide.loc["fifo"].to_numpy() == [[10.0] * 5, [12.0] * 5]).all()
    assert wide.loc[("sjf", 1), "history"] == 8.0
    assert study.readers(runs) == ["sjf"]


def test_orders_are_kept_flipped_or_not_separated_as_the_paired_differences_say():
    hour = study.HOUR
    runs = _runs({
        "a": [1 * hour, 2 * hour, 3 * hour, 4 * hour, 5 * hour],
        "a~history": [3 * hour, 4 * hour, 5 * hour, 6 * hour, 7 * hour],  # now worse than b on every seed
        "b": [2 * hour, 3.1 * hour, 3.9 * hour, 5.2 * hour, 6 * hour],
        "c": [2 * hour, 3.1 * hour, 3.9 * hour, 5.2 * hour, 6 * hour],  # b's twin: never separated
    })
    wide = study.mode_table(runs)
    order = list(study.rankings(wide).index)
    assert order[0] == "a"
    verdicts = study.pair_verdicts(wide, [("a", "b"), ("b", "c")]).set_index(["better (oracle)", "mode"])
    assert verdicts.loc[("a", "oracle"), "order"] == "kept"
    assert verdicts.loc[("a", "history"), "order"] == "flipped"
    assert verdicts.loc[("a", "history"), "a_wins"] == 0
    assert verdicts.loc[("b", "oracle"), "order"] == "not separated"
    low, high = verdicts.loc[("b", "oracle"), ["ci95_low_h", "ci95_high_h"]]
    assert low <= 0 <= high


def test_the_seed_systems_are_compared_with_every_other_policy():
    pairs = study.order_pairs("ranking-castor-t5", ["pollux", "castor", "sjf", "fifo"])
    assert ("pollux", "castor") in pairs and ("castor", "sjf") in pairs and ("castor", "fifo") in pairs
    assert ("sjf", "fifo") in pairs and len(pairs) == len(set(pairs)) == 4
