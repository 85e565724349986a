"""Each Gimbal policy stays bit-identical on two set-ups: the first 20,000 annotated Philly jobs on
``philly-512`` (as ``schedlab.benchmarks.gimbal_speed`` runs them; ``gimbal-makespan``, round-based, on
the first 5,000) and the ``gimbal`` cluster set-up of ``conf/experiments/gimbal-jct.yaml`` (Philly-150
from day 50, Gimbal's annotation scheme, seed 0), both under ``mpscap:gavel:`` (Gavel's measured pairs).
The job table and the summary without wall-clock fields, hashed, against
``fixtures/digests/gimbal.json``. Skipped without the Philly trace or Gavel's table; re-record with
``SCHEDLAB_RECORD_DIGESTS=1``."""

from __future__ import annotations

import pytest

from helpers import FIXTURES, check_digests, shared_data, summary_digest, table_digest

pytestmark = pytest.mark.slow

RECORDED = FIXTURES / "digests" / "gimbal.json"
POLICIES = {"gimbal-jct": 20_000, "gimbal-deadline": 20_000, "gimbal-makespan": 5_000}  # -> first jobs
TIMING_FIELDS = ("lp_solve_mean_s", "lp_solve_p99_s", "load_wall_s", "gimbal_step_mean_us", "gimbal_step_p99_us")
SETUP_150 = {"start": 4320000, "max_jobs": 150}
ANNOTATE_150 = {"scheme": "gimbal", "max_duration_s": 3600, "duration_scale": 0.5}


def _digests(result) -> dict[str, str]:
    summary = summary_digest(result.summary, lambda k: k in TIMING_FIELDS or k.endswith("wall_s"))
    return {"table": table_digest(result.jobs), "summary": summary}


def _interference() -> str:
    return f"mpscap:gavel:{shared_data('profiles', 'gavel', 'simulation_throughputs.json')}"


@pytest.mark.parametrize("policy", list(POLICIES))
def test_philly_512_replay_is_bit_identical_to_the_recorded_one(policy):
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.traces import LoadOptions, load_trace
    from schedlab.sched.models.annotate import annotate

    trace = shared_data("traces", "philly", "philly_jobs_pollux.csv")
    table, _ = load_trace(trace, "philly", LoadOptions(max_jobs=POLICIES[policy], max_gpus=512))
    spec = ReplaySpec(cluster="philly-512", policies=[policy], interference=_interference())
    [result] = run(spec, prepare(spec, annotate(table, seed=0)))
    check_digests(RECORDED, f"philly-512/{POLICIES[policy]}/{policy}", _digests(result))


@pytest.mark.parametrize("policy", list(POLICIES))
def test_gimbal_150_replay_is_bit_identical_to_the_recorded_one(policy):
    from schedlab.sched.core.cluster import load_cluster
    from schedlab.sched.replay import ReplaySpec, run
    from schedlab.sched.traces import LoadOptions

    cluster = load_cluster("gimbal")
    gpus = cluster.training_pool.servers * cluster.training_pool.gpus_per_server
    spec = ReplaySpec(trace=str(shared_data("traces", "philly", "philly_jobs_pollux.csv")), format="philly",
                      options=LoadOptions(max_gpus=gpus, **SETUP_150), annotate=ANNOTATE_150, cluster=cluster,
                      policies=[policy], seed=0, interference=_interference())
    check_digests(RECORDED, f"gimbal-150/{policy}", _digests(run(spec)[0]))
