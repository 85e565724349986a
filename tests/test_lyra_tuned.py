"""Lyra+TunedJobs (Lyra EuroSys'23 §7.4; specs/lyra.md §3): elastic goodput jobs re-tune their batch at
every allocation change (Pollux's agent), and the knapsack values use the goodput speed-up. Checked on a
goodput model small enough to integrate by hand."""

from __future__ import annotations

import pytest
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.core.goodput_rates import GoodputState
from schedlab.sched.core.job import Job
from schedlab.sched.policies import make_policy

PER_GPU_BATCH = 16


class TunedModel:
    """One epoch of 200 progress units. Goodput = GPUs x 1 unit/s at the tuned batch (16 per GPU),
    half that at any other batch; ``flat`` models gain nothing beyond 2 GPUs (a job that does not scale)."""

    total_progress = 200.0

    def __init__(self, flat: bool = False) -> None:
        self.flat = flat

    def _gpus(self, placement: tuple[int, ...]) -> int:
        return min(sum(placement), 2) if self.flat else sum(placement)

    def goodput(self, placement: tuple[int, ...], batch: int, progress: float) -> float:
        n = sum(placement)
        return self._gpus(placement) * (1.0 if batch == PER_GPU_BATCH * n else 0.5)

    def best_batch(self, placement: tuple[int, ...], progress: float) -> tuple[int, float]:
        batch = PER_GPU_BATCH * sum(placement)
        return batch, self.goodput(placement, batch, progress)

    def epoch_end(self, progress: float) -> float:
        return self.total_progress


def elastic_goodput_job(job_id: str, index: int, flat: bool = False) -> Job:
    """Base 2 GPUs at batch 32 (tuned for 2): 2 units/s = 100 nominal seconds; range [2, 4] GPUs."""
    model = TunedModel(flat)
    job = Job(job_id=job_id, submit_time=0.0, num_gpus=2, duration=100.0, index=index, model="toy")
    job.goodput = GoodputState.new(model, 2 * PER_GPU_BATCH, job.duration)
    job.elastic_min, job.elastic_max, job.fungible = 2, 4, True
    return job


def run(jobs: list[Job], cluster: str, tuned: bool) -> Engine:
    policy = make_policy("lyra", {"loaning": False, "tuned_jobs": tuned, "rescale_interval_s": 0.0})
    engine = Engine(jobs, ClusterState(load_cluster(cluster)), policy, preemption_overhead_s=0.0,
                    allocation_stall_s=0.0)
    engine.run()
    return engine


@pytest.mark.parametrize("tuned, end, batch", [(True, 50.0, 64), (False, 100.0, 32)])
def test_tuned_jobs_retune_the_batch_when_the_job_grows(tuned, end, batch):
    """Alone on 4 GPUs the job grows to its maximum at once. Tuned: batch 64, 4 units/s, done at 50 s;
    untuned: it keeps batch 32, whose goodput on 4 GPUs is no better than on 2 (done at 100 s)."""
    job = elastic_goodput_job("a", 0)
    run([job], "1x4", tuned)
    assert job.end_time == pytest.approx(end)
    assert job.goodput.global_batch == batch


def test_tuned_jobs_knapsack_gives_the_flexible_gpus_to_the_job_that_gains():
    """6 GPUs, two jobs at base 2 each: the 2 spare GPUs go to the job whose goodput grows with them
    (B: 4 units/s, done at 50 s), not to the flat one (A: 100 s; it would have gone first by index)."""
    flat, scaling = elastic_goodput_job("a", 0, flat=True), elastic_goodput_job("b", 1)
    run([flat, scaling], "1x6", tuned=True)
    assert scaling.end_time == pytest.approx(50.0)
    assert flat.end_time == pytest.approx(100.0)
    assert scaling.goodput.global_batch == 4 * PER_GPU_BATCH
