"""``pollux`` replays stay bit-identical: the job tables (hashed) and round counts of the Pollux study's
workload-6 at load 1.0 on the study's cluster (``schedlab.studies.pollux_study``), and of the first 12
and 48 hours of Lyra Table 5's Philly window (day 40; Basic annotation, seed 0) on ``lyra-sim``, as
``conf/experiments/lyra-scaling.yaml`` runs it, against ``fixtures/digests/pollux.json``. Skipped
without the Pollux data or the Philly trace; re-record with ``SCHEDLAB_RECORD_DIGESTS=1``. The speed
of these replays is measured by ``python -m schedlab.studies.pollux_study --speed``."""

from __future__ import annotations

import pytest

from helpers import FIXTURES, check_digests, shared_data, table_digest

pytestmark = pytest.mark.slow

RECORDED = FIXTURES / "digests" / "pollux.json"
LYRA_WINDOW_START_S = 3_456_000.0  # lyra-scaling.yaml's window (the busiest 15 days of Philly)


def _found(result) -> dict:
    return {"table": table_digest(result.jobs), "jobs": len(result.jobs), "rounds": result.summary["pollux_rounds"]}


def test_study_workload_is_bit_identical_to_the_recorded_one(monkeypatch):
    from schedlab.sched.replay import ReplaySpec, run
    from schedlab.studies.pollux_study import CLUSTER

    data = shared_data("profiles", "pollux")
    monkeypatch.setenv("SCHEDLAB_POLLUX_DATA", str(data))
    spec = ReplaySpec(trace=str(data / "workloads" / "workload-6.csv"), format="pollux", cluster=CLUSTER,
                      policies=["pollux"], goodput_root=str(data))
    check_digests(RECORDED, "workload-6", _found(run(spec)[0]))


@pytest.mark.parametrize("hours", [12, 48])
def test_lyra_window_is_bit_identical_to_the_recorded_one(hours, monkeypatch):
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.traces import LoadOptions, load_trace
    from schedlab.sched.models.annotate import lyra_scenario

    monkeypatch.setenv("SCHEDLAB_POLLUX_DATA", str(shared_data("profiles", "pollux")))
    options = LoadOptions(start=LYRA_WINDOW_START_S, end=LYRA_WINDOW_START_S + hours * 3600, on_oversize="drop",
                          max_gpus=672)
    table = load_trace(shared_data("traces", "philly", "philly_jobs_pollux.csv"), fmt="philly", options=options)[0]
    spec = ReplaySpec(cluster="lyra-sim", policies=["pollux"])
    check_digests(RECORDED, f"lyra-{hours}h", _found(run(spec, prepare(spec, lyra_scenario(table, "basic", seed=0)))[0]))
