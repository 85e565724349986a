"""The live backend (``profiling/testbed/live.py``) with real training processes on CPU devices: the
engine contract, complete activity logs, preemption at an iteration boundary with a restart from the
checkpoint, progress correcting the model, and the shipped policies seeing only the policy API. Jobs are
tiny (BERT's tiny size, tens of iterations): the seconds go to starting Python and torch."""

from __future__ import annotations

import math
import os
from typing import Any

import pandas as pd
import pytest
from schedlab.profiling.testbed.activity import completeness
from schedlab.profiling.testbed.devices import cpu_devices
from schedlab.profiling.testbed.live import LiveEngine
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.core.protocol import CapabilityHost, EngineError, PolicyEngine, members
from schedlab.sched.models.sharing import SharingModel
from schedlab.sched.policies import make_policy
from schedlab.sched.policies.base import Policy
from schedlab.sched.results.metrics import JOB_COLUMNS, job_table

pytestmark = pytest.mark.slow
CORES = sorted(os.sched_getaffinity(0))


def _table(rows) -> pd.DataFrame:
    """``(job, submit, devices, model, batch, iterations, duration)`` rows."""
    return pd.DataFrame(rows, columns=["job_id", "submit_time", "num_gpus", "model", "batch_size", "iterations",
                                       "duration"])


def _engine(table: pd.DataFrame, policy: Policy | str, folder, devices: int = 2, **options: Any) -> LiveEngine:
    devs = cpu_devices(devices, available=set(CORES))
    cluster = load_cluster(f"1x{devices}:cpu")
    policy = make_policy(policy) if isinstance(policy, str) else policy
    options.setdefault("sharing", SharingModel.for_cluster(cluster, "analytic:2.0"))
    return LiveEngine(jobs_from_table(table), ClusterState(cluster), policy, devices=devs,
                      iterations=dict(zip(table["job_id"], table["iterations"])), folder=folder, poll_s=0.05,
                      progress_s=0.2, **options)


def test_the_live_engine_has_every_member_of_the_engine_protocols(tmp_path):
    engine = _engine(_table([("a", 0.0, 1, "bert", 4, 5, 1.0)]), "fifo", tmp_path, devices=1)
    assert {m for m in members(PolicyEngine) if not hasattr(engine, m)} == set()
    assert {m for m in members(CapabilityHost) if not hasattr(engine, m)} == set()
    with pytest.raises(EngineError, match="does not resize"):
        engine.resize(engine.jobs[0], 2)


@pytest.mark.skipif(len(CORES) < 2, reason="two CPU devices need two cores")
def test_fifo_runs_real_jobs_pinned_to_their_devices_and_logs_them_completely(tmp_path):
    table = _table([("a", 0.0, 1, "bert", 4, 15, 1.0), ("b", 0.2, 2, "bert", 4, 20, 1.0),
                    ("c", 0.4, 1, "bert", 4, 10, 0.5)])
    engine = _engine(table, "fifo", tmp_path, allocation_stall_s=1.0)
    result = engine.run()
    jobs = job_table(result)
    assert list(jobs.columns[:len(JOB_COLUMNS)]) == list(JOB_COLUMNS) and engine.unfinished == []
    assert jobs["end_time"].notna().all() and (jobs["start_time"] >= jobs["submit_time"]).all()
    log = engine.log
    assert completeness(log, ["a", "b", "c"]) == []
    ready = {(r["job"], tuple(r["cores"])) for r in log.of("progress") if r.get("ready")}
    starts = {r["job"]: r for r in log.of("start")}
    assert ready == {(j, tuple(c for d in starts[j]["devices"][:1] for c in map(int, d[4:].split(","))))
                     for j in "abc"}  # rank 0 runs on the cores of its device only
    assert starts["b"]["gpus"] == [0, 1] and starts["c"]["t"] >= max(r["t"] for r in log.of("end") if r["job"] == "b")
    ends = {r["job"]: r["done"] for r in log.of("end")}
    assert ends == {"a": 15, "b": 20, "c": 10}  # every iteration, once


class _Watch(Policy):
    """FIFO that looks at the engine every 0.3 s: what a policy reads of a running job."""

    name = "watch"
    summary = paper = "test"

    def __init__(self) -> None:
        super().__init__()
        self.queue: list = []
        self.seen: list[tuple[float, float, float, bool]] = []

    def on_arrival(self, engine, job) -> None:
        self.queue.append(job)
        engine.set_timer(engine.now + 0.3)

    def on_timer(self, engine, payload) -> None:
        for job in engine.running:
            self.seen.append((engine.now, engine.remaining(job), engine.expected_end(job), engine.stalled(job)))
        if engine.running:
            engine.set_timer(engine.now + 0.3)

    def schedule(self, engine) -> None:
        while self.queue and engine.start(self.queue[0]):
            self.queue.pop(0)


def test_progress_corrects_the_models_remaining_work_and_end(tmp_path):
    # the model says 100 s of work; the job really does its 40 iterations in a few seconds (imagenet: tens of
    # ms an iteration, so the 0.3 s looks see it iterate however quiet the machine)
    watch = _Watch()
    engine = _engine(_table([("a", 0.0, 1, "imagenet", 32, 40, 100.0)]), watch, tmp_path, devices=1,
                     allocation_stall_s=1000.0)
    engine.run()
    stalled = [s for s in watch.seen if s[3]]
    running = [s for s in watch.seen if not s[3]]
    assert stalled and all(r == 100.0 for _, r, _, _ in stalled)  # before its first iteration: the model's stall
    assert running, "no look at the job after its first iteration"
    progress = [r for r in engine.log.of("progress") if not r.get("ready")]
    now, remaining, end, _ = running[-1]
    done = max(r["done"] for r in progress if r["t"] <= now)
    assert remaining < 100.0 * (1 - done / 40) + 1e-6 and remaining > 100.0 * (1 - done / 40) - 10.0
    assert math.isclose(end, now + remaining, rel_tol=1e-9, abs_tol=1e-6)  # no stall left once it iterates


class _PreemptOnce(Policy):
    """FIFO that preempts the running job once its measured progress shows (it restarts in the same pass)."""

    name = "preempt-once"
    summary = paper = "test"

    def __init__(self) -> None:
        super().__init__()
        self.queue: list = []
        self.preempted = False

    def on_arrival(self, engine, job) -> None:
        self.queue.append(job)
        engine.set_timer(engine.now + 0.2)

    def on_timer(self, engine, payload) -> None:
        for job in list(engine.running):
            if not self.preempted and engine.remaining(job) < 0.9 * job.duration:
                engine.preempt(job)
                self.preempted = True
                self.queue.insert(0, job)
                break
        if engine.running or self.queue:
            engine.set_timer(engine.now + 0.2)

    def schedule(self, engine) -> None:
        while self.queue and engine.start(self.queue[0]):
            self.queue.pop(0)


def test_a_preempted_job_stops_at_an_iteration_boundary_and_restarts_from_its_checkpoint(tmp_path):
    table = _table([("a", 0.0, 1, "imagenet", 32, 120, 30.0)])  # seconds of iterations even on a quiet machine
    engine = _engine(table, _PreemptOnce(), tmp_path, devices=1, preemption_overhead_s=1.0, allocation_stall_s=1e4)
    jobs = job_table(engine.run()).set_index("job_id")
    log = engine.log
    assert completeness(log, ["a"]) == []
    assert [r["event"] for r in log.decisions()] == ["start", "preempt", "start"]
    (stop,) = log.of("preempt")
    assert 0 < stop["done"] < 120 and stop["stopped"] >= stop["t"]
    restart = [r for r in log.of("progress") if r.get("ready") and r["attempt"] == 1]
    assert restart and restart[0]["done"] == stop["done"]  # resumed from the checkpoint, not from zero
    assert [r["done"] for r in log.of("end")] == [120] and jobs.loc["a", "preemptions"] == 1
    assert (tmp_path / "jobs" / "a" / "ckpt.pt").exists()


def test_shipped_policies_see_only_the_policy_api_of_the_live_engine(tmp_path):
    from schedlab.sched.policy_check import CheckedPolicy, Observer

    class LiveObserver(Observer):
        def _progress(self, engine, where):  # a live estimate may rise with a slow sample: not a policy's doing
            pass

    observer = LiveObserver(allowance=2, deadline_s=60.0, horizon=math.inf, max_calls=10_000)
    table = _table([("a", 0.0, 1, "bert", 4, 40, 30.0), ("b", 0.0, 1, "bert", 4, 40, 30.0),
                    ("c", 0.5, 1, "bert", 4, 10, 1.0)])
    engine = _engine(table, CheckedPolicy(make_policy("sjf-ffs"), observer), tmp_path, devices=1)
    jobs = job_table(engine.run())
    assert jobs["end_time"].notna().all() and observer.calls > 0
    shared = [r for r in engine.log.of("start") if r["partners"]]
    assert shared and shared[0]["devices"] == ["cpu:" + ",".join(map(str, cpu_devices(1, set(CORES))[0].cores))]


@pytest.mark.parametrize(("policy", "params"), [
    ("sjf", {}), ("sjf-bsbf", {}), ("castor", {"mode": "timeslice", "predictor": None}), ("lucid", {}),
    ("tiresias", {"queue_thresholds": [0.5]}), ("srtf", {})])
def test_every_supported_policy_runs_unchanged_on_the_live_engine(tmp_path, policy, params):
    # a long job, and a short one arriving while it starts: srtf and tiresias preempt the long one for it
    table = _table([("a", 0.0, 1, "bert", 4, 30, 3.0), ("b", 0.1, 1, "bert", 2, 10, 0.5)])
    engine = _engine(table, make_policy(policy, params), tmp_path, devices=1, preemption_overhead_s=0.5)
    jobs = job_table(engine.run())
    assert jobs["end_time"].notna().all() and engine.unfinished == []
    assert completeness(engine.log, ["a", "b"]) == []
    assert [r["done"] for r in sorted(engine.log.of("end"), key=lambda r: r["job"])] == [30, 10]


def test_guard_pins_a_torchrun_rank_to_its_own_set():
    import subprocess
    import sys

    from schedlab.profiling.guard import rank_cpus

    assert rank_cpus("0;1-3", "1") == {1, 2, 3}
    with pytest.raises(ValueError, match="LOCAL_RANK='2'"):
        rank_cpus("0;1", "2")
    show = "import os; print(sorted(os.sched_getaffinity(0)))"
    out = subprocess.run([sys.executable, "-m", "schedlab.profiling.guard", "--rank-cpus", f"{CORES[0]};{CORES[-1]}",
                          sys.executable, "-c", show], env=dict(os.environ, LOCAL_RANK="1"),
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == str([CORES[-1]])


@pytest.mark.skipif(len(CORES) < 2, reason="two CPU devices need two cores")
def test_the_profiler_runs_a_multi_device_cpu_job_as_the_testbed_does(tmp_path):
    # one process per device, each pinned to its own set (not both ranks on the union of the sets): the
    # placement the testbed's launcher gives a multi-device job, so the profile measures what will run
    import sys

    from schedlab.profiling.execute import Job, launch, read_progress

    spec = {"workload": "bert", "batch": 4, "size": "tiny", "threads": 1, "warmup": 1, "iters": 3, "device": "cpu"}
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = launch(Job([spec], 2), tmp_path / "r.json", tmp_path / "log.txt", env, sys.executable,
                  cpu_sets=[[CORES[0]], [CORES[1]]])
    assert proc.wait(timeout=300) == 0, (tmp_path / "log.txt").read_text()[-2000:]
    (result,) = read_progress(tmp_path / "r.json")["results"]
    assert result["status"] == "ok" and result["world_size"] == 2 and result["cores"] == [CORES[0]]


@pytest.mark.skipif(len(CORES) < 2, reason="two CPU devices need two cores")
def test_the_profiler_runs_a_multi_device_job_beside_a_partner_on_each_device(tmp_path):
    """The testbed's gang pair: a 2-device job with a copy of a one-device partner on each device. Both
    records are measured; the partner's has every copy's iterations; the ξ table keys the rows (2, 1)."""
    from schedlab.profiling.execute import Context
    from schedlab.profiling.mps_table import mps_table
    from schedlab.profiling.profiler import Profiler
    from schedlab.profiling.store import ProfileStore
    from schedlab.profiling.sweep import PairConfig, SoloConfig

    ctx = Context(device="cpu", cpu_sets=[[CORES[0]], [CORES[1]]], key_host="gang-test", mps=False, interval_s=0.2,
                  work_dir=tmp_path / "work")
    store = ProfileStore(tmp_path / "store")
    common = {"size": "tiny", "warmup": 1, "iters": 3, "threads": 1}
    gang = PairConfig(SoloConfig("bert", 4, 1, 2, **common), SoloConfig("ncf", 8, 1, 1, **common))
    records = Profiler(store, ctx, timeout_s=300, sweep_name="gang").pair(gang)
    assert [(r.workload, r.num_gpus, r.status) for r in records] == [("bert", 2, "ok"), ("ncf", 1, "ok")], \
        [r.message for r in records]
    assert records[1].measured_iters >= 2 * 3 and all(r.xi and r.xi > 0 for r in records)
    store.write(records)
    table = mps_table(store.read())
    assert sorted(zip(table["model_a"], table["gpus_a"], table["gpus_b"])) == [("bert", 2, 1), ("ncf", 1, 2)]
