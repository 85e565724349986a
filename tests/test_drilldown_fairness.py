"""The drill-down's fairness figures recomputed from a replay's job table (``jobs.parquet``): slowdown over
every job's solo run time (its ``duration``, never the sharing counterfactual ``exclusive_jct_estimate``),
and Jain's index over users and virtual clusters where the trace has them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from schedlab.sched.reporting import drilldown


@pytest.fixture(scope="module")
def shared():
    """castor on 300 synthetic jobs at load 2 on 2x8: some jobs start beside another, so the engine sets
    their ``exclusive_jct_estimate`` (Castor eq. 24) and leaves the others' NaN."""
    from schedlab.sched.replay import ReplaySpec, run
    from schedlab.sched.traces import LoadOptions

    [result] = run(ReplaySpec(cluster="2x8", policies=["castor"], seed=0, annotate=True, options=LoadOptions(num_jobs=300, load=2.0,
                                                                                            seed=0)))
    return result


def test_slowdown_is_over_the_duration_of_every_job(shared, tmp_path):
    jobs = pd.read_parquet(shared.write(tmp_path) / "jobs.parquet")
    estimated = jobs["exclusive_jct_estimate"].notna()
    assert 0 < estimated.sum() < len(jobs)  # the sharing counterfactual: set for the jobs that started shared only
    figures = drilldown.fairness(jobs, 16)
    slowdown = jobs["jct_s"] / jobs["duration"]
    assert figures["slowdown_mean"] == pytest.approx(float(slowdown.mean()), rel=1e-9, abs=1e-9)
    assert figures["slowdown_p99"] == pytest.approx(float(slowdown.quantile(0.99)), rel=1e-9, abs=1e-9)
    assert figures["slowdown_max"] == pytest.approx(float(slowdown.max()), rel=1e-9, abs=1e-9)
    # the old reading (the counterfactual JCT where set, queueing included) gives another figure
    mixed = jobs["jct_s"] / jobs["exclusive_jct_estimate"].where(estimated, jobs["duration"])
    assert abs(float(mixed.mean()) - figures["slowdown_mean"]) > 1e-6
