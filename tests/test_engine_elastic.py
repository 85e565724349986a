"""Elastic allocations and goodput-driven progress in the engine, against hand-computed schedules,
plus resize invariants over random scenarios (hypothesis)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine, EngineError
from schedlab.sched.core.goodput_rates import GoodputState
from schedlab.sched.core.job import Job
from schedlab.sched.policies.base import Policy


class TwoEpochModel:
    """A goodput model small enough to integrate by hand: 10 progress units in epoch 1 at 1 unit/s
    per GPU, 20 units in epoch 2 at 2 units/s per GPU, whatever the batch."""

    total_progress = 30.0

    def goodput(self, placement: tuple[int, ...], batch: int, progress: float) -> float:
        return sum(placement) * (1.0 if progress < 10 else 2.0) * (0.5 if len(placement) > 1 else 1.0)

    def epoch_end(self, progress: float) -> float:
        return 10.0 if progress < 10 else 30.0


def goodput_job(job_id: str, submit: float, gpus: int, nominal: float = 20.0) -> Job:
    model = TwoEpochModel()
    job = Job(job_id=job_id, submit_time=submit, num_gpus=gpus, duration=nominal, model="toy")
    job.goodput = GoodputState.new(model, 64, nominal)
    return job


class Scripted(Policy):
    """Starts every job on arrival; at given times resizes a job (a test driver, not a scheduler)."""

    name = "scripted"
    summary = paper = "test driver"

    def __init__(self, resizes: list[tuple[float, str, int]] | None = None, on_epoch_batch: int | None = None):
        super().__init__()
        self.resizes = resizes or []
        self.pending: list[Job] = []
        self.by_id: dict[str, Job] = {}
        self.epochs: list[tuple[float, str]] = []
        self.on_epoch_batch = on_epoch_batch
        self.armed = False

    def on_arrival(self, engine: Engine, job: Job) -> None:
        self.pending.append(job)
        self.by_id[job.job_id] = job

    def on_timer(self, engine: Engine, payload: Any) -> None:
        job_id, gpus = payload
        job = self.by_id[job_id]
        if job.running:
            engine.resize(job, gpus)

    def on_epoch(self, engine: Engine, job: Job) -> None:
        self.epochs.append((engine.now, job.job_id))
        if self.on_epoch_batch:
            engine.set_batch(job, self.on_epoch_batch)

    def schedule(self, engine: Engine) -> None:
        if not self.armed:
            self.armed = True
            for at, job_id, gpus in self.resizes:
                engine.set_timer(at, (job_id, gpus))
        for job in list(self.pending):
            if engine.start(job):
                self.pending.remove(job)


def run(jobs: list[Job], policy: Policy, cluster: str = "2x4", stall: float = 0.0) -> Engine:
    engine = Engine(jobs, ClusterState(load_cluster(cluster)), policy, allocation_stall_s=stall,
                    preemption_overhead_s=0.0)
    engine.run()
    return engine


def test_goodput_job_changes_rate_at_its_epoch_boundary():
    # 1 GPU: epoch 1 = 10 units at 1/s (10 s), epoch 2 = 20 units at 2/s (10 s); 3 s stall at start
    job = goodput_job("a", 0.0, 1)
    policy = Scripted()
    run([job], policy, stall=3.0)
    assert job.end_time == pytest.approx(23.0)
    assert policy.epochs == [(pytest.approx(13.0), "a")]


def test_resize_settles_progress_charges_the_stall_and_speeds_up():
    # no stall: 8 units at t=8 on 1 GPU; grown to 2 GPUs of one server: 2 units at 2/s -> 9, then
    # epoch 2's 20 units at 4/s -> 14
    job = goodput_job("a", 0.0, 1)
    run([job], Scripted(resizes=[(8.0, "a", 2)]))
    assert job.end_time == pytest.approx(14.0)
    # 3 s stall on the first start and on the resize: 5 units at t=8, stalled until 11; 5 units at
    # 2/s -> 13.5 (epoch boundary); 20 units at 4/s -> 18.5
    job = goodput_job("a", 0.0, 1)
    engine = run([job], Scripted(resizes=[(8.0, "a", 2)]), stall=3.0)
    assert job.end_time == pytest.approx(18.5)
    assert job.resizes == 1 and job.num_gpus == 2 and job.requested_gpus == 1
    assert engine.cluster.free_gpus == engine.cluster.total_gpus


def test_attained_service_counts_each_allocation():
    job = goodput_job("a", 0.0, 1)
    seen: dict[str, float] = {}

    class Probe(Scripted):
        def on_timer(self, engine, payload):
            if payload == "probe":
                seen["service"] = engine.attained_service(job)
                return
            super().on_timer(engine, payload)

        def schedule(self, engine):
            if not self.armed:
                engine.set_timer(10.0, "probe")
            super().schedule(engine)

    run([job], Probe(resizes=[(4.0, "a", 2)]))
    # 4 s on 1 GPU + 6 s on 2 GPUs
    assert seen["service"] == pytest.approx(4.0 + 12.0)


def test_shrink_releases_the_gpus_on_the_least_used_server_and_placement_changes_the_rate():
    # 1x... 2 servers of 4: a 4-GPU job on server 0, grown to 6 spreads over 2 servers (rate halved in
    # the toy model: spread jobs pay a 0.5 factor), then shrunk back to 4 on its first server
    job = goodput_job("a", 0.0, 4, nominal=20.0)
    shapes: list[tuple[int, ...]] = []

    class Watch(Scripted):
        def on_timer(self, engine, payload):
            super().on_timer(engine, payload)
            shapes.append(job.goodput.placement_shape)

    run([job], Watch(resizes=[(1.0, "a", 6), (2.0, "a", 4)]))
    assert shapes == [(4, 2), (4,)]
    # 0-1 s: 4 units/s -> 4; 1-2 s: 6*0.5 = 3 units/s -> 7; then 4/s: 3 units -> 2.75 s;
    # epoch 2 at 8/s: 20 units -> 2.5 s
    assert job.end_time == pytest.approx(2.0 + 0.75 + 2.5)


def test_set_batch_is_applied_and_resize_refuses_what_does_not_fit():
    job = goodput_job("a", 0.0, 1)
    run([job], Scripted(on_epoch_batch=128))
    assert job.goodput.global_batch == 128
    refused: list[bool] = []

    class GrowTooMuch(Scripted):
        def schedule(self, engine):
            super().schedule(engine)
            for j in engine.running:
                refused.append(engine.resize(j, 5))  # nothing free: refused, nothing changed
                assert j.num_gpus == 4 and len(j.gpus) == 4
                with pytest.raises(EngineError):
                    engine.resize(j, 0)

    run([goodput_job("c", 0.0, 4)], GrowTooMuch(), cluster="1x4")
    assert refused == [False]


def test_fixed_jobs_cannot_set_a_batch():
    job = Job(job_id="f", submit_time=0.0, num_gpus=1, duration=5.0)

    class SetBatch(Scripted):
        def schedule(self, engine):
            super().schedule(engine)
            with pytest.raises(EngineError):
                engine.set_batch(job, 64)

    run([job], SetBatch())


class RandomResizer(Policy):
    """Starts jobs FIFO-greedily and resizes running jobs at random on a timer (seeded)."""

    name = "random-resizer"
    summary = paper = "test driver"

    def __init__(self, seed: int, checks: list[str]):
        super().__init__()
        import random

        self.rng = random.Random(seed)
        self.pending: list[Job] = []
        self.checks = checks
        self.progress: dict[str, float] = {}

    def on_arrival(self, engine, job):
        self.pending.append(job)

    def on_timer(self, engine, payload):
        for job in list(engine.running):
            target = self.rng.randint(1, engine.cluster.total_gpus)
            engine.resize(job, target)
            self._check(engine)
        if self.pending or engine.running:
            engine.set_timer(engine.now + self.rng.choice([0.5, 3.0, 17.0]))

    def on_finish(self, engine, job):
        self._check(engine)

    def schedule(self, engine):
        for job in list(self.pending):
            if engine.start(job, num_gpus=self.rng.randint(1, max(1, min(4, engine.cluster.free_gpus)))):
                self.pending.remove(job)
        if not self.progress.get("armed"):
            self.progress["armed"] = 1.0
            engine.set_timer(engine.now + 1.0)
        self._check(engine)

    def _check(self, engine):
        cluster = engine.cluster
        held = [g for job in engine.running for g in job.gpus]
        assert len(held) == len(set(held)) <= cluster.total_gpus
        assert cluster.total_gpus - cluster.free_gpus == len(held)
        for job in engine.running:
            assert 1 <= job.num_gpus == len(job.gpus)
            left = engine.remaining(job)
            assert left <= self.progress.get(job.job_id, math.inf) + 1e-9, "progress went backwards"
            self.progress[job.job_id] = left


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 8), goodput=st.booleans(), stall=st.sampled_from([0.0, 2.0]))
def test_resize_invariants(seed, n, goodput, stall):
    jobs = []
    for i in range(n):
        if goodput:
            jobs.append(goodput_job(f"j{i}", float(i), 1, nominal=30.0))
        else:
            jobs.append(Job(job_id=f"j{i}", submit_time=float(i), num_gpus=1, duration=25.0, index=i))
        jobs[-1].index = i
    engine = Engine(jobs, ClusterState(load_cluster("2x4")), RandomResizer(seed, []), allocation_stall_s=stall,
                    preemption_overhead_s=0.0)
    engine.run()
    assert all(j.finished for j in jobs)
    assert engine.cluster.free_gpus == engine.cluster.total_gpus
