"""Checks of values users type, at the boundary: argparse number types, one-line pydantic messages and
the strict YAML reader (the base model of what users write is :mod:`schedlab.sched.strict`).

``argparse`` prints a failed :func:`number` check as
``schedlab replay: error: argument --load: must be > 0, got '0'`` and exits 2, before any work starts.
Floats must be finite (``inf``/``nan`` are refused). Bottom layer: imports nothing of schedlab, nor
pydantic (the GPU node's image, ``profiling/gpu_run.sh``, has none).
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any, Callable

import yaml


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


def dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be an output folder (None when it can): it must be a writable folder, or not
    exist yet under a writable folder (it is created when written)."""
    if path.exists():
        if not path.is_dir():
            return "exists and is not a folder"
        return None if os.access(path, os.W_OK | os.X_OK) else "is not writable"
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if parent is None or not parent.is_dir():
        return f"cannot be created: {parent} is not a folder"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"cannot be created: {parent} is not writable"


def output_dir(text: str) -> Path:
    """An argparse ``type=``: a folder that exists or can be created (:func:`dir_problem`)."""
    path = Path(text)
    problem = dir_problem(path)
    if problem:
        raise argparse.ArgumentTypeError(f"{text}: {problem}")
    return path


#: the usual kinds
seconds = number(float, ge=0)  # a duration (0 allowed)
count = number(int, ge=1)  # a number of things (at least one)
seed = number(int, ge=0, lt=2**63)  # numpy's generators take non-negative seeds
MAX_WORKERS = 256  # Dask LocalCluster processes: more is a typo, not a machine
workers = number(int, ge=1, le=MAX_WORKERS)
fraction = number(float, gt=0, lt=1)  # strictly between 0 and 1


def did_you_mean(word: str, choices: Any) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to a mistyped ``word`` (difflib), else ""."""
    import difflib

    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def validation_message(err: Any, names: dict[str, str] | None = None) -> str:
    """A pydantic ``ValidationError`` as one line, ``field: message (got VALUE)`` per error, fields
    renamed by ``names`` (e.g. ``{"load": "--load"}``)."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in error_loc(e)) or "(top level)"
        loc = (names or {}).get(loc, loc)
        msg = e["msg"].removeprefix("Value error, ")
        got = (f" (got {plain(e['input'])!r})" if "input" in e and not isinstance(e["input"], (dict, list))
               and e["type"] != "value_error" else "")  # a validator's own message names the value
        parts.append(f"{loc}: {msg}{got}")
    return "; ".join(parts)


#: the error type of :class:`~schedlab.sched.strict.UserModel` for a key it does not know (``ctx["key"]`` names the key)
UNKNOWN_KEY = "unknown_key"


def error_loc(error: dict[str, Any]) -> tuple[Any, ...]:
    """Where a pydantic error is, an unknown key included (pydantic puts it at the model's place)."""
    return (*error["loc"], error["ctx"]["key"]) if error["type"] == UNKNOWN_KEY else tuple(error["loc"])


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


def plain(value: Any) -> Any:
    """``value`` as Python holds it: a numpy scalar becomes its int or float, so that a message says
    ``1.7``, not ``np.float64(1.7)``."""
    return value.item() if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 else value


def bool_as_number(raw: Any, validated: Any, where: str = "") -> str | None:
    """Where a boolean in ``raw`` became a number in ``validated`` (pydantic's lax mode reads ``true`` as
    1): ``""`` for ``raw`` itself, ``[1]`` or ``.key`` inside lists and mappings; None if nowhere."""
    if isinstance(raw, bool):
        return where if isinstance(validated, (int, float)) and not isinstance(validated, bool) else None
    if isinstance(raw, dict) and isinstance(validated, dict):
        pairs = [(raw[k], validated[k], f"{where}.{k}") for k in raw if k in validated]
    elif isinstance(raw, (list, tuple)) and isinstance(validated, (list, tuple)) and len(raw) == len(validated):
        pairs = [(r, v, f"{where}[{i}]") for i, (r, v) in enumerate(zip(raw, validated))]
    else:
        return None
    return next((w for r, v, inner in pairs if (w := bool_as_number(r, v, inner)) is not None), None)


def bool_message(where: str) -> str:
    """The error for a boolean given where a number is expected (``where`` from :func:`bool_as_number`)."""
    return "expected a number, got a boolean" + (f" (at {where.lstrip('.')})" if where else "")


class DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one YAML mapping (plain YAML keeps the last silently)."""


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:  # type: ignore[override]
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` then a key overrides the merged one: allowed
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                try:
                    if key in first:
                        raise DuplicateKeyError(f"line {line}: duplicate key {key!r} (first at line {first[key]})")
                    first[key] = line
                except TypeError:  # an unhashable key: the base class says so
                    break
        return super().construct_mapping(node, deep=deep)


class YAMLLimitError(yaml.YAMLError):
    """YAML that refers to itself through an alias, nests too deeply or expands (aliases followed) to too
    many values: refused before any value is built from it."""


#: the most values (scalars, lists, mappings; each alias counted as what it expands to) a YAML document
#: may hold: 600 x the largest shipped file, and an alias bomb ("billion laughs") is refused at once
MAX_YAML_NODES = 1_000_000
MAX_YAML_DEPTH = 100  # lists and mappings inside each other


def load_yaml(text: Any, *, max_nodes: int = MAX_YAML_NODES) -> Any:
    """YAML text (or a stream) as :func:`yaml.safe_load` reads it, but a key given twice in a mapping is
    an error (:class:`DuplicateKeyError`, a ``yaml.YAMLError`` naming the line) instead of the last
    one winning, and a document that refers to itself, nests deeper than :data:`MAX_YAML_DEPTH` or
    expands to more than ``max_nodes`` values is refused (:class:`YAMLLimitError`)."""
    loader = _StrictLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YAMLLimitError(f"nested more than {MAX_YAML_DEPTH} lists or mappings deep") from None
        if node is None:
            return None
        _check_expansion(node, max_nodes)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node, max_nodes: int) -> None:
    """Walk the composed document once (a node an alias shares counted where each alias uses it): raise
    :class:`YAMLLimitError` for a node inside itself, too deep a nesting or too many values."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()  # the nodes being walked: an alias to one of them is inside its own anchor
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        if done:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > max_nodes:
                raise YAMLLimitError(f"line {node.start_mark.line + 1}: expands to more than {max_nodes:,} values"
                                     " (aliases followed)")
            continue
        if key in sizes:
            continue
        if key in open_:
            raise YAMLLimitError(f"line {node.start_mark.line + 1}: a value that contains itself (an alias"
                                 " inside its own anchor)")
        if depth > MAX_YAML_DEPTH:
            raise YAMLLimitError(f"line {node.start_mark.line + 1}: nested more than {MAX_YAML_DEPTH} lists or"
                                 " mappings deep")
        open_.add(key)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children)
