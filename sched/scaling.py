"""How fast an elastic job runs on a given number of GPUs (Lyra EuroSys'23 §5, §7.1-7.2;
specs/lyra.md §2.1).

Lyra's simulator scales elastic jobs linearly within their range: running time is inversely
proportional to the allocation. Its imperfect-scaling study (§7.2, Fig. 8) loses 20 % of the
throughput each added worker brings: ``rate(n) = (min + (1 - loss) (n - min)) / min`` (not
compounding). Work is counted in seconds at ``elastic_min`` GPUs (rate 1 there), so a replay that
never resizes runs every job exactly as its trace says. Below ``elastic_min`` (AFS or Pollux may
give less) the rate is proportional.
"""

from __future__ import annotations

from schedlab.sched.job import Job


def speed(lo: int, loss: float, gpus: int) -> float:
    """Rate on ``gpus`` GPUs of a job with base ``lo`` GPUs and per-GPU ``loss`` above it."""
    if gpus <= lo:
        return gpus / lo
    return (lo + (1.0 - loss) * (gpus - lo)) / lo


def elastic_speed(job: Job) -> float:
    """The engine's rate factor for an elastic (non-goodput) job on its current GPUs."""
    return speed(job.elastic_min, job.scaling_loss, job.num_gpus)


def run_time(job: Job, remaining: float, gpus: int) -> float:
    """Seconds ``remaining`` base-seconds of work take on ``gpus`` GPUs (T_j(w) of §5.2)."""
    return remaining / speed(job.elastic_min, job.scaling_loss, gpus)
