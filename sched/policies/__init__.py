"""The policy registry: ``POLICIES[name]`` is a Policy class; ``make_policy`` validates parameters."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from schedlab.sched.policies.backfill import Backfill
from schedlab.sched.policies.base import Policy
from schedlab.sched.policies.ordered import FIFO, SJF, SSF
from schedlab.sched.policies.srtf import SRTF
from schedlab.sched.policies.tiresias import Tiresias

POLICIES: dict[str, type[Policy]] = {p.name: p for p in (FIFO, SJF, SSF, SRTF, Tiresias, Backfill)}
BASELINES: tuple[str, ...] = ("fifo", "sjf", "ssf", "srtf", "tiresias", "backfill")


def make_policy(name: str, params: dict[str, Any] | None = None) -> Policy:
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; registered: {', '.join(sorted(POLICIES))}") from None
    try:
        return cls(cls.Params.model_validate(params or {}))
    except ValidationError as err:
        raise ValueError(f"bad parameters for policy {name!r}:\n{err}") from None
