"""``pollux`` with ``knowledge: learned`` (the default): the scheduler and each job's batch choice see
only the job's own goodput estimate (``sched/models/goodput_fit.py``), as in Pollux's simulator study
(OSDI'21 §4.1, §5.3; petuum/adaptdl ``osdi21-artifact`` ``simulator/``). The engine still runs every
job at its true goodput.

When the estimate learns (the study's agent): at every round, each job that has computed since its
last change reports the configuration it ran (nodes, GPUs, micro-batch, pass and sync times) and its
gradient statistics; at an epoch boundary it reports the configuration of the epoch that ended. Each
report updates the gradient statistics and, for a configuration not seen before, refits the
throughput parameters. After a report a running job re-chooses its batch from the estimate (the
study re-chooses after every simulated step), and the round's allocation is priced with it.

What the scheduler reads from the estimate (the study's ``SpeedupFunction``): goodput depends on the
number of GPUs and on whether they span nodes (the throughput model's sync link; not on how many nodes
or how GPUs spread over them); a job's speed-up is its best estimated goodput over the 50 candidate
batches, over that on one node with the fair share of ceil(GPUs / jobs) GPUs; before the first report it is linear, GPUs / fair share, and the batch is
``max(B0, min per-GPU batch x GPUs)``. A job's GPU cap doubles the most GPUs it has reported on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from schedlab.sched.models.goodput_fit import GoodputEstimate, measure

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine
    from schedlab.sched.models.goodput import GoodputModel
    from schedlab.sched.core.job import Job


class LearnedGoodput:
    """Every active goodput job's estimate, and what the policy asks of it."""

    def __init__(self) -> None:
        self.estimates: dict[Job, GoodputEstimate] = {}
        # per job, what its estimate gives while it lasts: the best (batch, goodput) per (several nodes?,
        # GPUs) until a refit or new gradient statistics; the candidates' iteration times per (several
        # nodes?, GPUs) until a refit; their efficiencies per GPU count until new gradient statistics
        self._best: dict[Job, dict[tuple[bool, int], tuple[int, float]]] = {}
        self._times: dict[Job, dict[tuple[bool, int], np.ndarray]] = {}
        self._efficiency: dict[Job, dict[int, np.ndarray]] = {}
        self._choices: dict[tuple[int, int], tuple[np.ndarray, ...]] = {}  # (id(model), GPUs) -> candidates

    def estimate(self, job: Job) -> GoodputEstimate:
        est = self.estimates.get(job)
        if est is None:
            est = self.estimates[job] = GoodputEstimate(min_batch=job.goodput.model.min_batch)
            self._best[job], self._times[job], self._efficiency[job] = {}, {}, {}
        return est

    def forget(self, job: Job) -> None:
        for memo in (self.estimates, self._best, self._times, self._efficiency):
            memo.pop(job, None)

    def observe(self, engine: PolicyEngine, job: Job, epoch_ended: bool = False) -> None:
        """``job`` reports the configuration it runs (at an epoch boundary: the epoch that ended)
        if it has computed at it: past its allocation stall, or at an epoch boundary."""
        if not job.running or not (epoch_ended or not engine.stalled(job)):
            return
        model = job.goodput.model
        epoch = model.epoch(job.goodput.epoch_start) - (1 if epoch_ended else 0)
        est = self.estimate(job)
        grad = est.grad
        refit = est.observe(measure(model, job.goodput.placement_shape, job.goodput.global_batch, epoch))
        if refit:
            self._times[job].clear()
        if est.grad != grad:
            self._efficiency[job].clear()
        if refit or est.grad != grad:
            self._best[job].clear()

    def prior_batch(self, job: Job, replicas: int) -> int:
        """The study's batch before any report: the smallest that gives every GPU its smallest batch."""
        model = job.goodput.model
        return max(model.min_batch, model.min_local_batch * replicas)

    def best(self, job: Job, nodes: int, replicas: int) -> tuple[int, float]:
        """The estimate's best ``(batch, goodput)`` on ``replicas`` GPUs over ``nodes`` nodes;
        ``(0, 0.0)`` if no candidate batch fits; needs a report. The throughput model tells one node
        from several, not how many (its sync link), so every ``nodes > 1`` shares one answer."""
        key = (nodes > 1, replicas)
        found = self._best[job].get(key)
        return self._find_best(job, key) if found is None else found

    def _find_best(self, job: Job, key: tuple[bool, int]) -> tuple[int, float]:
        """``best`` computed for ``key`` (several nodes?, GPUs), and kept until the estimate changes."""
        multi, replicas = key
        choices, micro, accum, trained = self._candidates(job.goodput.model, replicas)
        if not len(choices):
            found = (0, 0.0)
        else:
            est = self.estimates[job]
            efficiency = self._efficiency[job].get(replicas)
            if efficiency is None:
                efficiency = self._efficiency[job][replicas] = est.efficiency(trained)
            times = self._times[job].get(key)
            if times is None:
                times = self._times[job][key] = est.iteration_times(2 if multi else 1, replicas, micro, accum)
            goodput = efficiency / times  # est.goodput, its two parts kept
            i = int(goodput.argmax())
            found = (int(choices[i]), float(goodput[i])) if goodput[i] > 0 else (0, 0.0)
        self._best[job][key] = found
        return found

    def batch(self, job: Job, shape: tuple[int, ...]) -> int:
        """The batch ``job`` runs at on placement ``shape``: the prior's, else the estimate's best
        (its current batch if none fits)."""
        if self.estimate(job).params is None:
            return self.prior_batch(job, sum(shape))
        return self.best(job, len(shape), sum(shape))[0] or job.goodput.global_batch

    def speedup(self, job: Job, fair_gpus: int) -> Callable[[tuple[int, ...]], float]:
        """Placement shape -> estimated speed-up over one node with ``fair_gpus`` GPUs."""
        if self.estimate(job).params is None:
            return lambda shape: sum(shape) / fair_gpus
        model = job.goodput.model
        fair = min(fair_gpus, model.max_batch // model.min_local_batch)
        base = 0.0
        while fair >= 1 and base <= 0.0:
            base = self.best(job, 1, fair)[1]
            fair -= 1
        if base <= 0.0:
            return lambda shape: 0.0
        memo, find = self._best[job], self._find_best  # ``best``, inlined: the solver asks ~10^6 times a replay

        def speedup(shape: tuple[int, ...]) -> float:
            key = (len(shape) > 1, sum(shape))
            found = memo.get(key)
            return (find(job, key) if found is None else found)[1] / base

        return speedup

    def max_reported(self, job: Job) -> int:
        """The most GPUs among the configurations ``job`` has reported."""
        return self.estimate(job).max_replicas

    def _candidates(self, model: GoodputModel, replicas: int) -> tuple[np.ndarray, ...]:
        """The candidate batches on ``replicas`` GPUs and their (micro-batch, passes, batch trained)."""
        key = (id(model), replicas)
        found = self._choices.get(key)
        if found is None:
            choices = model.batch_choices(replicas)
            configs = np.array([model.config(replicas, b) for b in choices], dtype=float).reshape(-1, 3)
            found = self._choices[key] = (np.array(choices, dtype=int), configs[:, 0], configs[:, 1], configs[:, 2])
        return found
