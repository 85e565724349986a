"""The canonical job table (DESIGN.md, "Contracts"): what every loader produces and every replay consumes.

Columns
-------
required: ``job_id`` (str), ``submit_time`` (float, seconds from trace start), ``num_gpus`` (int >= 1),
and either ``duration`` (float, solo seconds) or all of ``model, batch_size, iterations``.
optional: ``deadline`` (absolute seconds), ``elastic_min, elastic_max`` (GPUs), ``fungible`` (bool),
``heterogeneous`` (bool: may run on training and inference GPUs at once, Lyra §6), ``checkpoint``
(bool), ``user``, ``vc`` (str), ``global_batch`` (int: a goodput job's global batch, specs/pollux.md;
its ``model`` names the application).
"""

from __future__ import annotations

REQUIRED_COLUMNS: tuple[str, ...] = ("job_id", "submit_time", "num_gpus")
DURATION_COLUMNS: tuple[str, ...] = ("duration",)
WORKLOAD_COLUMNS: tuple[str, ...] = ("model", "batch_size", "iterations")
OPTIONAL_COLUMNS: tuple[str, ...] = (
    "deadline",
    "elastic_min",
    "elastic_max",
    "fungible",
    "heterogeneous",
    "checkpoint",
    "user",
    "vc",
    "global_batch",
)
CANONICAL_COLUMNS: tuple[str, ...] = (
    REQUIRED_COLUMNS + DURATION_COLUMNS + WORKLOAD_COLUMNS + OPTIONAL_COLUMNS
)
