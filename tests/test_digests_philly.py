"""Every baseline and ``gavel`` on the first Philly jobs on ``philly-512`` stays bit-identical: the job
table (every column), the summary's result fields and the utilization table, hashed, against
``fixtures/digests/philly.json``. The trace is loaded as the speed benchmarks load it
(``schedlab.benchmarks.replay_speed``: ``max_gpus`` 512); the sharing policy is given workloads by
``annotate(table, seed=0)`` as ``schedlab.benchmarks.sharing_speed`` does. Skipped without the Philly
trace; re-record (a change meant to alter results) with ``SCHEDLAB_RECORD_DIGESTS=1``."""

from __future__ import annotations

import pytest
from schedlab.sched.policies import BASELINES, SHARING

from helpers import FIXTURES, check_digests, shared_data, summary_digest, table_digest

pytestmark = pytest.mark.slow

RECORDED = FIXTURES / "digests" / "philly.json"
JOBS = 10_000  # the first jobs of the trace: every baseline, and gavel (round-based, slow per job)
#: summary fields that measure the run, not its result (wall-clock solve times)
TIMING_FIELDS = ("lp_solve_mean_s", "lp_solve_p99_s")


@pytest.fixture(scope="module")
def philly():
    from schedlab.sched.traces import LoadOptions, load_trace

    path = shared_data("traces", "philly", "philly_jobs_pollux.csv")
    return load_trace(path, "philly", LoadOptions(max_jobs=JOBS, max_gpus=512))[0]


@pytest.mark.parametrize("policy", [*BASELINES, "gavel"])
def test_philly_replay_is_bit_identical_to_the_recorded_one(policy, philly):
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.models.annotate import annotate

    table = annotate(philly, seed=0) if policy in SHARING else philly
    spec = ReplaySpec(cluster="philly-512", policies=[policy])
    [result] = run(spec, prepare(spec, table))
    found = {"jobs": len(table), "table": table_digest(result.jobs),
             "summary": summary_digest(result.summary, TIMING_FIELDS.__contains__),
             "utilization": table_digest(result.utilization)}
    check_digests(RECORDED, policy, found)
