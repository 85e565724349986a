"""The policy registry: every ``Policy`` subclass with a ``name`` in a module of this package.

``POLICIES[name]`` is the class; ``make_policy`` validates parameters against its ``Params`` model.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from pydantic import ValidationError

from schedlab.checks import bool_as_number, bool_message, did_you_mean, finite_floats, validation_message
from schedlab.sched.core.placement import register_waiting_policies
from schedlab.sched.policies.base import Policy


def _discover() -> dict[str, type[Policy]]:
    found: dict[str, type[Policy]] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Policy) and "name" in vars(value):
                found[value.name] = value
    return found


POLICIES: dict[str, type[Policy]] = _discover()
BASELINES: tuple[str, ...] = ("fifo", "sjf", "ssf", "srtf", "tiresias", "backfill")
SHARING: tuple[str, ...] = tuple(name for name, cls in POLICIES.items() if cls.shares_gpus)
register_waiting_policies(lambda: sorted(name for name, cls in POLICIES.items() if cls.waits_when_refused))


def parameter_list(name: str) -> str:
    """The parameters of policy ``name`` with their defaults, for an error message."""
    defaults = POLICIES[name].Params().model_dump(mode="json")
    if not defaults:
        return f"{name} has no parameters"
    return f"parameters of {name} (default): " + ", ".join(f"{k} ({v!r})" for k, v in defaults.items())


def make_policy(name: str, params: dict[str, Any] | None = None) -> Policy:
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}{did_you_mean(name, POLICIES)}; registered:"
                         f" {', '.join(sorted(POLICIES))}") from None
    unknown = [k for k in params or {} if k not in cls.Params.model_fields]
    if unknown:
        raise ValueError(f"policy {name!r} has no parameter {unknown[0]!r}{did_you_mean(unknown[0], cls.Params.model_fields)};"
                         f" {parameter_list(name)}")
    try:
        validated = cls.Params.model_validate(params or {})
    except ValidationError as err:
        raise ValueError(f"bad parameters for policy {name!r}: {validation_message(err)}; {parameter_list(name)}") from None
    bad = finite_floats({k: getattr(validated, k) for k in params or {}})
    if bad is not None:
        raise ValueError(f"bad parameters for policy {name!r}: {bad}: must be a finite number"
                         f" (got {getattr(validated, bad)!r})")
    for key, value in (params or {}).items():  # pydantic reads `true` as 1
        where = bool_as_number(value, getattr(validated, key))
        if where is not None:
            raise ValueError(f"bad parameters for policy {name!r}: {key}: {bool_message(where)}")
    return cls(validated)
