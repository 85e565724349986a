"""The paper-reproduction study (``schedlab.studies.reproduce_papers``): every paper table of every config it prints can be computed from the
job columns its workers keep (issue #26: the ratio tables need end, submit and deadline times)."""

import math

import numpy as np
import pandas as pd
import pytest
from schedlab.sched.results.metrics import JOB_COLUMNS as ENGINE_COLUMNS
from schedlab.sched.reporting.paper_tables import HOUR, compare, paper_tables
from schedlab.studies import reproduce_papers


@pytest.fixture(scope="module")
def script():
    return reproduce_papers


def _replay_table(seed: int) -> pd.DataFrame:
    """A job table with the engine's columns (and deadlines, waits), as a replay returns it."""
    rng = np.random.default_rng(seed)
    n = 40
    submit = np.sort(rng.uniform(0, 10 * HOUR, n))
    start = submit + rng.uniform(0, HOUR, n)
    end = start + rng.uniform(0.1 * HOUR, 5 * HOUR, n)
    table = pd.DataFrame({"job_id": [f"j{i}" for i in range(n)], "submit_time": submit, "start_time": start,
                          "end_time": end, "num_gpus": rng.choice([1, 2, 4, 8, 16], n), "duration": end - start,
                          "queue_s": start - submit, "jct_s": end - submit, "preemptions": 0,
                          "wait_s": start - submit, "deadline": submit + rng.uniform(1, 8, n) * HOUR,
                          "avg_xi": 1.0, "run_s": end - start})
    assert set(ENGINE_COLUMNS) <= set(table.columns)
    return table


@pytest.mark.slow
def test_every_printed_table_comes_from_the_kept_columns(script):
    """Each config's ratio and class tables, from the tables ``run_spec`` keeps (JOB_COLUMNS), equal
    the same tables from the full job tables; every ratio row whose labels ran has a value."""
    experiments = {e for name, spec in paper_tables().items() if spec.get("kind", "classes") in ("ratios", "classes")
                   for e in spec["experiments"]}
    assert {"gimbal-jct", "gimbal-makespan", "gimbal-deadline", "castor-pollux"} <= experiments
    for experiment in sorted(experiments):
        specs = {n: s for n, s in paper_tables().items() if experiment in s["experiments"]}
        labels = set()
        for spec in specs.values():
            rows = spec["rows"]
            labels |= {r[k] for r in rows.values() for k in ("baseline", "policy")} if spec.get("kind") == "ratios" \
                else set(rows)
        full = {(1.0, label): [_replay_table(i * 7 + seed) for seed in range(2)] for i, label in enumerate(sorted(labels))}
        kept = {key: [t[[c for c in script.JOB_COLUMNS if c in t.columns]] for t in ts] for key, ts in full.items()}
        printed = dict(script.experiment_tables(experiment, kept))
        assert len(printed) == len(specs), experiment
        for (title, frame), name in zip(printed.items(), specs):
            assert name in title
            expected = compare(name, {label: ts for (_, label), ts in full.items()})
            pd.testing.assert_frame_equal(frame.drop(columns="seeds"), expected)
            replayed = frame.drop(columns="seeds").filter(like=" ours").notna().any(axis=1)
            assert (frame.loc[replayed, "seeds"] == 2).all(), (experiment, name)  # the seeds of every mean
            if specs[name].get("kind") == "ratios":
                assert frame["ratio ours"].notna().all(), (experiment, name)
                assert "large = " not in title  # a ratio table has no large/small split (its KeyError)


def test_experiment_tables_skip_other_loads_and_figures(script):
    table = _replay_table(0)
    assert script.experiment_tables("castor-pollux", {(2.0, "castor"): [table]}) == []
    with pytest.raises(ValueError, match="kind: figures"):
        compare("gimbal-search", {"gimbal-jct": [table]})
    assert math.isclose(paper_tables()["castor-table5"]["load"], 1.0)
