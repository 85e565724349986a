"""Goodput-driven progress as an engine capability (specs/pollux.md; Pollux §3.1-§3.2).

A goodput job (``job.goodput`` is its application's model) counts its work in nominal seconds (its run
time alone at the trace's GPU count and batch), but runs at goodput on its current placement, batch and
epoch over its nominal goodput. Epoch boundaries are the job's own events: there the statistical
efficiency changes, the rate is recomputed and the policy's ``on_epoch`` is called. The engine calls these
hooks only for jobs with ``job.goodput`` set; a fixed-duration job never reaches this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from schedlab.sched.core.protocol import Capability, CapabilityHost, EngineError

if TYPE_CHECKING:
    from schedlab.sched.core.job import Job


class GoodputRates(Capability):
    """The engine's goodput hooks: a job's placement shape, its rate, its next event, its epochs."""

    role: ClassVar[str] = "goodput"

    def attach(self, engine: CapabilityHost) -> None:
        self.engine = engine
        self._per = engine.cluster.gpus_per_server

    def on_allocation(self, job: Job) -> None:
        """The job's GPUs changed: its placement shape, GPUs per server, largest first."""
        per = self._per
        counts: dict[int, int] = {}
        for g in job.gpus:
            counts[g // per] = counts.get(g // per, 0) + 1
        job.placement_shape = tuple(sorted(counts.values(), reverse=True))

    def rate(self, job: Job, rate: float) -> float:
        """``rate`` (solo speed over pace) scaled by goodput now over nominal goodput."""
        rate *= job.goodput.goodput(job.placement_shape, job.global_batch, job.epoch_start) / job.progress_scale
        return rate

    def breakpoint(self, job: Job) -> float:
        """Nominal seconds left when the job's current epoch ends (0 in its last epoch)."""
        return max(0.0, (job.goodput.total_progress - job.epoch_end) / job.progress_scale)

    def mid_run(self, job: Job) -> bool:
        """Whether the job's due event is an epoch boundary rather than its completion."""
        return self.breakpoint(job) > 0

    def next_event_time(self, job: Job) -> float:
        """The end of the job's current epoch at its current rate (its completion in the last epoch)."""
        to_go = max(0.0, job.remaining - self.breakpoint(job))
        return job.last_update + job.overhead_left + to_go / job.rate

    def next_epoch(self, job: Job) -> None:
        """The job reached an epoch boundary: its statistical efficiency changes (specs/pollux.md)."""
        engine = self.engine
        engine.settle(job)
        job.remaining = self.breakpoint(job)  # exactly on the boundary
        job.epoch_start = job.epoch_end
        job.epoch_end = job.goodput.epoch_end(job.epoch_start)
        if job.epoch_end <= job.epoch_start:
            raise EngineError(f"job {job.job_id}: the goodput model gives no progress after {job.epoch_start}")
        engine.refresh_rate(job, force=True)
        engine.policy.on_epoch(engine, job)
