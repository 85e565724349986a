"""The testbed's parts that need no training process (``profiling/testbed/``): devices, the mini trace,
the activity log and its recorder on a real replay, the comparison, the options and the profiling sweep."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd
import pytest
from schedlab.profiling.testbed import add_arguments, devices as D, minitrace, node
from schedlab.profiling.testbed.activity import ActivityLog, Recorder, completeness
from schedlab.profiling.testbed.budget import error_sources
from schedlab.profiling.testbed.compare import compare, first_activity_apart, first_decision_difference, render
from schedlab.profiling.testbed.spec import from_args


# ---- devices ------------------------------------------------------------------------------------
def test_cpu_devices_split_the_usable_cores_into_disjoint_sets():
    devs = D.cpu_devices(2, available={0, 1, 2, 3, 4})
    assert [d.cores for d in devs] == [(0, 1), (2, 3)]  # core 4 left over
    assert [d.index for d in devs] == [0, 1] and devs[0].threads == 2 and devs[0].label == "cpu:0,1"
    assert D.cpu_devices(D.parse_core_sets("3;0-1"), available={0, 1, 3})[0].cores == (3,)


@pytest.mark.parametrize(("sets", "message"), [
    (3, "may run on 2 core"), ([[0], [0]], "shares core"), ([[0], []], "set 1 is empty"), ([[5]], "may not run on")])
def test_cpu_devices_refuse_what_cannot_be_pinned(sets, message):
    with pytest.raises(D.DeviceError, match=message):
        D.cpu_devices(sets, available={0, 1})


def test_core_sets_are_parsed_or_refused_by_name():
    assert D.parse_core_sets("0-2;4") == [[0, 1, 2], [4]]
    with pytest.raises(D.DeviceError, match="--cpu-sets '0;x'"):
        D.parse_core_sets("0;x")


def test_a_process_gets_its_threads_and_its_gpus():
    cpu = D.cpu_devices([[0, 1]], available={0, 1})
    assert D.process_env(cpu, 0, {})["OMP_NUM_THREADS"] == "2"
    gpus = D.cuda_devices(["2", "3"])
    env = D.process_env(gpus, 1, {"X": "1"})
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["X"] == "1" and env["OMP_NUM_THREADS"] == "1"
    with pytest.raises(D.DeviceError, match="given twice"):
        D.cuda_devices(["0", "0"])


def test_workers_advertise_their_devices_and_are_read_back_as_servers():
    assert D.worker_resources(D.cuda_devices(["0", "1"])) == {"GPU": 2.0}
    assert D.worker_resources(D.cpu_devices(1, available={0})) == {"TESTBED_CPU": 1.0}
    info = {"workers": {"tcp://b:1": {"host": "b", "resources": {"GPU": 2}},
                        "tcp://a:2": {"host": "a", "resources": {"GPU": 2}},
                        "tcp://a:1": {"host": "a", "resources": {"GPU": 2}},
                        "tcp://c:1": {"host": "c", "resources": {}}}}
    assert D.nodes_from_workers(info, "cuda") == [("tcp://a:1", "a", 2), ("tcp://b:1", "b", 2)]
    info["workers"]["tcp://b:1"]["resources"]["GPU"] = 4
    with pytest.raises(D.DeviceError, match="servers must be alike"):
        D.nodes_from_workers(info, "cuda")


# ---- the mini trace -----------------------------------------------------------------------------
def _flat(workload: str, batch: int, gpus: int) -> float:
    return {"cifar10": 0.05, "bert": 0.02}[workload] * (1 if gpus == 1 else 0.6)


def test_mini_trace_is_canonical_deterministic_and_castor_shaped():
    kinds = [("cifar10", 32), ("bert", 8)]
    trace = minitrace.generate(400, 4, kinds, _flat, budget_s=1e7, seed=3)
    assert list(trace.columns) == ["job_id", "submit_time", "num_gpus", "model", "batch_size", "iterations"]
    assert trace.equals(minitrace.generate(400, 4, kinds, _flat, budget_s=1e7, seed=3))
    assert not trace.equals(minitrace.generate(400, 4, kinds, _flat, budget_s=1e7, seed=4))
    assert trace["submit_time"].is_monotonic_increasing and trace["submit_time"].iloc[0] == 0
    small = (trace["num_gpus"] == 1).mean()  # devices // 4 = 1: 66 % small, plus the large ones drawn as 2 of 4
    assert set(trace["num_gpus"]) == {1, 2, 4} and 0.55 < small < 0.77
    seconds = trace["iterations"] * [_flat(m, b, g) for m, b, g in zip(trace["model"], trace["batch_size"],
                                                                          trace["num_gpus"])]
    assert seconds.min() >= 10 * 0.95 and seconds.max() <= 60 * 1.05  # lengths within [min_job_s, max_job_s]
    assert set(trace["model"]) == {"cifar10", "bert"} and (trace["iterations"] >= minitrace.MIN_ITERATIONS).all()


def test_mini_trace_fits_its_budget():
    kinds = [("cifar10", 32)]
    free = minitrace.generate(16, 2, kinds, _flat, budget_s=1e6, seed=0)
    tight = minitrace.generate(16, 2, kinds, _flat, budget_s=120, startup_s=2.0, seed=0)
    work = (tight["iterations"] * 0.05 * np.where(tight["num_gpus"] == 1, 1, 0.6) * tight["num_gpus"]).sum()
    assert tight["iterations"].sum() < free["iterations"].sum()
    assert work / 2 + 16 * 2.0 / 2 <= 120 and tight["submit_time"].max() <= 120
    with pytest.raises(ValueError, match="cannot hold 16 jobs' start-ups"):
        minitrace.generate(16, 2, kinds, _flat, budget_s=10, startup_s=2.0)


# ---- activity logs and the recorder on a real replay -----------------------------------------------
def _replay_log(policy: str, rows, cluster: str = "1x2:a40", params=None) -> tuple[pd.DataFrame, ActivityLog]:
    from schedlab.sched import replay

    table = pd.DataFrame(rows, columns=["job_id", "submit_time", "num_gpus", "duration", "model", "batch_size"])
    log = ActivityLog()
    spec = replay.ReplaySpec(cluster=cluster, policies=[{"name": policy, "params": params or {}}],
                             preemption_overhead_s=1.0)
    (result,) = replay.run(spec, replay.prepare(spec, table), wrap_policy=lambda p: Recorder(p, log))
    return result.jobs, log


ROWS = [("a", 0.0, 1, 30.0, "cifar10", 64), ("b", 1.0, 2, 10.0, "cifar10", 64), ("c", 2.0, 1, 5.0, "bert", 8)]


def test_the_recorder_logs_every_decision_of_an_unchanged_policy():
    jobs, log = _replay_log("srtf", ROWS)
    assert completeness(log, ["a", "b", "c"]) == []
    decisions = [(r["event"], r["job"]) for r in log.decisions()]
    assert decisions[0] == ("start", "a") and ("preempt", "a") in decisions  # c is shorter: a waits
    starts = {r["job"]: r for r in log.of("start")}
    assert starts["b"]["gpus"] == [0, 1] and starts["b"]["partners"] == [] and starts["b"]["accumulation_steps"] == 1
    ends = {r["job"]: r["t"] for r in log.of("end")}
    assert ends == dict(zip(jobs["job_id"], jobs["end_time"]))


def test_the_recorder_logs_what_a_sharing_start_decided():
    _, log = _replay_log("sjf-ffs", [("a", 0.0, 1, 100.0, "cifar10", 64), ("b", 0.0, 1, 100.0, "cifar10", 64),
                                     ("c", 1.0, 1, 5.0, "ncf", 256)])
    shared = [r for r in log.of("start") if r["partners"]]
    assert shared and shared[0]["job"] == "c" and shared[0]["mode"] == "timeslice"
    assert shared[0]["partners"] in (["a"], ["b"])


def test_completeness_names_each_gap():
    log = ActivityLog()
    log.add(0, "submit", "a")
    log.add(1, "start", "a")
    log.add(2, "start", "a")
    log.add(3, "end", "a")
    log.add(4, "end", "z")
    problems = completeness(log, ["a", "b"])
    assert "job a: 2 starts but 0 preemptions" in problems and "job b: never started" in problems
    assert "job b: submitted 0 times" in problems and any("not in the trace" in p for p in problems)


def test_activity_logs_round_trip_and_bad_lines_are_named(tmp_path):
    log = ActivityLog()
    log.add(0.5, "start", "a", gpus=[0], done=np.int64(3))
    path = log.write(tmp_path / "a.jsonl")
    assert ActivityLog.read(path).records == [{"t": 0.5, "event": "start", "job": "a", "gpus": [0], "done": 3}]
    path.write_text('{"t": 1, "event": "start", "job": "a"}\n{"t": 2, "event": "jump", "job": "a"}\n')
    with pytest.raises(ValueError, match="line 2: .* got 'jump'"):
        ActivityLog.read(path)


# ---- the comparison -----------------------------------------------------------------------------
def _jobs(ends: dict[str, float]) -> pd.DataFrame:
    ids = list(ends)
    return pd.DataFrame({"job_id": ids, "submit_time": [0.0] * len(ids), "start_time": [0.0] * len(ids),
                         "end_time": list(ends.values()), "jct_s": list(ends.values()),
                         "queue_s": [0.0] * len(ids)})


def _log(*events) -> ActivityLog:
    log = ActivityLog()
    for t, event, job, gpus in events:
        log.add(t, event, job, **({"gpus": gpus, "partners": [], "accumulation_steps": 1, "mode": None, "shares": None}
                                  if event == "start" else {}))
    return log


def test_error_sources_keep_the_multi_device_jobs_speed_apart():
    # one-device job a runs at its model's speed, 2-device job b at 1.5x its model's time per iteration
    jobs = pd.DataFrame({"job_id": ["a", "b"], "num_gpus": [1, 2], "duration": [10.0, 10.0],
                         "shared_s": [0.0, 0.0], "avg_xi": [1.0, 1.0]})
    log = ActivityLog()
    for job, per_iteration, gpus in (("a", 0.1, [0]), ("b", 0.15, [0, 1])):
        log.add(0.0, "start", job, attempt=0, launched=0.0, gpus=gpus, partners=[])
        log.add(2.0, "progress", job, attempt=0, iterations=100, done=0, ready=True)
        for done in (1, 51):
            log.add(2.0 + done * per_iteration, "progress", job, attempt=0, iterations=100, done=done)
    speed = error_sources(jobs, log, 2.0, 2.0)["speed"]
    assert (speed["exclusive"]["n"], speed["exclusive_multi_device"]["n"], speed["shared_over_xi"]["n"]) == (1, 1, 0)
    assert speed["exclusive"]["median"] == pytest.approx(1.0)
    assert speed["exclusive_multi_device"]["median"] == pytest.approx(1.5)


def test_error_sources_measure_each_start_up_against_the_model_for_its_kind():
    """A start alone, on two devices (modelled apart: 2.5 s) and beside a running job, each 2 s to its
    first iteration's end (less one iteration): the errors by kind against each one's modelled stall."""
    jobs = pd.DataFrame({"job_id": ["a", "b", "c"], "num_gpus": [1, 2, 1], "duration": [10.0] * 3,
                         "shared_s": [0.0, 0.0, 5.0], "avg_xi": [1.0, 1.0, 2.0]})
    log = ActivityLog()
    for job, gpus, partners, at in (("a", [0], [], 0.0), ("b", [0, 1], [], 20.0), ("c", [1], ["b"], 30.0)):
        log.add(at, "start", job, attempt=0, launched=at, gpus=gpus, partners=partners)
        log.add(at + 1.9, "progress", job, attempt=0, iterations=100, done=0, ready=True)
        log.add(at + 2.1, "progress", job, attempt=0, iterations=100, done=1)
        log.add(at + 3.1, "progress", job, attempt=0, iterations=100, done=11)
    startup = error_sources(jobs, log, 1.5, 2.0, lambda n: 2.5 if n > 1 else 1.5)["startup"]
    assert startup["measured_s"]["n"] == 3 and startup["measured_s"]["median"] == pytest.approx(2.0)
    errors = {kind: (v["error_s"]["n"], v["error_s"]["median"]) for kind, v in startup["by_kind"].items()}
    assert errors == {"alone": (1, pytest.approx(0.5)), "multi_device": (1, pytest.approx(-0.5)),
                      "beside_a_job": (1, pytest.approx(0.5))}


def test_comparison_figures_errors_and_lyras_test():
    real = _log((0, "submit", "a", None), (0, "start", "a", [0]), (0, "submit", "b", None), (0, "start", "b", [1]),
                (10, "end", "a", None), (20, "end", "b", None))
    replay = _log((0, "submit", "a", None), (0, "start", "a", [0]), (0, "submit", "b", None), (0, "start", "b", [1]),
                  (11, "end", "a", None), (17, "end", "b", None))
    c = compare(_jobs({"a": 10.0, "b": 20.0}), real, _jobs({"a": 11.0, "b": 17.0}), replay)
    assert c["real"]["avg_jct_s"] == 15 and c["replay"]["avg_jct_s"] == 14
    assert c["relative_error"]["avg_jct"] == pytest.approx(-1 / 15) and c["relative_error"]["makespan"] == pytest.approx(-0.15)
    pj = c["per_job_jct_error"]
    assert pj["median"] == pytest.approx(0.125) and pj["max"] == pytest.approx(0.15) and pj["worst_job"]["job_id"] == "b"
    assert c["decisions"]["first_difference"] is None
    assert c["first_activity_apart"] == {"job": "b", "event": "end", "occurrence": 0, "real_t": 20.0, "replay_t": 17.0,
                                         "apart_s": -3.0}
    assert c["activity_problems"] == {"real": [], "replay": []}
    assert "first more than 2 s apart: job b end" in render("fifo", c)
    assert first_activity_apart(real, replay, tolerance_s=3.5) is None


def test_the_first_differing_decision_is_reported_with_what_differs():
    real = _log((0, "start", "a", [0]), (1, "start", "b", [1]))
    replay = _log((0, "start", "a", [0]), (1, "start", "b", [0]))
    diff = first_decision_difference(real, replay)
    assert diff["index"] == 1 and diff["differs_in"] == ["gpus"]
    shorter = _log((0, "start", "a", [0]))
    assert first_decision_difference(real, shorter)["replay"] is None


def test_unfinished_jobs_count_as_unfinished_not_as_errors():
    jobs = _jobs({"a": 10.0, "b": math.nan})
    figures = compare(jobs, _log(), _jobs({"a": 10.0, "b": 12.0}), _log())
    assert figures["real"]["finished"] == 1 and figures["per_job_jct_error"]["jobs"] == 1


# ---- options ------------------------------------------------------------------------------------
def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_options_become_one_validated_spec(tmp_path):
    spec = from_args(_parse("--generate", "12", "--policy", "fifo", "tiresias", "--set", "tiresias.queue_thresholds=[20]",
                            "--out", str(tmp_path / "o"), "--cpu-sets", "0;1"))
    assert [p.label for p in spec.policies] == ["fifo", "tiresias"]
    assert spec.policies[1].params == {"queue_thresholds": [20]} and spec.workload_size == "tiny"
    assert spec.profile_dir == tmp_path / "o" / "profiles"


@pytest.mark.parametrize(("argv", "message"), [
    (["--generate", "3", "--policy", "fifo", "--gpus", "0"], "--gpus names CUDA devices"),
    (["--generate", "3", "--policy", "fifo", "--devices", "2", "--cpu-sets", "0;1"], "give one"),
    (["--generate", "3", "--policy", "gimbal-jct"], "engine capabilities the live backend lacks"),
    (["--generate", "3", "--policy", "fifo", "--workloads", "cifar:8"], "--workloads.*unknown workload 'cifar'"),
    (["--generate", "3", "--policy", "fifo", "--min-job-s", "9", "--max-job-s", "5"], "above --max-job-s"),
    (["--trace", "/nonexistent.csv", "--policy", "fifo"], "--trace /nonexistent.csv: no such file"),
    (["--generate", "3", "--policy", "fifo", "--set", "sjf.blocking=true"], "--set .*policy .sjf. is not among the policies fifo"),
    (["--generate", "3", "--policy", "fifo", "--set", "fifo.speed=2"], "has no parameter 'speed'"),
    (["--generate", "3", "--policy", "castor"], "MPS sharing needs CUDA devices"),
])
def test_bad_options_are_refused_naming_the_flag(tmp_path, argv, message):
    with pytest.raises(ValueError, match=message):
        from_args(_parse(*argv, "--out", str(tmp_path / "o")))


def test_policy_params_are_yaml_set_once_and_validated_as_a_replays(tmp_path):
    out = ["--generate", "4", "--policy", "sjf", "--out", str(tmp_path / "o")]
    spec = from_args(_parse(*out, "--set", "sjf.blocking=true"))
    assert spec.policies[0].params == {"blocking": True}
    with pytest.raises(ValueError, match="set twice"):
        from_args(_parse(*out, "--set", "sjf.blocking=true", "--set", "sjf.blocking=false"))
    with pytest.raises(ValueError, match="not among the policies"):
        from_args(_parse(*out, "--set", "fifo.x=1"))


# ---- what the node profiles -----------------------------------------------------------------------
def test_the_sweep_covers_eq1_accumulation_multi_device_and_every_pair():
    from schedlab.profiling.sweep import PairConfig, SoloConfig

    table = pd.DataFrame({"model": ["cifar10", "bert", "cifar10"], "batch_size": [32, 8, 32], "num_gpus": [1, 1, 2]})
    devices = D.cpu_devices([[0], [1]], available={0, 1})
    sweep = node.sweep_for(table, devices, size="tiny", iters=7)
    solos = {(c.workload, c.batch, c.accum, c.gpus) for c in sweep.configs if isinstance(c, SoloConfig)}
    assert {("cifar10", 32, 1, 1), ("cifar10", 16, 1, 1), ("cifar10", 8, 1, 1), ("cifar10", 16, 2, 1),
            ("cifar10", 32, 1, 2), ("bert", 2, 1, 1), ("bert", 4, 2, 1)} <= solos
    pairs = {(c.a.workload, c.b.workload, c.mode) for c in sweep.configs if isinstance(c, PairConfig)}
    assert pairs == {("cifar10", "cifar10", "timeslice"), ("cifar10", "bert", "timeslice"), ("bert", "bert", "timeslice")}
    assert all(c.iters == 7 and c.threads == 1 for c in sweep.configs if isinstance(c, SoloConfig) and c.gpus == 1)
    # an n-device solo measures past data-parallel training's slow first iterations, over a longer window
    # (4x the one-device window: 2 s by default)
    [multi] = [c for c in sweep.configs if isinstance(c, SoloConfig) and c.gpus == 2]
    assert (multi.warmup, multi.iters, multi.min_seconds) == (10, 60, 8.0) and multi.threads == 1
    assert all(c.min_seconds == 2.0 for c in sweep.configs if isinstance(c, SoloConfig) and c.gpus == 1)
    # and beside a copy of each one-device kind on each of its devices (measured in the same window)
    gangs = {(c.a, c.b.workload, c.b.gpus) for c in sweep.configs if isinstance(c, PairConfig) and c.a.gpus > 1}
    assert gangs == {(multi, "cifar10", 1), (multi, "bert", 1)}
    gpu = node.sweep_for(table, D.cuda_devices(["0"]), size="full", mps_shares=[(50.0, 50.0)])
    assert {c.share for c in gpu.configs if isinstance(c, PairConfig) and c.mode == "mps"} == {(50.0, 50.0)}


def test_the_node_models_a_multi_device_start_up_apart(tmp_path):
    """``startup_by_devices`` (measured per multi-device count) becomes the replay's stall table; a count
    above the largest measured takes the largest's; an older ``node.json`` without it loads with one
    start-up; a bad one is refused naming the file."""
    for name in (node.ITERATION_FILE, node.XI_FILE):
        (tmp_path / name).write_text("{}")
    models = node.NodeModels(tmp_path, 2.17, 2.2, 0.03, {}, {2: 2.71})
    assert models.allocation_stall() == "1:2.17,2:2.71,inf:2.71"
    assert [models.startup_for(n) for n in (1, 2, 4)] == [2.17, 2.71, 2.71]
    models.save()
    assert node.NodeModels.load(tmp_path).startup_by_devices == {2: 2.71}
    older = node.NodeModels(tmp_path, 2.17, 2.2, 0.03)
    older.save()
    loaded = node.NodeModels.load(tmp_path)
    assert loaded.allocation_stall() == 2.17 and loaded.startup_for(2) == 2.17
    (tmp_path / node.NODE_FILE).write_text('{"startup_s": 2, "restart_s": 2, "stop_s": 0, "startup_by_devices": {"1": 3}}')
    with pytest.raises(ValueError, match=r"node\.json: startup_by_devices must map device counts > 1"):
        node.NodeModels.load(tmp_path)


def test_a_jobs_first_start_begins_from_an_empty_folder(tmp_path):
    """A folder left by an earlier run into the same OUT (its result, progress, checkpoint) is emptied by the
    job's first start: read, it would end the job at once or resume it; a restart keeps the checkpoint."""
    import shutil as sh

    from schedlab.profiling.testbed.process import JobProcess

    folder = tmp_path / "jobs" / "a"
    folder.mkdir(parents=True)
    for name in ("result-0.json", "progress-0.jsonl", "ckpt.pt"):
        (folder / name).write_text('{"status": "done", "done": 5, "t_end": 1}')
    true = sh.which("true")
    device = D.cpu_devices(1, available={0})

    restart = JobProcess("a", folder, 1, {}, device, {}, python=true)  # a restart: the checkpoint stays
    restart.launch()
    assert restart.wait() == 0 and (folder / "ckpt.pt").exists()
    first = JobProcess("a", folder, 0, {}, device, {}, python=true)
    first.launch()
    assert first.wait() == 0
    assert sorted(p.name for p in folder.iterdir()) == ["log-0.txt"] and first.result() is None
