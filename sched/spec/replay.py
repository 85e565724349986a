"""What one replay is: :class:`ReplaySpec` (a trace and how it is read, a cluster, one or more
:class:`PolicyRun`, the models and the engine's options), validated on construction."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from schedlab.checks import validation_message
from schedlab.sched.core.cluster import ClusterSpec
from schedlab.sched.core.placement import DEFAULT
from schedlab.sched.core.pools import LoanOptions
from schedlab.sched.policies import LABEL, Policy, load_policy_class, policy_label, resolve_spec, validate_params
from schedlab.sched.spec import fields
from schedlab.sched.spec.fields import SpecError
from schedlab.sched.strict import UserModel
from schedlab.sched.traces import LoadOptions, path_problem


class PolicyRun(UserModel):
    """One policy of a replay and its parameters. ``name`` is a policy spec: a registered name,
    ``path/to/file.py:Class`` or ``pkg.module:Class`` (:func:`~schedlab.sched.policies.load_policy_class`);
    ``params`` are validated against its ``Params`` (the policy itself is made for each replay, by
    :mod:`schedlab.sched.parts`); ``label`` names its results (default: the registered name, or the
    external class's ``name``); ``source``: a file policy's text, carried so that a Dask worker on
    another machine runs the same code."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str | None = None
    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    label: str | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, value: str, info: ValidationInfo) -> str:
        """The spec (a relative file path made absolute: a file policy is known by its path), its class
        loaded: an unknown policy, file, module or class is a ValueError naming it."""
        value = resolve_spec(value)
        load_policy_class(value, source=info.data.get("source"))
        return value

    @field_validator("params")
    @classmethod
    def _params(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "name" in info.data:  # else the name's own error says why
            validate_params(info.data["name"], value, source=info.data.get("source"))
        return value

    @model_validator(mode="after")
    def _label(self) -> PolicyRun:
        if self.label is None:
            object.__setattr__(self, "label", policy_label(self.name, source=self.source))
        elif not LABEL.fullmatch(self.label):
            raise ValueError(f"policy label {self.label!r} must match {LABEL.pattern} (it names result folders)")
        return self

    def policy_class(self) -> type[Policy]:
        return load_policy_class(self.name, source=self.source)

    def effective_params(self) -> dict[str, Any]:
        """Every parameter of the policy (JSON values): the given ones, validated, and the defaults of the rest."""
        return validate_params(self.name, self.params, source=self.source).model_dump(mode="json")

    @staticmethod
    def many(value: Any) -> Any:
        """A spec's ``policies`` as given: a policy named alone has no parameters."""
        if isinstance(value, (list, tuple)):
            return tuple({"name": v} if isinstance(v, str) else v for v in value)
        return value


class ReplaySpec(UserModel):
    """One replay: a trace (file or the synthetic generator) and how it is read, a cluster, one or more
    policies replayed on the same prepared table, and the models and options of the engine. Plain,
    frozen data (pickled to Dask workers, dumped to JSON); every field validated on construction, the
    cluster read into its :class:`~schedlab.sched.core.cluster.ClusterSpec` and the placement named by
    its canonical name. What needs a file read (the ξ source, an iteration-time model, the inference
    load) is checked here as far as its text goes and read by :func:`schedlab.sched.parts.build`.

    ``iteration_time`` and the ξ source ``interference`` may name MLflow URIs (``models:/…``): the parts
    then need a ``fetch`` (:func:`schedlab.tasks.model_tracking.fetcher`); sched/ itself reads files only."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    trace: str | None = None  # a trace file or folder; None: the built-in synthetic trace
    format: str | None = None  # None: detected from the file
    options: LoadOptions = Field(default_factory=LoadOptions)  # max_gpus unset: the cluster's training GPUs
    annotate: bool | str | dict[str, Any] | list[str | dict[str, Any]] = False  # a scheme (annotate.py), a
    # list of schemes combined (annotation_schemes), or ``auto`` (:data:`~schedlab.sched.spec.fields.AUTO`)
    cluster: ClusterSpec = Field(default="castor-sim", validate_default=True)  # given as a name, path or NxG
    policies: tuple[PolicyRun, ...] = Field(min_length=1)
    seed: int = Field(default=0, ge=0, lt=2**63)
    placement: str = DEFAULT
    # None: the policy's default; seconds, or a table by GPU count ("1:7,8:30,inf:60", sched/core/restore.py)
    preemption_overhead_s: float | str | None = None
    allocation_stall_s: float | str | None = None  # None: the policy's; seconds, or a table by GPU count
    stall_at_shared_pace: bool = False  # a start beside a running job stalls ξ times as long (CPU devices)
    interference: str = "analytic"  # make_interference's sources
    iteration_time: str = "catalog"  # ``catalog``, a fitted model's path or shipped name, or a URI
    goodput_root: str | None = None  # goodput models of the applications (default: the packaged ones)
    smact_profiles: str | None = None  # a profile store: the SM-activity distribution (Castor Fig. 12c/d)
    inference: LoanOptions | None = None  # inference servers lent to training (Lyra; sched/core/pools.py)

    @field_validator("trace", "iteration_time", "goodput_root", "smact_profiles", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> Any:
        """A path given as a :class:`~pathlib.Path`: kept as its text (the spec is plain data)."""
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("trace")
    @classmethod
    def _trace(cls, value: str | None) -> str | None:
        problem = path_problem(Path(value), folder=True) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    _format = field_validator("format")(lambda cls, value: fields.trace_format(value))
    _restore = field_validator("preemption_overhead_s", mode="before")(
        lambda cls, value: fields.restore_overhead(value))
    _stall = field_validator("allocation_stall_s", mode="before")(lambda cls, value: fields.allocation_stall(value))
    _annotate = field_validator("annotate")(lambda cls, value: fields.annotation(value, auto=True))
    _cluster = field_validator("cluster", mode="before")(lambda cls, value: fields.cluster(value))
    _interference = field_validator("interference")(lambda cls, value: fields.interference(value))
    _iteration_time = field_validator("iteration_time")(lambda cls, value: fields.iteration_time(value))

    _policy_names = field_validator("policies", mode="before")(lambda cls, value: PolicyRun.many(value))

    @field_validator("placement")
    @classmethod
    def _placement(cls, value: str, info: ValidationInfo) -> str:
        """The strategy's canonical name (what the summary records), checked against each policy."""
        runs = info.data.get("policies") or ()  # absent when the policies were invalid (reported there)
        return fields.placement(value, [(p.label, p.policy_class()) for p in runs])

    @field_validator("smact_profiles")
    @classmethod
    def _profile_store(cls, value: str | None) -> str | None:
        problem = fields.profile_store(value) if value is not None else None
        if problem is not None:
            raise ValueError(f"{value}: not a profile store ({problem})")
        return value

    @field_validator("inference")
    @classmethod
    def _lends(cls, value: LoanOptions | None, info: ValidationInfo) -> LoanOptions | None:
        if value is not None and "cluster" in info.data:
            fields.lends(info.data["cluster"])  # ClusterError: no inference pool to lend from
        return value

    @model_validator(mode="after")
    def _labels(self) -> ReplaySpec:
        """Each policy's results are named by its label: no two alike."""
        labels = [p.label for p in self.policies]
        twice = sorted({x for x in labels if labels.count(x) > 1})
        if twice:
            raise ValueError(f"policies: label(s) {twice} more than once; give each its own label")
        return self

    def cluster_spec(self) -> ClusterSpec:
        return self.cluster


def policy_runs(given: Sequence[str], pairs: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Policies named by their specs (``schedlab replay --policy``) and ``POLICY.PARAM=VALUE`` pairs
    (``--set``; POLICY a policy's label or its spec as given) as :class:`ReplaySpec`'s ``policies``. A
    :class:`~schedlab.sched.spec.fields.SpecError` names the field: ``policies`` (an unknown policy, or
    one given twice) or ``params`` (a pair)."""
    runs: dict[str, tuple[str, PolicyRun]] = {}
    for spec in given:
        try:
            run = PolicyRun(name=spec)
        except ValidationError as err:
            raise SpecError("policies", validation_message(err).removeprefix("name: ")) from None
        if run.label in runs:
            first = runs[run.label][1].name
            raise SpecError("policies", f"{run.label!r} given twice" + (f" ({first} and {run.name})"
                                                                        if first != run.name else ""))
        runs[run.label] = (spec, run)
    names = {**{spec: label for label, (spec, _) in runs.items()}, **{label: label for label in runs}}
    try:
        params = fields.set_params(list(pairs), names)
    except ValueError as err:
        raise SpecError("params", str(err)) from None
    return [{"name": run.name, "params": params[label], "label": label} for label, (_, run) in runs.items()]
