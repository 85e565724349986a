"""Mini traces for the testbed, in the style of Castor §9.1's physical experiments: scaled-down Philly
jobs (Castor sampled 30-60 jobs for 32 GPUs; 66 % of them on at most a quarter of the cluster, the rest
on half or all of it; 200-2,000 iterations each).

Here, for ``devices`` devices: a job is small with probability 0.66 (``max(1, devices // 4)`` devices)
or large (``devices // 2`` or ``devices``, equally likely, at least 1). Its length is drawn from the
Philly trace's duration distribution (``conf/synthetic.yaml``'s quantiles, 1-GPU and multi-GPU jobs
apart) and mapped, rank-preserving on a log scale, onto ``[min_job_s, max_job_s]`` seconds (the
quantiles 1 % .. 99 % of 1-GPU jobs to the two ends, clipped); its workload is drawn uniformly from
``kinds`` (workload, per-GPU batch), and its iterations are its length over the node's iteration time.
Arrivals are a Poisson process at ``load`` (1.0: the offered device-seconds equal the devices times
the arrival span). The whole run is bounded: if the estimated makespan (the arrival span or the work
over the devices, whichever is longer, plus the longest job and a start-up per job per device) exceeds
``budget_s``, every length is scaled down to fit.

Output: the canonical job table with ``model, batch_size, iterations`` (no duration: the replay and
the testbed derive it from the node's model).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

SMALL_FRACTION = 0.66  # Castor §9.1: 66 % of jobs on at most a quarter of the cluster
MIN_ITERATIONS = 20


def job_devices(rng: np.random.Generator, n: int, devices: int) -> np.ndarray:
    small = max(1, devices // 4)
    large = rng.choice([max(1, devices // 2), devices], size=n)
    return np.where(rng.random(n) < SMALL_FRACTION, small, large).astype(np.int64)


def philly_lengths(rng: np.random.Generator, gpus: np.ndarray, low_s: float, high_s: float) -> np.ndarray:
    """Philly durations drawn by inverse CDF, mapped log-linearly onto ``[low_s, high_s]`` (module docstring)."""
    from schedlab.sched.traces.synthetic import load_config

    q = load_config().duration_quantiles
    u = rng.random(len(gpus))
    p, single, multi = np.array(q.probabilities), np.log(q.single_gpu_s), np.log(q.multi_gpu_s)
    drawn = np.where(gpus == 1, np.interp(u, p, single), np.interp(u, p, multi))
    lo, hi = np.interp([0.01, 0.99], p, single)
    scaled = math.log(low_s) + (np.clip(drawn, lo, hi) - lo) / (hi - lo) * (math.log(high_s) - math.log(low_s))
    return np.exp(scaled)


def generate(num_jobs: int, devices: int, kinds: Sequence[tuple[str, int]],
             iteration_s: Callable[[str, int, int], float], *, budget_s: float, startup_s: float = 0.0,
             min_job_s: float = 10.0, max_job_s: float = 60.0, load: float = 1.0, seed: int = 0) -> pd.DataFrame:
    """A mini trace (module docstring); ``iteration_s(workload, batch, devices)`` is the node's model."""
    if num_jobs < 1 or devices < 1 or not kinds:
        raise ValueError("a mini trace needs at least one job, one device and one workload")
    if not 0 < min_job_s <= max_job_s:
        raise ValueError(f"job lengths: 0 < min ({min_job_s}) <= max ({max_job_s})")
    rng = np.random.default_rng(seed)
    gpus = job_devices(rng, num_jobs, devices)
    lengths = philly_lengths(rng, gpus, min_job_s, max_job_s)
    picks = rng.integers(0, len(kinds), size=num_jobs)
    gaps = rng.exponential(1.0, size=num_jobs)
    work = float((gpus * lengths).sum())
    span = work / (devices * load)
    estimate = max(span, work / devices) + lengths.max() + startup_s * num_jobs / devices
    scale = min(1.0, (budget_s - startup_s * num_jobs / devices) / (estimate - startup_s * num_jobs / devices)) \
        if budget_s > startup_s * num_jobs / devices else 0.0
    if scale <= 0:
        raise ValueError(f"a budget of {budget_s:g} s cannot hold {num_jobs} jobs' start-ups ({startup_s:g} s each)")
    lengths, span = lengths * scale, span * scale
    arrivals = np.cumsum(gaps)
    arrivals = (arrivals - arrivals[0]) / (arrivals[-1] - arrivals[0]) * span if num_jobs > 1 else np.zeros(1)
    models, batches, iterations = [], [], []
    for length, g, k in zip(lengths, gpus, picks):
        workload, batch = kinds[k]
        models.append(workload)
        batches.append(int(batch))
        iterations.append(max(MIN_ITERATIONS, int(round(length / iteration_s(workload, int(batch), int(g))))))
    return pd.DataFrame({
        "job_id": [f"mini-{i:03d}" for i in range(num_jobs)],
        "submit_time": np.round(arrivals, 3),
        "num_gpus": gpus,
        "model": models,
        "batch_size": batches,
        "iterations": np.array(iterations, dtype=np.int64),
    })
