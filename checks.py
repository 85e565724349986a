"""Checks of values users type, at the boundary: argparse number types and one-line pydantic messages.

``argparse`` prints a failed :func:`number` check as
``schedlab replay: error: argument --load: must be > 0, got '0'`` and exits 2, before any work starts.
Floats must be finite (``inf``/``nan`` are refused). Bottom layer: imports nothing of schedlab.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable


def number(kind: type = float, *, ge: float | None = None, gt: float | None = None,
           le: float | None = None, lt: float | None = None) -> Callable[[str], float | int]:
    """An argparse ``type=``: ``kind`` (``int`` or ``float``), finite, within the given bounds."""
    bounds = [(ge, ">=", lambda v, b: v >= b), (gt, ">", lambda v, b: v > b),
              (le, "<=", lambda v, b: v <= b), (lt, "<", lambda v, b: v < b)]

    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        for bound, sign, ok in bounds:
            if bound is not None and not ok(value, bound):
                raise argparse.ArgumentTypeError(f"must be {sign} {bound:g}, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


#: the usual kinds
seconds = number(float, ge=0)  # a duration (0 allowed)
count = number(int, ge=1)  # a number of things (at least one)
seed = number(int, ge=0, lt=2**63)  # numpy's generators take non-negative seeds
fraction = number(float, gt=0, lt=1)  # strictly between 0 and 1


def validation_message(err: Any, names: dict[str, str] | None = None) -> str:
    """A pydantic ``ValidationError`` as one line, ``field: message (got VALUE)`` per error, fields
    renamed by ``names`` (e.g. ``{"load": "--load"}``)."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        loc = (names or {}).get(loc, loc)
        msg = e["msg"].removeprefix("Value error, ")
        got = (f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], (dict, list))
               and e["type"] != "value_error" else "")  # a validator's own message names the value
        parts.append(f"{loc}: {msg}{got}")
    return "; ".join(parts)


def finite_floats(values: dict[str, Any]) -> str | None:
    """The first key whose value (or a number inside it) is an infinite or NaN float, else None."""
    def bad(v: Any) -> bool:
        if isinstance(v, float):
            return not math.isfinite(v)
        if isinstance(v, dict):
            return any(bad(x) for x in v.values())
        if isinstance(v, (list, tuple)):
            return any(bad(x) for x in v)
        return False
    return next((k for k, v in values.items() if bad(v)), None)
