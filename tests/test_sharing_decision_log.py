"""The sharing policies' optional decision log (``decision_log``, read by benchmarks/sharing_claims.py):
off by default, and with it on the replay is bit-identical; each record is Theorem 1 on the policy's ξ
and the engine's ξ / paces at the start."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
from schedlab.sched.policies.sharing_sjf import Castor, SJFBSBF, theorem1
from schedlab.sched.replay import ReplaySpec, run
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


def test_nominal_time_to_go_what_if_is_the_policy_on_fixed_duration_jobs():
    """benchmarks/sharing_claims.py's what-if differs from the policy only through goodput: on
    fixed-duration jobs the partner's nominal time to go at its pace is the engine's expected end."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "sharing_claims.py"
    module_spec = importlib.util.spec_from_file_location("sharing_claims", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    spec = ReplaySpec(format="synthetic", options={"num_jobs": 400, "load": 3.0, "seed": 7}, annotate=True,
                      cluster="16x4", policies=[{"name": "castor"}], seed=7, interference="analytic")
    [shipped] = run(spec)
    [what_if] = run(spec, wrap_policy=lambda p: module.nominal_time_to_go(type(p))(p.params))
    assert type(shipped) is type(what_if)
    assert what_if.jobs["jct_s"].to_numpy() == pytest.approx(shipped.jobs["jct_s"].to_numpy(), rel=1e-9)
    assert (shipped.jobs["shared_s"] > 0).any()
