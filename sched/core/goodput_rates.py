"""Goodput-driven progress as an engine capability (docs/explanation/pollux.md; Pollux §3.1-§3.2).

A goodput job (``job.goodput`` is its :class:`GoodputState`: the application's model, batch, epoch and
placement shape) counts its work in nominal seconds (its run
time alone at the trace's GPU count and batch), but runs at goodput on its current placement, batch and
epoch over its nominal goodput. Epoch boundaries are the job's own events: there the statistical
efficiency changes, the rate is recomputed and the policy's ``on_epoch`` is called. The engine calls these
hooks only for jobs with ``job.goodput`` set; a fixed-duration job never reaches this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from schedlab.sched.core.protocol import Capability, CapabilityHost, EngineError

if TYPE_CHECKING:
    from schedlab.sched.core.job import Job


#: a goodput job's spec, set from its trace row and never written afterwards (``tests/test_engine_contract.py``)
GOODPUT_SPEC_FIELDS: tuple[str, ...] = ("model", "progress_scale")


@dataclass(slots=True, eq=False)
class GoodputState:
    """A goodput job's extension state (docs/explanation/pollux.md), attached as ``job.goodput`` only to
    jobs with a goodput model: progress in the model's own units, converted to nominal seconds so that
    ``job.remaining`` keeps one meaning for every policy. ``model`` and ``progress_scale`` are spec (set
    from the trace row); the rest is written by the engine (:meth:`Engine.set_batch`) and
    :class:`GoodputRates` only."""

    model: Any  # the application's sched/models/goodput.GoodputModel
    global_batch: int  # current global batch (adaptive policies change it through the engine)
    progress_scale: float  # model progress units per nominal second: total_progress / duration
    epoch_start: float = 0.0  # model progress at the start of the current epoch (an exact model boundary)
    epoch_end: float = 0.0  # model progress at which the current epoch ends: the next rate change
    placement_shape: tuple[int, ...] = ()  # GPUs per server of the current allocation, largest first

    @classmethod
    def new(cls, model: Any, global_batch: int, duration: float) -> GoodputState:
        """The state of a job that has not started: epoch 0, ``duration`` nominal seconds of work."""
        return cls(model, global_batch, model.total_progress / duration, 0.0, model.epoch_end(0.0))


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
        job.goodput.placement_shape = tuple(sorted(counts.values(), reverse=True))

    def rate(self, job: Job, rate: float) -> float:
        """``rate`` (solo speed over pace) scaled by goodput now over nominal goodput."""
        state = job.goodput
        rate *= state.model.goodput(state.placement_shape, state.global_batch, state.epoch_start) / state.progress_scale
        return rate

    def breakpoint(self, job: Job) -> float:
        """Nominal seconds left when the job's current epoch ends (0 in its last epoch)."""
        state = job.goodput
        return max(0.0, (state.model.total_progress - state.epoch_end) / state.progress_scale)

    def mid_run(self, job: Job) -> bool:
        """Whether the job's due event is an epoch boundary rather than its completion."""
        return self.breakpoint(job) > 0

    def next_event_time(self, job: Job) -> float:
        """The end of the job's current epoch at its current rate (its completion in the last epoch)."""
        to_go = max(0.0, job.remaining - self.breakpoint(job))
        return job.last_update + job.overhead_left + to_go / job.rate

    def next_epoch(self, job: Job) -> None:
        """The job reached an epoch boundary: its statistical efficiency changes (docs/explanation/pollux.md)."""
        engine = self.engine
        engine.settle(job)
        job.remaining = self.breakpoint(job)  # exactly on the boundary
        state = job.goodput
        state.epoch_start = state.epoch_end
        state.epoch_end = state.model.epoch_end(state.epoch_start)
        if state.epoch_end <= state.epoch_start:
            raise EngineError(f"job {job.job_id}: the goodput model gives no progress after {state.epoch_start}")
        engine.refresh_rate(job, force=True)
        engine.policy.on_epoch(engine, job)
