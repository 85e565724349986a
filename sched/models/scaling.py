"""How fast an elastic job runs on a given number of GPUs (Lyra EuroSys'23 §5, §7.1-7.2;
docs/explanation/lyra.md).

Lyra's simulator scales elastic jobs linearly within their range: running time is inversely
proportional to the allocation. Its imperfect-scaling study (§7.2, Fig. 8) loses 20 % of the
throughput each added worker brings: ``rate(n) = (min + (1 - loss) (n - min)) / min`` (not
compounding). Work is counted in seconds at ``elastic_min`` GPUs (rate 1 there), so a replay that
never resizes runs every job exactly as its trace says. Below ``elastic_min`` (AFS or Pollux may
give less) the rate is proportional.

The engine applies it through its ``job_speed`` hook (a factor set at every start and resize):
:func:`use_elastic_scaling` installs it on a replay whose table has elastic jobs, on the plain
cluster directly and on a pooled one (``sched/core/pools.py``) as ``PooledCluster.scaling`` over the
job's *normalised* GPUs (V100s + T4s / r), so that a loaned T4 counts as 1/r of a training GPU.
Goodput jobs (Lyra+TunedJobs) take their speed from their goodput model instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedlab.sched.core.job import Job, JobSource

if TYPE_CHECKING:
    from schedlab.sched.core.engine import Engine


def speed(lo: int, loss: float, gpus: int) -> float:
    """Rate on ``gpus`` GPUs of a job with base ``lo`` GPUs and per-GPU ``loss`` above it."""
    if gpus <= lo:
        return gpus / lo
    return (lo + (1.0 - loss) * (gpus - lo)) / lo


def elastic_speed(job: Job) -> float:
    """The rate factor of a job on its current GPUs: its speed-up if elastic (not goodput), else 1."""
    if not job.elastic_max or job.goodput is not None:
        return 1.0
    return speed(job.elastic_min, job.scaling_loss, job.num_gpus)


def use_elastic_scaling(engine: Engine) -> bool:
    """Make ``engine`` run its elastic jobs at their speed-up; False (nothing done) if it has none."""
    jobs = engine.jobs
    elastic = jobs.has_elastic if isinstance(jobs, JobSource) else any(
        job.elastic_max and job.goodput is None for job in jobs)
    if not elastic:
        return False
    cluster = engine.cluster
    normalised = getattr(cluster, "normalised_gpus", None)
    if normalised is not None:  # a pooled cluster: its speed() multiplies this in
        def pooled(job: Job) -> float:
            if not job.elastic_max or job.goodput is not None:
                return 1.0
            return speed(job.elastic_min, job.scaling_loss, normalised(job))
        cluster.scaling = pooled
        if engine.job_speed is None:
            engine.job_speed = cluster.speed
    elif engine.job_speed is None:
        engine.job_speed = elastic_speed
    else:
        raise ValueError("the engine already has a job_speed; elastic scaling cannot be added to it")
    return True


def run_time(job: Job, remaining: float, gpus: int) -> float:
    """Seconds ``remaining`` base-seconds of work take on ``gpus`` GPUs (T_j(w) of §5.2)."""
    return remaining / speed(job.elastic_min, job.scaling_loss, gpus)
