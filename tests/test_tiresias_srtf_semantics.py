"""Tiresias and SRTF against the authors' simulator on cases small enough to follow by hand (issue #23).

Figures marked *simulator* were produced by the Tiresias authors' simulator
(github.com/SymbioticLab/Tiresias ``simulator/run_sim.py`` at 959f9b0, ``--scheme=count``, with the
one-line fixes listed in ``schedlab.studies.conformance.tiresias_record``) on the same jobs; schedlab's default
(``semantics: code``, ``repack: true``) must give them. Figures marked *paper* pin the literal
reading kept as an option (``semantics: paper``, ``repack: false``): schedlab's results before #23.
No restart cost anywhere, as in the simulator.
"""

from __future__ import annotations

import pytest
from schedlab.sched.policies.srtf import SRTF, SRTFParams
from schedlab.sched.policies.tiresias import Tiresias, TiresiasParams
from helpers import replay_table
from schedlab.sched.traces import load_trace


def _jobs(tmp_path, rows: list[tuple[int, int, int]], cluster: str, policy: str, params: dict):
    """Replay ``rows`` of ``(GPUs, submit s, duration s)`` (job ids 1, 2, ...) written in the simulator's CSV."""
    path = tmp_path / "jobs.csv"
    lines = ["job_id,num_gpu,submit_time,iterations,model_name,duration,interval"]
    lines += [f"{i},{g},{s},{d},resnet50,{d},0" for i, (g, s, d) in enumerate(rows, 1)]
    path.write_text("\n".join(lines) + "\n")
    table, _ = load_trace(path, "tiresias")
    jobs = replay_table(table, cluster, policy, params, preemption_overhead_s=0.0).jobs
    ids = jobs["job_id"].astype(int)
    return dict(zip(ids, jobs["jct_s"])), dict(zip(ids, jobs["preemptions"]))


def _tiresias(tmp_path, rows, cluster, semantics, thresholds, knob=0.0):
    params = {"queue_thresholds": thresholds, "promote_knob": knob, "semantics": semantics}
    return _jobs(tmp_path, rows, cluster, "tiresias", params)


THREE = [(1, 0, 1000)] * 3  # three one-GPU jobs of 1,000 s at once, on two GPUs


@pytest.mark.parametrize("semantics", ["code", "paper"])
def test_a_running_job_is_demoted_at_every_threshold(tmp_path, semantics):
    # simulator: jobs 1, 2 run; at 100 s both drop to queue 1 and job 3 takes a GPU; at 200 s job 1
    # drops to queue 2 and job 3 to queue 1 (jobs 2, 3 run); at 300 s jobs 2, 3 reach queue 2 behind job 1.
    # Before #23 job 1 stayed in queue 1 (its demotion timer was armed once): 1,000 / 1,200 / 1,800 s.
    jct, preempted = _tiresias(tmp_path, THREE, "1x2", semantics, [100.0, 200.0])
    assert jct == {1: 1100.0, 2: 1100.0, 3: 1900.0}  # simulator (both readings agree here)
    assert preempted == {1: 1, 2: 1, 3: 1}


def test_a_running_job_keeps_its_place_ahead_of_older_waiting_jobs_of_its_queue(tmp_path):
    # job 1 (1 GPU, 10 s) runs; job 2 (2 GPUs) does not fit and waits; job 3 (1 GPU) starts. When job
    # 1 ends, the simulator keeps job 3 (running jobs head their queue); the paper reading serves the
    # queue by submission: job 2 takes both GPUs and preempts job 3.
    rows = [(1, 0, 10), (2, 1, 50), (1, 2, 50)]
    assert _tiresias(tmp_path, rows, "1x2", "code", [3600.0]) == ({1: 10.0, 2: 101.0, 3: 50.0}, {1: 0, 2: 0, 3: 0})
    assert _tiresias(tmp_path, rows, "1x2", "paper", [3600.0]) == ({1: 10.0, 2: 59.0, 3: 100.0}, {1: 0, 2: 0, 3: 1})


def test_promotion_counts_waiting_since_the_last_promotion_against_running_since_then(tmp_path):
    # one GPU, threshold 100 GPU-s, knob 1 (the simulator's dlas-gpu-1): job 1 (400 s) runs, drops to
    # queue 1 at 100 s and is preempted by job 2 at 150 s; it is promoted once it has waited as long as
    # it ran since its last promotion, and promotion only lifts jobs below the top queue. The paper
    # reading promotes after knob x the total run time, counted from each preemption.
    rows = [(1, 0, 400), (1, 150, 400)]
    assert _tiresias(tmp_path, rows, "1x1", "code", [100.0], knob=1.0) == ({1: 700.0, 2: 650.0}, {1: 3, 2: 3})
    assert _tiresias(tmp_path, rows, "1x1", "paper", [100.0], knob=1.0) == ({1: 600.0, 2: 650.0}, {1: 2, 2: 2})


def test_a_multi_gpu_job_is_demoted_on_the_whole_second(tmp_path):
    # 3-GPU jobs, threshold 100 GPU-s: 33.3 s of run. The simulator (with its demotion-time fix; without
    # it job 1 drops only at 40 s) demotes at 34 s, on its whole-second clock.
    rows = [(3, 0, 200), (3, 10, 200)]
    jct, _ = _tiresias(tmp_path, rows, "1x4", "code", [100.0])
    assert jct == {1: 234.0, 2: 390.0}  # simulator
    jct, _ = _tiresias(tmp_path, rows, "1x4", "paper", [100.0])
    assert jct == pytest.approx({1: 700 / 3, 2: 390.0})  # paper: at 33.3 s


def test_the_defaults_are_the_simulators():
    code = Tiresias()
    assert code.code and code.knob == 0.0 and code.limits == [3600.0, float("inf")]
    paper = Tiresias(TiresiasParams(semantics="paper"))
    assert not paper.code and paper.knob == 8.0  # schedlab's knob before #23
    assert Tiresias(TiresiasParams(promote_knob=4)).knob == 4.0
    assert SRTF().repack and not SRTF(SRTFParams(repack=False)).repack


def test_srtf_repacks_every_job_by_remaining_time(tmp_path):
    # two GPUs: job 1 (1,000 s) and job 2 (10 s) run; at 5 s job 3 (2 GPUs, 10 s) and job 4 (20 s) come.
    # The simulator ranks all four (2, 3, 4, 1) and packs: job 2 runs, job 3 does not fit, job 4 takes
    # job 1's GPU. The head-only way preempts only for the shortest waiting job (job 3, which cannot
    # fit even so) and leaves job 4 waiting behind job 1.
    rows = [(1, 0, 1000), (1, 0, 10), (2, 5, 10), (1, 5, 20)]
    jct, preempted = _jobs(tmp_path, rows, "1x2", "srtf", {})
    assert jct == {1: 1015.0, 2: 10.0, 3: 15.0, 4: 30.0} and preempted == {1: 1, 2: 0, 3: 0, 4: 1}  # simulator
    jct, preempted = _jobs(tmp_path, rows, "1x2", "srtf", {"repack": False})
    assert jct == {1: 1010.0, 2: 10.0, 3: 15.0, 4: 35.0} and preempted == {1: 1, 2: 0, 3: 0, 4: 0}  # before #23


def test_srtf_ties_keep_the_simulators_order(tmp_path):
    # at 50 s job 4 arrives with 50 s of work, as much as jobs 1 and 2 have left: the simulator appends
    # arrivals to its list and sorts it stably, so the running jobs stay ahead and nothing is preempted
    rows = [(1, 0, 100), (1, 0, 100), (1, 0, 100), (1, 50, 50)]
    jct, preempted = _jobs(tmp_path, rows, "1x2", "srtf", {})
    assert jct == {1: 100.0, 2: 100.0, 3: 200.0, 4: 100.0} and not any(preempted.values())  # simulator


def test_srtf_helios_ties_put_waiting_jobs_first(tmp_path):
    # Figures of the Helios simulator's srtf (HeliosArtifact bdaae10, its late end fixed and no restore
    # cost, as recorded by studies/conformance/helios_record.py), on 8-GPU nodes with jobs of half and
    # whole nodes. The same arrival as above: Helios sorts its waiting list before its running list, so
    # job 4 goes before jobs 1 and 2 (50 s left each) and job 2, the later in its running list, is preempted
    rows = [(1, 0, 100), (1, 0, 100), (1, 0, 100), (1, 50, 50)]
    jct, preempted = _jobs(tmp_path, rows, "1x2", "srtf", {"ties": "helios"})
    assert jct == {1: 100.0, 2: 150.0, 3: 200.0, 4: 50.0} and preempted == {1: 0, 2: 1, 3: 0, 4: 0}  # simulator
    # job 1 is preempted at 50 s by job 2 with 50 s left, as much as job 3 arriving then: Helios queues the
    # arrival first (its waiting list in order of entry), the Tiresias order the preempted job first
    rows = [(2, 0, 100), (2, 50, 10), (2, 50, 50)]
    jct, _ = _jobs(tmp_path, rows, "1x2", "srtf", {"ties": "helios"})
    assert jct == {1: 160.0, 2: 10.0, 3: 60.0}  # simulator
    assert _jobs(tmp_path, rows, "1x2", "srtf", {})[0] == {1: 110.0, 2: 10.0, 3: 110.0}
    with pytest.raises(ValueError, match="applies to repack: true only"):
        SRTFParams(repack=False, ties="helios")


def test_blocking_makes_the_first_job_that_does_not_fit_wait_for_the_rest(tmp_path):
    # job 1 (1 GPU) runs; job 2 (2 GPUs) does not fit; job 3 (1 GPU) would fit. The simulator (default)
    # skips job 2 and starts job 3; `blocking` (ours, issue #26) holds job 3 behind job 2, as strict FIFO.
    rows = [(1, 0, 10), (2, 1, 50), (1, 2, 50)]
    params = {"queue_thresholds": [3600.0], "promote_knob": 0.0, "blocking": True}
    assert _jobs(tmp_path, rows, "1x2", "tiresias", params) == ({1: 10.0, 2: 59.0, 3: 108.0}, {1: 0, 2: 0, 3: 0})
    # one queue that no job leaves, blocking: the jobs start in submission order, as under strict fifo
    rows = [(1, 0, 30), (2, 1, 50), (1, 2, 20), (1, 3, 5), (2, 4, 10)]
    one_queue = {"queue_thresholds": [1e9], "promote_knob": 0.0, "blocking": True}
    assert _jobs(tmp_path, rows, "1x2", "tiresias", one_queue)[0] == _jobs(tmp_path, rows, "1x2", "fifo", {})[0]
    with pytest.raises(ValueError, match="blocking applies to 2D-LAS"):
        Tiresias(TiresiasParams(mode="tuned-jobs", blocking=True))
