"""The checks of the options a replay and an experiment share, each written once: both schemas
(:mod:`~schedlab.sched.spec.replay`, :mod:`~schedlab.sched.spec.experiment`) validate their fields
with these, and ``schedlab replay --set`` pairs become policy parameters here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from schedlab.checks import YAMLLimitError, did_you_mean, load_yaml
from schedlab.sched.core import restore
from schedlab.sched.core.cluster import ClusterSpec, load_cluster
from schedlab.sched.core.placement import canonical_placement, check_policy
from schedlab.sched.models.fitted import is_uri
from schedlab.sched.models.interference import check_interference
from schedlab.sched.policies.base import Policy
from schedlab.sched.traces import check_format
from schedlab.sched.models.annotate import check_annotation

#: ``annotate: auto`` (a replay's): annotate (the default scheme) when a policy of the replay shares GPUs
#: and the trace gives no workloads (no ``model`` column): sharing policies need them (Castor §9.1)
AUTO = "auto"
#: ``models.*: latest`` (an experiment's): the newest registered model version, resolved when it starts
LATEST = "latest"


class SpecError(ValueError):
    """An option that cannot be taken, ``field`` its place in the spec (``policies``, ``params``,
    ``interference``, ``inference.load``, …): the command line words it with the flag's name, an
    experiment file with its key."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def placement(value: str, policies: list[tuple[str, type[Policy]]]) -> str:
    """The strategy's canonical name (an old alias resolved), checked against each (label, class) of
    ``policies``: a strategy that may refuse a job with GPUs free only with policies that then wait."""
    value = canonical_placement(value)
    for label, cls in policies:
        check_policy(value, label, cls.waits_when_refused)
    return value


def cluster(value: Any) -> Any:
    """A cluster given as a shipped name, a YAML path or ``NxG[:type]``, read (ClusterError naming the file
    or the size); a spec (or its fields) as such."""
    return load_cluster(value) if isinstance(value, (str, os.PathLike)) else value


def lends(spec: ClusterSpec) -> None:
    """A cluster that inference servers can be lent from (ClusterError naming what it lacks)."""
    spec.lending_pool()


def restore_overhead(value: Any) -> float | str | None:
    """``preemption_overhead_s``: None (the policy's), seconds >= 0, or a table by the restarting job's GPU
    count as its canonical text (``"1:7,8:30,inf:60"``, a mapping, or a preset; ``sched/core/restore.py``)."""
    return restore.canonical(value)


def allocation_stall(value: Any) -> float | str | None:
    """``allocation_stall_s``: None (the policy's), seconds >= 0, or a table by the GPU count a job
    starts or resizes to, as :func:`restore_overhead` takes it (``"1:2.2,inf:2.7"``)."""
    return restore.canonical(value, restore.STALL)


def trace_format(value: str | None) -> str | None:
    return check_format(value)


def annotation(value: Any, auto: bool = False) -> Any:
    """An ``annotate`` value: False, a scheme, a list of schemes combined, or (a replay's) ``auto``."""
    return value if auto and value == AUTO else check_annotation(value)


def interference(value: str, latest: bool = False) -> str:
    """A ξ source as :func:`~schedlab.sched.models.interference.make_interference` reads it, its kinds,
    numbers and options checked without reading a file (:mod:`schedlab.sched.parts` reads it once)."""
    return value if latest and value == LATEST else check_interference(value)


def iteration_time(value: str, latest: bool = False) -> str:
    """``catalog``, a fitted model's path or shipped name, a ``models:/`` URI or (an experiment's)
    ``latest``, which a replay cannot take: an experiment resolves it when it starts."""
    if value == LATEST and not latest:
        raise ValueError("iteration time 'latest' names the newest registered version: an experiment resolves it"
                         " through MLflow; pass a path or models:/iteration-time/N here")
    return value


def reads_files(value: str) -> bool:
    """Whether an iteration-time source names a file to read (not ``catalog``, ``latest`` or a URI)."""
    return value not in ("catalog", LATEST) and not is_uri(value)


def profile_store(path: str | Path) -> str | None:
    """Why ``path`` is not a profile store (its ``records/`` folder), None when it is."""
    return None if (Path(path) / "records").is_dir() else f"no {Path(path) / 'records'}"


#: the most values one ``--set`` VALUE may hold (aliases followed): a parameter is a number, a word or a
#: short list, never a document
MAX_SET_NODES = 10_000


def set_params(pairs: list[str], names: dict[str, str]) -> dict[str, dict[str, Any]]:
    """``POLICY.PARAM=VALUE`` pairs (``schedlab replay --set``) as parameters by policy label; ``names``
    maps each way a policy may be named in POLICY (its label, its spec as given) to its label. The
    longest name that prefixes the key wins (a file spec has dots of its own); VALUE is YAML. A
    ValueError names the pair: not POLICY.PARAM=VALUE, no such policy, a parameter set twice, bad YAML."""
    params: dict[str, dict[str, Any]] = {label: {} for label in names.values()}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        name = max((n for n in names if key.startswith(n + ".")), key=len, default=None)
        if not sep or "." not in key:
            raise ValueError(f"{pair!r}: expected POLICY.PARAM=VALUE")
        if name is None:
            given = key.partition(".")[0]
            raise ValueError(f"{pair!r}: policy {given!r} is not among the policies"
                             f" {' '.join(dict.fromkeys(names.values()))}{did_you_mean(given, names)}")
        label, param = names[name], key[len(name) + 1:]
        if param in params[label]:
            raise ValueError(f"{pair!r}: {label}.{param} is set twice")
        try:
            params[label][param] = load_yaml(value, max_nodes=MAX_SET_NODES)
        except YAMLLimitError as err:
            raise ValueError(f"{pair!r}: VALUE refused: {err}") from None
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ValueError(f"{pair!r}: VALUE is not valid YAML ({problem})") from None
    return params
