"""The sharing policies' optional decision log (``decision_log``, read by schedlab.studies.sharing_claims):
off by default, and with it on the replay is bit-identical; each record is Theorem 1 on the policy's ξ
and the engine's ξ / paces at the start."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
from schedlab.sched.policies import make_policy
from schedlab.sched.policies.sharing.policy import Castor, SJFBSBF, theorem1
from schedlab.sched.replay import run
from schedlab.sched.spec import ReplaySpec
from helpers import shared_data
from test_replay_digests import COLUMNS, DIGESTS


@pytest.mark.parametrize("case", ["castor", "sjf-bsbf"])
def test_decision_log_leaves_the_replay_bit_identical(case):
    assert Castor.decision_log is None and SJFBSBF.decision_log is None  # off unless a caller sets it
    log: list[dict] = []

    def with_log(policy):
        policy.decision_log = log
        return policy

    spec = ReplaySpec(format="synthetic", options={"num_jobs": 400, "load": 3.0, "seed": 7}, annotate=True,
                      cluster="16x4", policies=[{"name": case}], seed=7, interference="analytic")
    [result] = run(spec, wrap_policy=with_log)
    text = result.jobs[COLUMNS].to_csv(index=False, float_format=lambda x: repr(float(x)))
    assert hashlib.sha256(text.encode()).hexdigest() == json.loads(DIGESTS.read_text())[case]
    assert log, "the digest workload shares GPUs"
    ends = result.jobs.set_index("job_id")["end_time"]
    for r in log:
        share, wait = theorem1(r["partner_left_s"], r["remaining_s"] / r["speed"], r["remaining_s"],
                               r["xi_partner_pred"], r["xi_job_pred"])[1:]
        assert (r["pred_share_s"], r["pred_wait_s"]) == (share, wait)
        assert r["job_pace"] >= r["xi_job_true"] >= 1.0 and r["partner_pace"] >= r["xi_partner_true"]
        assert 0 < r["speed"] <= 1.0 and r["steps"] >= 1 and r["shared_gpus"] <= r["job_gpus"]
        assert r["exclusive_start_s"] >= -1e-6 and math.isfinite(r["exclusive_start_s"])
        assert ends[r["job"]] > r["time"] and ends[r["partner"]] > r["time"]
    if case == "sjf-bsbf":  # time-sliced, ξ from the replay's own source: prediction = truth
        assert all(r["xi_job_pred"] == r["xi_job_true"] for r in log)


def test_time_to_go_is_the_same_both_ways_on_fixed_duration_jobs():
    """``time_to_go``: the partner's nominal time to go at its pace is the engine's expected end on
    fixed-duration jobs, so expected_end replays the digest workload bit for bit too."""
    spec = ReplaySpec(format="synthetic", options={"num_jobs": 400, "load": 3.0, "seed": 7}, annotate=True,
                      cluster="16x4", policies=[{"name": "castor", "params": {"time_to_go": "expected_end"}}],
                      seed=7, interference="analytic")
    [result] = run(spec)
    text = result.jobs[COLUMNS].to_csv(index=False, float_format=lambda x: repr(float(x)))
    assert hashlib.sha256(text.encode()).hexdigest() == json.loads(DIGESTS.read_text())["castor"]
    with pytest.raises(ValueError, match="time_to_go"):
        make_policy("castor", {"time_to_go": "engine"})


def castor_pollux_log(time_to_go: str):
    """castor on castor-pollux (goodput jobs run to convergence), seed 0, with its decision log."""
    from schedlab.sched.spec import load_config

    shared_data("traces", "philly", "philly_jobs_pollux.csv")
    shared_data("profiles", "gavel", "simulation_throughputs.json")
    config = load_config("castor-pollux").model_copy(update={"seeds": [0]})
    [spec] = [s for s in config.grid("test") if math.isclose(s.load, 1.0) and s.label == "castor"]
    log: list[dict] = []

    def with_log(policy):
        policy = type(policy)(policy.params.model_copy(update={"time_to_go": time_to_go}))
        policy.decision_log = log
        return policy

    [result] = run(spec.spec(), wrap_policy=with_log)
    return result.jobs, log


def test_goodput_partners_time_to_go_is_nominal():
    """On goodput jobs the engine's expected end divides the partner's nominal seconds left by its
    epoch's goodput; Theorem 1 (Castor §5) counts the new job in nominal seconds, so by default the
    partner is too: each decision shares on the nominal time to go, and expected_end made pairs that
    the nominal time to go rejects."""
    assert Castor().params.time_to_go == SJFBSBF().params.time_to_go == "nominal"  # the default
    jobs, log = castor_pollux_log("nominal")
    assert log
    for r in log:
        assert r["partner_left_s"] == r["partner_nominal_s"]
        if r["job_partners"] == 1:  # the batch is this pair's own Alg. 2 choice: Theorem 1 says share
            assert r["pred_share_s"] < r["pred_wait_s"]
    # the epoch's goodput (their ratio) is far from 1 for some partners (0.07-1.7 on this seed)
    assert any(r["partner_nominal_s"] < 0.5 * r["partner_end_left_s"] for r in log)
    old_jobs, old_log = castor_pollux_log("expected_end")
    assert all(r["partner_left_s"] == r["partner_end_left_s"] for r in old_log)
    # pairs Theorem 1 accepted at the batch used on the expected end, and rejects on the nominal time to go
    rejected = [r for r in old_log if r["pred_share_s"] < r["pred_wait_s"] and not theorem1(
        r["partner_nominal_s"], r["remaining_s"] / r["speed"], r["remaining_s"], r["xi_partner_pred"],
        r["xi_job_pred"])[0]]
    assert rejected, "expected_end shares where the nominal time to go waits"
    assert jobs["jct_s"].mean() < old_jobs["jct_s"].mean()
