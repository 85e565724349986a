"""A checkpoint-restore overhead that depends on the restarting job's GPU count (the Helios simulator's
7 s at 1 GPU, 30 s up to 8, 60 s above), against hand-computed SRTF schedules; and its validation."""

from __future__ import annotations

import pytest
from helpers import make_table, replay_table
from schedlab.sched.core.restore import PRESETS, RestoreTable, canonical, restore_overhead

# One 8-GPU server. A (2 GPUs, 100 s) runs from 0; B (8 GPUs, 10 s) arrives at 10: SRTF preempts A for it
# (90 s left > 10 s); A restarts at 20, pays its restore overhead, then runs its last 90 s.
TRACE = make_table([("A", 0, 2, 100), ("B", 10, 8, 10)])


def _end_of_a(overhead) -> float:
    jobs = replay_table(TRACE, "1x8", "srtf", preemption_overhead_s=overhead).jobs.set_index("job_id")
    assert jobs.at["A", "preemptions"] == 1
    return float(jobs.at["A", "end_time"])


@pytest.mark.parametrize(("overhead", "restore_s"), [
    (None, 63.0),  # srtf's default, unchanged
    (5.0, 5.0),
    ("helios", 30.0),  # 2 GPUs: up to 8
    ("1:7,8:30,inf:60", 30.0),
    ({1: 7, "inf": 60}, 60.0),  # 2 GPUs: above 1
    ("2:11,inf:60", 11.0),  # a bound is inclusive
])
def test_the_restarting_job_pays_its_gpu_counts_figure(overhead, restore_s):
    assert _end_of_a(overhead) == 20 + restore_s + 90


def test_the_table_reads_like_the_helios_simulator():
    table = restore_overhead("helios")
    assert isinstance(table, RestoreTable) and str(table) == PRESETS["helios"] == "1:7,8:30,inf:60"
    assert [table.seconds(g) for g in (1, 2, 8, 9, 64)] == [7, 30, 30, 60, 60]
    assert canonical({"1": 7, "8": "30", "inf": 60}) == "1:7,8:30,inf:60" and canonical("45") == 45.0


@pytest.mark.parametrize(("value", "says"), [
    ("1:7,8:30", "last bound must be inf"), ("8:30,1:7,inf:60", "must rise"), ("0:5,inf:6", "whole number"),
    ("1:x,inf:6", "not a number"), ("1:-1,inf:6", ">= 0"), ("soon", "expected seconds"), (True, "neither"),
    (-1, ">= 0"), (float("inf"), "finite"),
])
def test_a_bad_overhead_is_refused_before_any_work(value, says):
    with pytest.raises(ValueError, match=says):
        restore_overhead(value)
    with pytest.raises(ValueError, match="preemption_overhead_s"):
        replay_table(TRACE, "1x8", "srtf", preemption_overhead_s=value)


def test_the_cli_and_the_experiment_take_the_table(tmp_path):
    from helpers import cli_env, run_cli
    from schedlab.sched.spec import ExperimentSpec

    done = run_cli(["replay", "--num-jobs", "40", "--cluster", "2x4", "--policy", "srtf", "--out", str(tmp_path / "o"),
                    "--preemption-overhead", "helios", "--no-progress"], cli_env(tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    bad = run_cli(["replay", "--num-jobs", "40", "--cluster", "2x4", "--policy", "srtf", "--out", str(tmp_path / "p"),
                   "--preemption-overhead", "1:7"], cli_env(tmp_path), tmp_path)
    assert bad.returncode == 2 and "--preemption-overhead" in bad.stderr and "last bound must be inf" in bad.stderr
    spec = ExperimentSpec.model_validate({"name": "x", "traces": [{"name": "s", "source": "synthetic"}],
                                          "clusters": ["1x8"], "preemption_overhead_s": {1: 7, 8: 30, "inf": 60}})
    assert spec.preemption_overhead_s == "1:7,8:30,inf:60"


# The allocation stall takes the same forms, by the GPU count a job starts on: fifo on one 8-GPU server,
# A (1 GPU, 10 s) and B (2 GPUs, 10 s) both start at 0 and end after their stall.
STARTS = make_table([("A", 0, 1, 10), ("B", 0, 2, 10)])


@pytest.mark.parametrize(("stall", "ends"), [
    (None, (10.0, 10.0)),  # fifo's default: none
    (2.0, (12.0, 12.0)),
    ("1:2,inf:3", (12.0, 13.0)),  # the testbed's form: one device, then every larger count
    ({1: 2, 2: 2.5, "inf": 4}, (12.0, 12.5)),
])
def test_the_allocation_stall_is_charged_by_the_starting_gpu_count(stall, ends):
    jobs = replay_table(STARTS, "1x8", "fifo", allocation_stall_s=stall).jobs.set_index("job_id")
    assert (jobs.at["A", "end_time"], jobs.at["B", "end_time"]) == ends


@pytest.mark.parametrize(("value", "says"), [("1:2", "allocation stall '1:2': the last bound must be inf"),
                                             (-1, "allocation stall: -1 must be")])
def test_a_bad_allocation_stall_is_refused_naming_it(value, says):
    with pytest.raises(ValueError, match="allocation_stall_s") as err:
        replay_table(STARTS, "1x8", "fifo", allocation_stall_s=value)
    assert says in str(err.value)


@pytest.mark.parametrize(("at_shared_pace", "b_end"), [(False, 10 + 2.0 + 110), (True, 10 + 2.0 * 1.1 + 110)])
def test_a_start_beside_a_running_job_stalls_xi_times_as_long_when_asked(at_shared_pace, b_end):
    """The CPU testbed's start-up competes with its partner for the device's cores: with
    ``stall_at_shared_pace`` a start beside a running job stalls ξ times the stall (gandiva packs B
    beside A on the one GPU at t=10; ξ = 1.1 keeps the pair); a start alone (A) is unchanged."""
    from packing import workloads
    from schedlab.sched.core.cluster import ClusterState, load_cluster
    from schedlab.sched.core.engine import Engine
    from schedlab.sched.core.job import jobs_from_table
    from schedlab.sched.models.sharing import SharingModel
    from schedlab.sched.policies import make_policy

    spec = load_cluster("1x1")
    table = workloads([("A", 0, 1, 1000), ("B", 10, 1, 100)], [("cifar10", 32), ("ncf", 256)])
    engine = Engine(jobs_from_table(table), ClusterState(spec), make_policy("gandiva"), preemption_overhead_s=0.0,
                    sharing=SharingModel.for_cluster(spec, "analytic:1.1"), allocation_stall_s=2.0,
                    stall_at_shared_pace=at_shared_pace)
    jobs = {j.job_id: j for j in engine.run().jobs}
    assert jobs["B"].end_time == pytest.approx(b_end)
    # A: its own stall alone (2 s), 8 s of work alone, then at 1/1.1 beside B (its stall included)
    assert jobs["A"].end_time == pytest.approx(b_end + 1000 - 8 - (b_end - 10) / 1.1)
