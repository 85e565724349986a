"""The policy API: everything a scheduling policy written outside schedlab may import.

.. code-block:: python

    from schedlab.sched.api import JobView, Policy, PolicyEngine

A policy is a :class:`Policy` subclass (docs/tutorials/write-a-policy.md has a complete example) run by
``--policy path/to/file.py:Class``, ``--policy package.module:Class``, an experiment's ``policies:`` list,
or a ``schedlab.policies`` entry point of an installed package. What this module exports is the contract;
anything else in schedlab may change without notice. The guarantees are written once, in the docstrings
of the definitions re-exported here; in short:

- **The calls** (:class:`Policy`, ``sched/policies/base.py``): the engine calls ``on_arrival`` for every
  job as it is submitted, ``on_finish`` as a running job completes (its GPUs already free), ``on_timer``
  when a timer set with ``engine.set_timer`` fires, ``on_epoch`` for goodput jobs, then ``schedule``
  once per instant at which anything happened (the completions and timers due, then the arrivals, then
  ``schedule``); a policy decides, it never loops over time. A replay ends when every job has finished:
  jobs left waiting with no event pending fail it with :class:`EngineError`.
- **The engine** (:class:`PolicyEngine`, ``sched/core/protocol.py``): every member a policy may read
  (``now``, ``cluster``, ``running``, ``remaining(job)``, ``expected_end(job)``, ``gpus_free_at(n)`` …)
  and call (``start``, ``preempt``, ``resize``, ``set_batch``, ``set_timer``), each with its cost and what
  it changes. A policy changes state only through these calls; ``start`` returns False and changes
  nothing when the placement strategy finds no room; :class:`EngineError` is a policy's bug (starting a
  running job, an impossible share).
- **Jobs** (:class:`JobView`): the job fields a policy may read; it writes none (the engine owns them).
  ``index`` is the trace position, unique: the tie-break everywhere.
- **Parameters**: a ``Params`` pydantic model with a default for every field (:class:`NoParams` when
  none); ``--set LABEL.FIELD=VALUE`` and an experiment entry's ``params:`` are validated against it, as
  for shipped policies; the instance reads them as ``self.params``.
- **Durations**: a policy that decides on job durations reads them through ``self.duration(job)``,
  ``self.remaining(engine, job)``, ``self.expected_end(engine, job)`` and ``self.ends(engine)``, and
  subclasses :class:`KnowledgeParams` for its ``Params``: then ``knowledge: estimate`` runs it on an
  estimator's figures with the true ones hidden (reading ``job.duration`` then fails; docs/estimates.md).
- **Class attributes** (``Policy``): ``name`` (required: the label of its results; not a shipped policy's),
  ``summary``, ``paper``, ``waits_when_refused`` (a job a strict placement refuses stays queued: needed
  to run under ``strict-consolidated`` / ``strict-best-fit``), ``shares_gpus``,
  ``default_preemption_overhead_s`` (default :data:`CHECKPOINT_RESTORE_S`), ``relative_cost`` (how long
  its replay takes against a queue policy's, default 1: an experiment submits the costliest first).
- **Determinism**: the engine is deterministic for a seed; a policy that draws random numbers should seed
  them from its parameters so that a replay is repeatable (the tracking keys a run by its configuration).
- **Helpers**: :class:`DemandQueue` (waiting jobs by GPU demand, best fitting job in O(distinct demands)),
  :class:`LevelQueues` (Tiresias' multi-level queues), and the placement strategies (:data:`STRATEGIES`;
  ``engine.start(job)`` uses the replay's, ``engine.start(job, placement)`` takes a policy's own
  ``[(server, gpus)]`` list, e.g. from a strategy called on ``engine.cluster``).

``schedlab check-policy path/to/file.py:Class`` checks a policy against this contract.
"""

from __future__ import annotations

from schedlab.sched.core.placement import (
    DEFAULT as DEFAULT_PLACEMENT,
    STRATEGIES,
    Placement,
    Strategy,
    best_fit,
    fewest_servers,
    random_placement,
    strict_best_fit,
    strict_consolidated,
)
from schedlab.sched.core.protocol import EngineError, JobView, PolicyEngine
from schedlab.sched.estimators.params import KnowledgeParams
from schedlab.sched.policies.base import CHECKPOINT_RESTORE_S, NoParams, Policy
from schedlab.sched.policies.queues import DemandQueue, LevelQueues

__all__ = [
    "CHECKPOINT_RESTORE_S",
    "DEFAULT_PLACEMENT",
    "STRATEGIES",
    "DemandQueue",
    "EngineError",
    "JobView",
    "KnowledgeParams",
    "LevelQueues",
    "NoParams",
    "Placement",
    "Policy",
    "PolicyEngine",
    "Strategy",
    "best_fit",
    "fewest_servers",
    "random_placement",
    "strict_best_fit",
    "strict_consolidated",
]
