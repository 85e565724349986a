"""Round policies on a pooled cluster (``sched/core/pools.py``): an inference server that is not lent
offers no GPUs, so AFS and Pollux never target one (regression: AFS placed jobs on "server 2" of a
2-training-server cluster and failed with "server 2 has 0 free GPUs")."""

from __future__ import annotations

import pandas as pd
import pytest

from schedlab.sched.core.cluster import ClusterSpec, PoolSpec
from schedlab.sched.core.pools import LoanOptions
from helpers import replay_table


def pooled(training: int = 2, inference: int = 4, per: int = 8) -> ClusterSpec:
    return ClusterSpec(name="pooled", pools=[
        PoolSpec(name="training", servers=training, gpus_per_server=per),
        PoolSpec(name="inference", servers=inference, gpus_per_server=per, gpu_type="t4", gpu_memory_gb=16)])


def table() -> pd.DataFrame:
    # two 5-GPU jobs take one training server each (3 + 3 GPUs left); a 4-GPU job arriving later
    # fits on no single training server and must be spread over both, not put on an inference server
    return pd.DataFrame({"job_id": ["a", "b", "c"], "submit_time": [0.0, 0.0, 100.0], "num_gpus": [5, 5, 4],
                         "duration": [3000.0, 3000.0, 1000.0]})


@pytest.mark.parametrize("policy", ["afs", "pollux"])
def test_round_policy_uses_only_training_servers_when_nothing_is_lent(policy):
    result = replay_table(table(), pooled(), policy, seed=0, inference=LoanOptions(load="constant:0.2"))
    jobs = result.jobs.set_index("job_id")
    assert jobs["end_time"].notna().all()
    assert jobs.loc["c", "start_time"] == 120.0  # the first round after its arrival: 3 + 1 GPUs
    assert result.summary["jobs_ran_on_loan"] == 0 and result.summary["loan_ops"] == 0
