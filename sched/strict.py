"""The base model of values users write (cluster and experiment files, loader, loaning and annotation
options): an unknown key is an error naming the known ones, and a boolean is never read as a number
(pydantic's lax mode reads ``true`` as 1)."""

from __future__ import annotations

import difflib
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from schedlab.checks import UNKNOWN_KEY, bool_as_number, bool_message

#: pydantic's errors for a number out of its bounds (a boolean read as 0 or 1 may break them)
_BOUND_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of"}


class UserModel(BaseModel):
    """A model of values users write (YAML files, ``--set``): an unknown key is refused, naming the known
    ones, and a boolean is never taken for a number."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = [str(k) for k in data if k not in cls.model_fields]
            if unknown:
                close = difflib.get_close_matches(unknown[0], cls.model_fields, n=1)
                raise PydanticCustomError(UNKNOWN_KEY, "unknown key{hint}; known: {known}", {
                    "key": unknown[0], "hint": f" (did you mean {close[0]!r}?)" if close else "",
                    "known": ", ".join(cls.model_fields)})
        return data

    @field_validator("*", mode="wrap")
    @classmethod
    def _no_bool_numbers(cls, value: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            result = handler(value)
        except ValidationError as err:  # `true` out of a number's range: say it is a boolean
            loc = next((e["loc"] for e in err.errors() if isinstance(e.get("input"), bool)
                        and e["type"] in _BOUND_ERRORS), None)
            if loc is None:
                raise
            raise ValueError(bool_message("".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc))) from None
        where = bool_as_number(value, result)
        if where is not None:
            raise ValueError(bool_message(where))
        return result
