"""``pollux`` on fixed-duration jobs (issue #25 item 2; Lyra Table 5's and Castor's Philly set-ups):
a job with a duration and no goodput model has a linear speed-up over the fair share (the study's
simulator, petuum/adaptdl ``osdi21-artifact`` ``simulator/pollux.py``: r / fair replicas), at its own
GPU count or within Lyra's elastic range; a reallocation is a checkpoint-restart that costs the 30 s
stall and never the job's progress, whatever the trace's ``checkpoint`` attribute."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import make_table
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.policies import make_policy
from schedlab.sched.policies.pollux.policy import Pollux
from schedlab.sched.models.scaling import speed


def job_of(row: dict):
    table = pd.DataFrame([{"job_id": "j", "submit_time": 0.0, "num_gpus": 4, "duration": 100.0, **row}])
    return jobs_from_table(table)[0]


def test_an_inelastic_job_speeds_up_linearly_over_the_fair_share_at_its_own_count_only():
    f = Pollux._duration_speedup(job_of({}), fair_gpus=2)
    assert f((4,)) == f((2, 2)) == pytest.approx(2.0)  # 4 GPUs over a fair share of 2
    assert f((2,)) == f((4, 1)) == 0.0  # it cannot run on another count
    assert Pollux._duration_speedup(job_of({"num_gpus": 1}), fair_gpus=2)((1,)) == pytest.approx(0.5)


def test_an_elastic_job_speeds_up_as_lyras_scaling_within_its_range_over_the_fair_share():
    job = job_of({"elastic_min": 4, "elastic_max": 8, "scaling_loss": 0.25})
    f = Pollux._duration_speedup(job, fair_gpus=4)
    assert f((4,)) == pytest.approx(1.0)
    assert f((4, 2)) == pytest.approx(4 * speed(4, 0.25, 6) / 4) == pytest.approx(1.375)
    assert f((3,)) == f((8, 1)) == 0.0  # outside [4, 8]


def test_a_preempted_job_without_checkpoint_keeps_its_progress_under_pollux():
    """One 8-GPU server: a long 8-GPU job runs alone until two 4-GPU jobs arrive; the harmonic mean
    prefers two running jobs to one, so pollux preempts it. Its reallocation is a checkpoint-restart:
    it resumes where it stopped (30 s stall), not from zero as Lyra's own preemption of a job without
    checkpoint would."""
    table = make_table([("long", 0.0, 8, 3600.0), ("a", 1200.0, 4, 600.0), ("b", 1200.0, 4, 600.0)])
    table["checkpoint"] = False
    jobs = jobs_from_table(table)
    result = Engine(jobs, ClusterState(load_cluster("1x8")), make_policy("pollux")).run()
    long = next(j for j in result.jobs if j.job_id == "long")
    assert long.preemptions >= 1
    assert long.lost_work_s == 0.0 and long.preemptions_lost == 0
    # ran 3600 s in all: only the stalls (30 s per start, first included) and the rounds it waited add
    assert long.end_time - long.submit_time < 3600.0 + 600.0 + 120.0 + 60.0 * (long.preemptions + 1) + 30.0 * (long.preemptions + 1)
