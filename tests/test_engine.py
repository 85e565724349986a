"""The engine and the baseline policies against schedules computed by hand."""

from __future__ import annotations

import pytest
from helpers import make_table
from schedlab.sched.core.cluster import ClusterError, ClusterState, load_cluster
from schedlab.sched.core.engine import Engine, EngineError
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.policies import make_policy
from helpers import replay_table

# One 4-GPU server. A blocks B (4 GPUs); C and D are small and arrive while B waits.
TRACE = make_table([("A", 0, 2, 10), ("B", 1, 4, 5), ("C", 2, 1, 3), ("D", 3, 2, 4)])


def _times(result) -> dict[str, tuple[float, float]]:
    jobs = result.jobs.set_index("job_id")
    return {j: (jobs.at[j, "start_time"], jobs.at[j, "end_time"]) for j in jobs.index}


def test_fifo_matches_hand_computation():
    # Strict FIFO: C fits at t=2 but may not pass B; B starts when A ends (10), then C and D at 15.
    result = replay_table(TRACE, "1x4", "fifo")
    assert _times(result) == {"A": (0, 10), "B": (10, 15), "C": (15, 18), "D": (15, 19)}
    summary = result.summary
    assert summary["avg_jct_s"] == pytest.approx((10 + 14 + 16 + 16) / 4)
    assert summary["makespan_s"] == 19
    # busy GPU-seconds 2*10 + 4*5 + 1*3 + 2*4 = 51 over 4 GPUs x 19 s
    assert summary["gpu_util"] == pytest.approx(51 / 76)
    assert summary["avg_queue_s"] == pytest.approx((0 + 9 + 13 + 12) / 4)


def test_sjf_lets_short_jobs_pass():
    # C runs at once (2..5); at 5 D (4 s) is the shortest that fits; B waits for A.
    assert _times(replay_table(TRACE, "1x4", "sjf")) == {"A": (0, 10), "B": (10, 15), "C": (2, 5), "D": (5, 9)}


def test_ssf_orders_by_gpu_service():
    trace = make_table([("A", 0, 4, 10), ("big", 1, 4, 3), ("small", 1, 1, 10)])
    # at 10: big = 12 GPU-s, small = 10 GPU-s -> small first, then big must wait for it
    times = _times(replay_table(trace, "1x4", "ssf"))
    assert times["small"] == (10, 20) and times["big"] == (20, 23)


def test_backfill_respects_the_reservation():
    # B's reservation is at 10 (A ends). C (ends 5) and D (ends 9) finish before it; E (ends 13) may not.
    trace = make_table([*TRACE.itertuples(index=False), ("E", 3.5, 1, 9.5)])
    times = _times(replay_table(trace, "1x4", "backfill"))
    assert times["C"] == (2, 5) and times["D"] == (5, 9) and times["B"] == (10, 15)
    assert times["E"][0] >= 10


def test_srtf_preempts_and_pays_restore_overhead():
    trace = make_table([("long", 0, 2, 100), ("short", 10, 1, 5)])
    free = _times(replay_table(trace, "1x2", "srtf", preemption_overhead_s=0))
    assert free == {"long": (0, 105), "short": (10, 15)}
    paid = replay_table(trace, "1x2", "srtf")  # default: 63 s checkpoint-restore (Lyra §7.5)
    assert _times(paid)["long"] == (0, 15 + 63 + 90)
    assert paid.summary["preemptions"] == 1


def test_tiresias_demotes_at_the_threshold():
    trace = make_table([("A", 0, 1, 300), ("B", 50, 1, 20)])
    params = {"queue_thresholds": [100], "promote_knob": 0}
    result = replay_table(trace, "1x1", "tiresias", params, preemption_overhead_s=0)
    # A keeps the GPU (same queue, earlier) until its service reaches 100 GPU-s at t=100, then B runs.
    assert _times(result) == {"A": (0, 320), "B": (100, 120)}


def test_tiresias_promotes_starving_jobs():
    trace = make_table([("A", 0, 1, 150), ("B", 50, 1, 1000), ("C", 60, 1, 1000)])
    params = {"queue_thresholds": [100], "promote_knob": 1}
    result = replay_table(trace, "1x1", "tiresias", params, preemption_overhead_s=0)
    # A is demoted at 100 (service 100), B runs 100..200 and is demoted; A waited 100 >= 1 x 100 s
    # executed -> promoted at 200, ahead of C, which never ran and so is still in queue 0 only by order.
    jobs = result.jobs.set_index("job_id")
    assert jobs.at["A", "end_time"] < jobs.at["C", "end_time"]
    assert result.summary["preemptions"] >= 2


def test_exclusive_jobs_run_exactly_their_duration():
    result = replay_table(TRACE, "2x2", "sjf")
    jobs = result.jobs
    assert ((jobs["end_time"] - jobs["start_time"]) == jobs["duration"]).all()


def test_oversize_job_is_a_clear_error():
    with pytest.raises(EngineError, match="needs 8 GPUs but the cluster has 4"):
        replay_table(make_table([("x", 0, 8, 1)]), "1x4", "fifo")


def test_unknown_policy_and_bad_params():
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        make_policy("nope")
    with pytest.raises(ValueError, match="promote_knobb"):
        make_policy("tiresias", {"promote_knobb": 1})
    with pytest.raises(ValueError, match="ascending"):
        make_policy("tiresias", {"queue_thresholds": [10, 5]})


def test_cluster_references():
    assert load_cluster("16x4:v100").total_gpus == 64
    assert load_cluster("philly-512").total_gpus == 512
    lyra = load_cluster("lyra-testbed")
    assert lyra.total_gpus == 64 and lyra.training_pool.gpu_type == "v100"
    assert ClusterState(lyra).total_gpus == 32
    with pytest.raises(ClusterError, match="unknown cluster"):
        load_cluster("no-such-cluster")


@pytest.mark.parametrize("placement", ["fewest-servers", "consolidated", "strict-consolidated", "best-fit", "random"])
def test_placements_give_whole_gangs(placement):
    spec = load_cluster("4x4")
    jobs = jobs_from_table(make_table([("a", 0, 3, 5), ("b", 0, 2, 5), ("c", 0, 6, 5), ("d", 1, 5, 1)]))
    engine = Engine(jobs, ClusterState(spec), make_policy("fifo"), placement=placement)
    engine.run()
    assert all(j.finished for j in jobs)


def test_fewest_servers_places_whenever_enough_gpus_are_free():
    state = ClusterState(load_cluster("3x4"))
    state.take_from_servers([(0, 3), (1, 1)], job=None)  # free: server0 1, server1 3, server2 4
    import random

    from schedlab.sched.core.placement import best_fit, fewest_servers, get_strategy

    assert get_strategy("consolidated") is fewest_servers  # the old name stays an alias
    assert fewest_servers(state, 3, random.Random(0)) == [(1, 3)]
    assert fewest_servers(state, 6, random.Random(0)) == [(2, 4), (1, 2)]
    assert best_fit(state, 1, random.Random(0)) == [(0, 1)]
    assert fewest_servers(state, 9, random.Random(0)) is None
