"""What each policy needs of a replay, and what makes its own mechanism act.

A policy class declares (``sched/policies/base.py``) the capabilities it **needs** (it cannot run
without them: the replay would abort mid-way) and the alternatives it **uses** (each a set of
capabilities that together make its mechanism act; when none is met it decides exactly as the policy
it ``falls_back_to``). A sharing policy (``shares_gpus``) needs workloads. The capabilities:

- ``workloads``: every job has a model and a per-GPU batch size (an annotated or workload trace);
- ``xi``: a ξ source under which Lucid's affine pairs exist: ratios that differ between workloads, or a
  constant ``analytic:XI`` below 1/0.85 (a constant ratio gives every workload one sharing score; with
  the default 1.5 every workload scores 2 and no pair packs, Lucid's rule);
- ``inference``: an inference pool that lends servers to training (``inference:``, Lyra §3);
- ``fungible``: some job may run on loaned inference GPUs (Lyra §7.1);
- ``elastic``: some job has an elastic range ``elastic_max > elastic_min > 0`` (Lyra §5.2);
- ``goodput``: goodput jobs (a ``global_batch`` column, Pollux §3);
- ``checkpoint``: every job keeps its progress when preempted (no ``checkpoint`` column, or none False:
  Lyra's annotation makes jobs that restart from zero, its ``checkpoint`` share 0 by default). A
  round-based time-slicer (Gavel §5 checkpoints every job between rounds) preempts regardless of
  progress, so a job longer than its slices would restart forever: the replay would never end.

:func:`check` runs before any replay: on the prepared table in :func:`schedlab.sched.replay.prepare`,
and on what a configuration says of its traces at experiment validation (``sched/spec/``): a
missing need raises :class:`CapabilityError` in one line; a fallback is returned as a sentence (the
caller warns once, and the comparison's ``same_as`` cites it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from schedlab.sched.models.interference import Analytic
from schedlab.sched.policies import POLICIES, load_policy_class

ANALYTIC_XI = Analytic().xi["timeslice"]  # the analytic source's default time-slicing ratio
LUCID_SCORE_2_SPEED = POLICIES["lucid"].Params().score_speeds[0]  # Lucid's score 2 below this mean 1/ξ

CAPABILITIES: dict[str, str] = {
    "workloads": "jobs with workloads (model, batch_size: an annotated trace)",
    "xi": "a ξ source under which pairs pack (the constant `analytic` 1.5 scores every workload 2)",
    "inference": "an inference pool lending servers (`inference:`)",
    "fungible": "fungible jobs (Lyra's annotation)",
    "elastic": "elastic jobs (elastic_max > elastic_min > 0)",
    "goodput": "goodput jobs (global_batch)",
    "checkpoint": "jobs that keep their progress when preempted (Lyra's annotation: `checkpoint: 1.0`;"
                  " its default 0 makes every job restart from zero)",
}


class CapabilityError(ValueError):
    """A policy cannot run on the replay's set-up: names the policy and what it lacks."""


class CapabilityWarning(UserWarning):
    """A policy of the replay will decide exactly as another one on this set-up."""


@dataclass(frozen=True)
class Fallback:
    """``policy`` decides as ``decides_as`` on this set-up, because ``reason``."""

    policy: str
    decides_as: str
    reason: str
    uses: tuple[frozenset[str], ...] = ()

    def __str__(self) -> str:
        return f"{self.policy} decides as {self.decides_as} here: {self.reason}"

    @property
    def short(self) -> str:
        """For a table cell: ``lyra lacks inference+fungible | elastic | goodput``."""
        return f"{self.policy} lacks " + " | ".join("+".join(sorted(alt)) for alt in self.uses)


def needs(name: str, cls: type | None = None) -> frozenset[str]:
    """What policy ``name`` (class ``cls`` when known) cannot run without."""
    cls = cls or load_policy_class(name)
    return cls.needs | ({"workloads"} if cls.shares_gpus and not cls.runs_without_workloads else frozenset())


def table_capabilities(table: pd.DataFrame) -> set[str]:
    """The capabilities a prepared job table gives (the set-up's own: ``inference``, ``xi``, added by
    :func:`setup_capabilities`)."""
    present: set[str] = set()
    if "model" in table.columns and "batch_size" in table.columns and len(table):
        model, batch = table["model"], pd.to_numeric(table["batch_size"], errors="coerce")
        if bool((model.notna() & (model.astype(str).str.strip() != "") & batch.notna()).all()):
            present.add("workloads")
    if "global_batch" in table.columns:
        present.add("goodput")
    if "checkpoint" not in table.columns or not bool((table["checkpoint"] == False).any()):  # noqa: E712
        present.add("checkpoint")  # None / NaN: unknown, a preemption keeps progress (engine.preempt)
    if "fungible" in table.columns and bool(table["fungible"].fillna(False).astype(bool).any()):
        present.add("fungible")
    if {"elastic_min", "elastic_max"} <= set(table.columns):
        lo = pd.to_numeric(table["elastic_min"], errors="coerce").to_numpy(float)
        hi = pd.to_numeric(table["elastic_max"], errors="coerce").to_numpy(float)
        if bool(np.any((hi > lo) & (lo > 0))):
            present.add("elastic")
    return present


def setup_capabilities(interference: str, inference: bool) -> set[str]:
    """The capabilities of the replay's models: a varying ξ source, a lending inference pool."""
    present = {"inference"} if inference else set()
    kind, _, rest = (interference or "analytic").partition(":")
    if kind != "analytic":
        present.add("xi")
    else:
        try:
            if float(rest or ANALYTIC_XI) < 1 / LUCID_SCORE_2_SPEED:
                present.add("xi")
        except ValueError:
            pass  # a bad ratio: make_interference's error, not this one
    return present


def predict(annotate: Any, trace_format: str | None, from_file: bool) -> tuple[set[str], set[str]]:
    """Before a trace is read (experiment validation): the table capabilities its annotation gives for
    sure, and those its file may give (a canonical file may carry any column; ``pollux`` formats give
    goodput jobs with workloads, ``tiresias`` workloads; the other formats none)."""
    from schedlab.sched.models.annotate import LyraScheme, annotation_scheme, annotation_schemes

    schemes = [] if annotate is False else annotation_schemes(annotate) if isinstance(annotate, list) \
        else [annotation_scheme(annotate)]
    present: set[str] = {"checkpoint"}  # no scheme but Lyra's writes the column
    for scheme in schemes:
        present |= {"fungible", "elastic"} if isinstance(scheme, LyraScheme) else {"workloads"}
        if isinstance(scheme, LyraScheme) and scheme.checkpoint < 1.0:
            present.discard("checkpoint")
    unknown: set[str] = set()
    if from_file:
        unknown = {"workloads", "goodput"} if trace_format in ("pollux", "pollux-philly") else \
            {"workloads"} if trace_format == "tiresias" else \
            {"workloads", "goodput", "fungible", "elastic", "checkpoint"} if trace_format in (None, "canonical") \
            else set()
    return present, unknown


def check(policies: Iterable[str] | Mapping[str, type], present: set[str], unknown: Iterable[str] = (),
          where: str = "") -> list[Fallback]:
    """Raise :class:`CapabilityError` for the first policy that needs what ``present`` lacks; return
    the fallbacks (policies none of whose ``uses`` alternatives is met). Capabilities in ``unknown``
    (what a trace file holds, before it is read) count as present. ``policies``: names, or names with
    their classes (a replay's, whose file policies were loaded from the text their run carries)."""
    maybe = present | set(unknown)
    classes = dict(policies) if isinstance(policies, Mapping) else {name: None for name in policies}
    fallbacks = []
    for name, known in classes.items():
        missing = sorted(needs(name, known) - maybe)
        if missing:
            raise CapabilityError(f"{where}policy {name!r} cannot run here: it needs "
                                  + "; ".join(CAPABILITIES[m] for m in missing))
        cls = known or load_policy_class(name)
        if cls.falls_back_to and cls.uses and not any(alt <= maybe for alt in cls.uses):
            lacks = ", or ".join(" with ".join(CAPABILITIES[c] for c in sorted(alt - maybe)) for alt in cls.uses)
            fallbacks.append(Fallback(name, cls.falls_back_to, f"it lacks {lacks}", cls.uses))
    return fallbacks


__all__ = ["CAPABILITIES", "CapabilityError", "CapabilityWarning", "Fallback", "check", "needs", "predict", "setup_capabilities",
           "table_capabilities"]
