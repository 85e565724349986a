"""What each model and option given to a replay applied to: a model or option that changes nothing says
so, with the count of jobs it applied to and why it applied to none.

Counted for what a replay is given beyond the defaults:

``iteration_time``  a fitted model (``--iteration-time``, ``models.iteration_time``): the jobs it gave another
                    number than the packaged catalog gives: a solo duration (a trace job given as ``model,
                    batch_size, iterations`` without a duration, of a workload it covers on the GPU type
                    used) or a speed the replay took from it (gradient accumulation, compute time: the
                    sharing model compares each with the catalog's, ``sched/models/sharing.py``);
``interference``    a ξ source other than the default ``analytic``: the jobs that shared a GPU;
``inference``       loaned inference servers: the jobs that ran on one;
``preemption_overhead``  a preemption overhead given: the jobs preempted at least once.

The counts go into the summary as ``applied`` (MLflow metrics ``applied.<name>``), and one message per
thing that applied to no job as ``unused`` (printed by ``schedlab replay`` and the experiment, the replay
run's tag ``schedlab.unused``): such a replay's results are the same as without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from schedlab.sched.models.workloads import FittedCatalog

if TYPE_CHECKING:
    from schedlab.sched.policies import Policy
    from schedlab.sched.spec import ReplaySpec


def fit_changed(before: pd.DataFrame, after: pd.DataFrame, cluster_gpu_type: str, gpus_per_server: int) -> frozenset[str]:
    """The ids of the jobs whose solo duration a fitted model set (``before``: the trace table, ``after``: its
    durations filled from the fit) to other than the packaged catalog's (a workload the catalog has no
    figures for: other)."""
    from schedlab.sched.models.annotate import catalog_gpu_type
    from schedlab.sched.models.workloads import default_catalog

    missing = (before["duration"].isna() if "duration" in before.columns
               else pd.Series(True, index=before.index)).to_numpy()
    if not missing.any():
        return frozenset()
    packaged = default_catalog()
    gpu = catalog_gpu_type(packaged, cluster_gpu_type)
    rows = after.loc[missing]
    catalog = np.full(len(rows), np.nan)
    for model in pd.unique(rows["model"]):
        try:
            packaged.params(model, gpu)
        except KeyError:
            continue  # the catalog has no figures: the fit's duration differs
        mine = (rows["model"] == model).to_numpy()
        part = rows.loc[mine]
        catalog[mine] = part["iterations"].to_numpy(dtype=float) * packaged.solo_iteration_times(
            part["model"].to_numpy(), part["batch_size"].to_numpy(), part["num_gpus"].to_numpy(), gpu,
            gpus_per_server=gpus_per_server)
    return frozenset(rows["job_id"][rows["duration"].to_numpy() != catalog])


def applied(spec: ReplaySpec, timing: Any, notes: dict[str, Any], jobs: pd.DataFrame, policy: type[Policy],
            fit_changed: set[str] | frozenset[str], weighed: int = 0) -> tuple[dict[str, int], list[str]]:
    """``(counts, messages)`` of one policy's replay: per model or option given beyond the defaults, the
    jobs it applied to, and a message for each that applied to none. ``jobs``: the replay's job table;
    ``fit_changed``: the ids of the jobs a fitted iteration-time model changed (the replay's
    ``_fit_changed``); ``weighed``: the jobs whose speeds the policy read from it, differing from the
    catalog's."""
    counts: dict[str, int] = {}
    why: dict[str, str] = {}
    total = len(jobs)
    shared = (jobs["shared_s"] > 0).to_numpy() if "shared_s" in jobs.columns else np.zeros(total, dtype=bool)
    if isinstance(timing, FittedCatalog):
        gpu_type = notes.get("iteration_time_gpu_type", "")
        covered = set(timing.covered(gpu_type))
        models = jobs["model"] if "model" in jobs.columns else pd.Series([None] * total, dtype=object)
        mine = models.isin(covered).to_numpy()
        counts["iteration_time"] = int(jobs["job_id"].isin(fit_changed).sum())
        why["iteration_time"] = _iteration_time_why(timing, gpu_type, covered, models, mine, weighed, policy.name)
    if spec.interference != "analytic":
        counts["interference"] = int(shared.sum())
        why["interference"] = ("it sets the speed of jobs sharing a GPU, and no job shared one"
                               + ("" if policy.shares_gpus else f" ({policy.name} does not share GPUs)"))
    if spec.inference is not None:
        counts["inference"] = int(jobs["ran_on_loan"].sum()) if "ran_on_loan" in jobs.columns else 0
        why["inference"] = "no job ran on a loaned inference server"
    if spec.preemption_overhead_s is not None:
        counts["preemption_overhead"] = int((jobs["preemptions"] > 0).sum())
        why["preemption_overhead"] = "no job was preempted"
    what = {"iteration_time": f"iteration-time model {spec.iteration_time}",
            "interference": f"ξ source {spec.interference}",
            "inference": f"inference loaning ({spec.inference.load})" if spec.inference is not None else "",
            "preemption_overhead": f"preemption overhead {_overhead(spec.preemption_overhead_s)}"}
    messages = [f"{what[name]} applied to 0 of {total:,} jobs and changed nothing: {why[name]}"
                for name, n in counts.items() if n == 0]
    return counts, messages


def _overhead(value: Any) -> str:
    """A preemption overhead as given: seconds, or a table's or preset's text."""
    return f"{value:g} s" if isinstance(value, (int, float)) else str(value)


def _iteration_time_why(timing: FittedCatalog, gpu_type: str, covered: set[str], models: pd.Series,
                        mine: np.ndarray, weighed: int, policy: str) -> str:
    """Why a fitted model applied to no job."""
    if weighed:
        return (f"{policy} read its speeds for {weighed:,} jobs (gradient accumulation, compute times), other than the"
                " catalog's, and chose as with the catalog's: the replay with the catalog's speeds is the same")
    if models.isna().all():
        return ("the trace gives each job's duration, no workload (annotating it, --annotate or annotate:, gives"
                " its jobs workloads)")
    if not covered:
        fits = "; ".join(f"{', '.join(w)} on {g}" for g, w in timing.coverage().items())
        return f"it covers {fits}, and this replay's jobs run on {gpu_type}"
    if not mine.any():
        seen = models.dropna().value_counts().head(5)
        return (f"it covers {', '.join(sorted(covered))} on {gpu_type}, and no job is of those workloads (the jobs':"
                f" {', '.join(f'{m} {n:,}' for m, n in seen.items())}{', …' if models.nunique() > 5 else ''})")
    return (f"its {int(mine.sum()):,} jobs of {', '.join(sorted(covered))} have their durations from the trace (a"
            " fitted model sets the duration of a job given as model, batch_size, iterations without one), and"
            " this replay read no speed of them from it")


__all__ = ["applied", "fit_changed"]
