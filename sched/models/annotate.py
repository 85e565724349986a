"""Annotate a canonical job table with workloads (model, per-GPU batch size, iterations) and deadlines.

Traces carry durations and GPU counts but no model names or iteration counts. Following the papers
(Castor §9.1 and SJF-BSBF §VI-A, which take Pollux's settings; Gimbal §7.1), each job is given a workload
from the catalog by **size class**: its GPU time ``num_gpus x duration`` in GPU-hours selects a class from
the catalog's ``size_classes`` (Pollux's buckets: < 1 GPU-h cifar10/ncf, < 10 deepspeech2/bert,
< 100 yolov3, otherwise imagenet); within the class the model is drawn uniformly, then a per-GPU batch
size uniformly from that model's ``batch_sizes``. ``iterations = duration / t_iter``, with ``t_iter`` the
solo iteration time (Castor eq. 1-3) of that workload on ``num_gpus`` GPUs of ``gpu_type`` packed on the
fewest servers, so that ``iterations x t_iter`` reproduces ``duration`` (``iterations`` is a float and is
floored at 1 for jobs shorter than one iteration). Deadlines (Gimbal §7.1):
``deadline = submit_time + lambda x duration``, ``lambda ~ U[1.5, 2.5]``.

``scheme="gimbal"`` (or a dict ``{scheme: gimbal, ...}`` of :class:`GimbalScheme` fields) is Gimbal's
set-up instead (§7.1, Table 2; spec ``gimbal.md`` A15-A16): see :func:`annotate_gimbal`.
``{scheme: lyra, scenario: basic, ...}`` (:class:`LyraScheme`) gives Lyra's job attributes (fungible,
elastic range, heterogeneous, checkpoint; Lyra §7.1) and keeps the trace's durations: see
:func:`lyra_scenario`.

All random draws come from ``numpy.random.default_rng(seed)``, one draw per row and purpose, in row
order, so the result depends only on the table and the seed. Rows that already have a ``model`` are left
as they are (their model must be in the catalog); a table in which every row has one is returned as is
(the same object). ``duration`` is kept; an existing non-null ``deadline`` is never overwritten.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import ConfigDict, Field, ValidationError, model_validator

from schedlab.checks import validation_message
from schedlab.sched.strict import UserModel

from schedlab.sched.traces.common import JobError
from schedlab.sched.models.workloads import DEFAULT_GPUS_PER_SERVER, WorkloadCatalog, default_catalog

LAMBDA_RANGE = (1.5, 2.5)  # Gimbal §7.1


class AnnotationError(ValueError):
    """The job table cannot be annotated (or its durations filled) as asked."""


class JobAnnotationError(JobError, AnnotationError):
    """An AnnotationError about the table's jobs or columns: names the first bad job's row (the N-th
    row of the table, 1-based; the trace file's data row once ``sched.replay.prepare`` is given the load
    report), its job id and the column, and counts the other bad jobs."""


def _unknown_model(jobs: pd.DataFrame, mask: np.ndarray, catalog: WorkloadCatalog) -> JobAnnotationError:
    return JobAnnotationError(f"unknown model; the catalog's models: {', '.join(sorted(catalog.models))}",
                              jobs, mask, "model")


def _has_model(jobs: pd.DataFrame) -> np.ndarray:
    if "model" not in jobs.columns:
        return np.zeros(len(jobs), dtype=bool)
    col = jobs["model"]
    has = col.notna().to_numpy()
    if col.dtype == object or pd.api.types.is_string_dtype(col):
        has = has & (col.astype(str).str.strip() != "").to_numpy()
    return has


def annotate(
    jobs: pd.DataFrame,
    catalog: WorkloadCatalog | None = None,
    seed: int = 0,
    gpu_type: str | None = None,
    gpus_per_server: int = DEFAULT_GPUS_PER_SERVER,
    deadlines: bool = True,
    scheme: str | dict[str, Any] | list[str | dict[str, Any]] = "pollux",
) -> pd.DataFrame:
    """Return ``jobs`` with ``model, batch_size`` (per GPU), ``iterations`` and (if ``deadlines``)
    ``deadline`` filled in for the rows that have no model. ``gpu_type`` defaults to the catalog's
    reference GPU type. See the module docstring for the method; ``scheme`` as :func:`annotation_scheme`,
    or a list of schemes combined as :func:`annotation_schemes` says."""
    if catalog is None:
        catalog = default_catalog()
    if isinstance(scheme, (list, tuple)):
        for i, part in enumerate(annotation_schemes(scheme)):
            jobs = annotate(jobs, catalog, scheme_seed(seed, i), gpu_type, gpus_per_server, deadlines,
                            "pollux" if part is None else part.model_dump())
        return jobs
    if isinstance(chosen := annotation_scheme(scheme), LyraScheme):
        return lyra_scenario(jobs, chosen.scenario, seed, elastic_range=chosen.elastic_range,
                             checkpoint=chosen.checkpoint, scaling_loss=chosen.scaling_loss)
    if chosen is not None:
        return annotate_gimbal(jobs, chosen, catalog, seed, gpu_type, gpus_per_server, deadlines)
    if gpus_per_server < 1:
        raise ValueError(f"gpus_per_server must be >= 1, got {gpus_per_server}")
    n_rows = len(jobs)
    has = _has_model(jobs)

    unknown = has & ~jobs["model"].isin(catalog.models).to_numpy() if has.any() else has
    if unknown.any():
        raise _unknown_model(jobs, unknown, catalog)
    todo = ~has
    if not todo.any():
        return jobs

    for col in ("num_gpus", "duration"):
        if col not in jobs.columns:
            raise JobAnnotationError(f"rows without a model need column {col!r} (missing from the job table)")
    n_gpus = pd.to_numeric(jobs["num_gpus"], errors="coerce").to_numpy(float)
    duration = pd.to_numeric(jobs["duration"], errors="coerce").to_numpy(float)
    bad = todo & ~(np.isfinite(duration) & (duration > 0))
    if bad.any():
        raise JobAnnotationError("must be a positive number for rows to annotate", jobs, bad, "duration")
    bad = todo & ~(np.isfinite(n_gpus) & (n_gpus >= 1) & (n_gpus == np.round(n_gpus)))
    if bad.any():
        raise JobAnnotationError("must be an integer >= 1 for rows to annotate", jobs, bad, "num_gpus")
    if deadlines and "submit_time" not in jobs.columns:
        raise JobAnnotationError("deadlines need column 'submit_time' (missing from the job table)")

    rng = np.random.default_rng(seed)
    u_model = rng.random(n_rows)
    u_batch = rng.random(n_rows)
    u_lambda = rng.random(n_rows)

    # model: uniform within the GPU-hour size class
    model_names = catalog.models
    model_code = {m: i for i, m in enumerate(model_names)}
    classes = catalog.size_classes
    k = np.array([len(sc.models) for sc in classes])
    offsets = np.concatenate([[0], np.cumsum(k)[:-1]])
    flat_models = np.array([model_code[m] for sc in classes for m in sc.models])
    gpu_hours = np.where(todo, n_gpus * duration / 3600.0, 0.0)
    cls = catalog.size_class_index(gpu_hours)
    pick = np.minimum((u_model * k[cls]).astype(np.int64), k[cls] - 1)
    codes = flat_models[offsets[cls] + pick]

    # per-GPU batch size: uniform among the model's batch sizes
    bk = np.array([len(catalog.workloads[m].batch_sizes) for m in model_names])
    boff = np.concatenate([[0], np.cumsum(bk)[:-1]])
    flat_b = np.array([b for m in model_names for b in catalog.workloads[m].batch_sizes])
    bpick = np.minimum((u_batch * bk[codes]).astype(np.int64), bk[codes] - 1)
    batch = flat_b[boff[codes] + bpick]

    names = np.array(model_names, dtype=object)[codes]
    idx = np.flatnonzero(todo)
    t_iter = catalog.solo_iteration_times(
        names[idx], batch[idx], n_gpus[idx], gpu_type=gpu_type, gpus_per_server=gpus_per_server
    )
    iters = np.maximum(duration[idx] / t_iter, 1.0)

    out = jobs.copy()
    if "model" in out.columns:
        model_col = out["model"].astype(object).to_numpy(copy=True)
    else:
        model_col = np.full(n_rows, None, dtype=object)
    model_col[idx] = names[idx]
    out["model"] = model_col
    out["batch_size"] = _fill(out, "batch_size", idx, batch[idx])
    out["iterations"] = _fill(out, "iterations", idx, iters)
    if deadlines:
        lam = LAMBDA_RANGE[0] + (LAMBDA_RANGE[1] - LAMBDA_RANGE[0]) * u_lambda[idx]
        submit = pd.to_numeric(out["submit_time"], errors="coerce").to_numpy(float)[idx]
        new = submit + lam * duration[idx]
        if "deadline" in out.columns:
            old = pd.to_numeric(out["deadline"], errors="coerce").to_numpy(float)[idx]
            new = np.where(np.isnan(old), new, old)
        out["deadline"] = _fill(out, "deadline", idx, new)
    return out


def _fill(df: pd.DataFrame, col: str, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Column ``col`` with ``values`` at positions ``idx``; integer dtype kept when nothing is missing."""
    if col in df.columns:
        base = pd.to_numeric(df[col], errors="coerce").to_numpy(float, copy=True)
    else:
        base = np.full(len(df), np.nan)
    base[idx] = values
    if np.issubdtype(np.asarray(values).dtype, np.integer) and not np.isnan(base).any():
        return base.astype(np.int64)
    return base


__all__ = ["LAMBDA_RANGE", "AnnotationError", "GimbalScheme", "JobAnnotationError", "LyraScheme", "annotate",
           "annotate_gimbal", "annotation_scheme", "annotation_schemes", "check_annotation", "lyra_scenario", "scheme_seed"]


def catalog_gpu_type(catalog: WorkloadCatalog, gpu_type: str) -> str:
    """``gpu_type`` if the catalog knows it, else the catalog's reference type (the caller reports it)."""
    return gpu_type if catalog.knows_gpu_type(gpu_type) else catalog.reference_gpu_type


def fill_durations(
    jobs: pd.DataFrame,
    catalog: WorkloadCatalog | None = None,
    gpu_type: str | None = None,
    gpus_per_server: int = DEFAULT_GPUS_PER_SERVER,
) -> pd.DataFrame:
    """Solo ``duration = iterations x t_iter`` (eq. 1-3) for rows that give ``model, batch_size,
    iterations`` but no duration; rows with a duration are left unchanged. A row without a duration
    whose workload is incomplete, or whose model the catalog has no iteration time for, is an error."""
    catalog = catalog or default_catalog()
    duration = jobs["duration"] if "duration" in jobs.columns else pd.Series(np.nan, index=jobs.index)
    missing = duration.isna().to_numpy()
    if not missing.any():
        return jobs
    workload = ["model", "batch_size", "iterations"]
    absent = [c for c in workload if c not in jobs.columns]
    incomplete = missing if absent else missing & jobs[workload].isna().any(axis=1).to_numpy()
    if incomplete.any():
        raise JobAnnotationError("no duration and no complete model, batch_size, iterations"
                                 f"{f' (missing columns {absent})' if absent else ''}", jobs, incomplete)
    unknown = missing & ~jobs["model"].isin(catalog.models).to_numpy()
    if unknown.any():
        raise _unknown_model(jobs, unknown, catalog)
    for model in pd.unique(jobs.loc[missing, "model"]):
        try:
            catalog.params(model, gpu_type)
        except KeyError as err:  # a profiled-only workload: no published parameters
            rows = missing & (jobs["model"] == model).to_numpy()
            raise JobAnnotationError(err.args[0], jobs, rows, "model") from None
    rows = jobs.loc[missing]
    per_iteration = catalog.solo_iteration_times(
        rows["model"].to_numpy(), rows["batch_size"].to_numpy(), rows["num_gpus"].to_numpy(),
        gpu_type, gpus_per_server=gpus_per_server,
    )
    out = jobs.copy()
    out["duration"] = duration.astype(float)
    out.loc[missing, "duration"] = rows["iterations"].to_numpy(dtype=float) * per_iteration
    return out


# ---- Gimbal's set-up (§7.1, Table 1-2; docs/explanation/gimbal.md) ------------------------------------
#: Table 1's models per class, on the catalog entries that exist and can be annotated (A16):
#: small RN18 -> cifar10 (MNV2 = mobilenetv2 is profiled-only; EFN absent); middle DeepSpeech2 ->
#: deepspeech2, RN50 -> imagenet (VGG-16 = vgg16 profiled-only; MNV3, VGG-11, PLNAS, OFA absent);
#: large BERT -> bert (LLaMA -> gpt profiled-only). Add the others once profiled (``schedlab fit``).
GIMBAL_MODELS = (("cifar10",), ("deepspeech2", "imagenet"), ("bert",))


class GimbalScheme(UserModel):
    """Gimbal's annotation: each row gets a size class by duration rank (longest = large) in Table 2's
    proportions, a GPU count redrawn from its class's distribution, a model of its class (Table 1,
    mapped by :data:`GIMBAL_MODELS`) and a batch size; then, as in the default scheme, iterations and
    deadlines. Durations are ``min(max(duration, min_duration_s) x duration_scale, max_duration_s)``:
    the paper replays its jobs in about 4.5 h on 32 GPUs (Gavel, Fig. 8), so the trace's heavy tail is
    cut and scaled [OURS: the paper does not say how]. Defaults: Table 2's Philly row (43 / 86 / 21
    jobs of 150; 2.39 / 2.41 / 4.85 GPUs on average; our draws give 2.4 / 2.4 / 4.85)."""

    model_config = ConfigDict(allow_inf_nan=False)

    scheme: Literal["gimbal"] = "gimbal"
    class_shares: tuple[float, float, float] = (43 / 150, 86 / 150, 21 / 150)
    small_medium_gpus: dict[int, float] = Field(default_factory=lambda: {1: 0.2, 2: 0.5, 4: 0.3})
    large_gpus: dict[int, float] = Field(default_factory=lambda: {4: 0.7875, 8: 0.2125})
    models: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] = GIMBAL_MODELS
    duration_scale: float = Field(default=1.0, gt=0)
    min_duration_s: float = Field(default=0.0, ge=0)
    max_duration_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> GimbalScheme:
        if any(x < 0 for x in self.class_shares) or not np.isclose(sum(self.class_shares), 1.0):
            raise ValueError(f"class_shares must be >= 0 and sum to 1, got {self.class_shares}")
        for name in ("small_medium_gpus", "large_gpus"):
            dist = getattr(self, name)
            if not dist or any(g < 1 for g in dist) or any(p < 0 for p in dist.values()) or not np.isclose(
                    sum(dist.values()), 1.0):
                raise ValueError(f"{name}: GPU counts >= 1 with probabilities >= 0 summing to 1, got {dist}")
        if any(not group for group in self.models):
            raise ValueError(f"models: every class needs at least one model, got {self.models}")
        return self

    def class_counts(self, n: int) -> list[int]:
        """Jobs per class (small, medium, large) for ``n`` rows, by largest remainder."""
        raw = np.asarray(self.class_shares) * n
        counts = np.floor(raw).astype(int)
        for i in np.argsort(-(raw - counts), kind="stable")[: n - counts.sum()]:
            counts[i] += 1
        return counts.tolist()


def annotation_scheme(scheme: str | dict[str, Any] | bool) -> GimbalScheme | LyraScheme | None:
    """None for the default (Pollux-bucket) scheme (``"pollux"``, its other name ``"catalog"``, or
    ``True``), else the validated :class:`GimbalScheme` or :class:`LyraScheme`; raises ValueError naming
    the bad field."""
    if scheme is True or scheme in ("pollux", "catalog"):
        return None
    name = scheme.get("scheme") if isinstance(scheme, dict) else scheme
    try:
        if name == "gimbal":
            return GimbalScheme.model_validate(scheme if isinstance(scheme, dict) else {})
        if name == "lyra":
            return LyraScheme.model_validate(scheme if isinstance(scheme, dict) else {})
    except ValidationError as err:
        raise ValueError(f"annotation scheme {name}: {validation_message(err)}") from None
    raise ValueError(f"unknown annotation scheme {scheme!r}; choose pollux (or catalog), gimbal, {{scheme: gimbal,"
                     " ...}, {scheme: lyra, scenario: basic|advanced|heterogeneous|ideal, ...}, or a list of them")


def annotation_schemes(schemes: list[str | dict[str, Any]] | tuple) -> list[GimbalScheme | LyraScheme | None]:
    """A combination of schemes (``annotate: [pollux, lyra]``), validated: at most one workload scheme
    (pollux / catalog or gimbal: each writes ``model, batch_size, iterations, deadline``), then at most
    one Lyra scheme (it writes the disjoint ``fungible, elastic_*, heterogeneous, checkpoint,
    scaling_loss`` from ``num_gpus`` and ``duration``, which gimbal rewrites: so it comes last). The
    i-th scheme draws with :func:`scheme_seed` (the first with the replay's seed, as alone)."""
    if not schemes:
        raise ValueError("annotate: an empty list of schemes")
    chosen = []
    for i, scheme in enumerate(schemes):
        if isinstance(scheme, (bool, list, tuple)):
            raise ValueError(f"annotate[{i}]: a scheme name or {{scheme: ...}}, got {scheme!r}")
        try:
            chosen.append(annotation_scheme(scheme))
        except ValueError as err:
            raise ValueError(f"annotate[{i}]: {err}") from None
    kinds = ["lyra" if isinstance(c, LyraScheme) else "workloads" for c in chosen]
    for kind in ("workloads", "lyra"):
        if kinds.count(kind) > 1:
            second = [i for i, k in enumerate(kinds) if k == kind][1]
            what = ("two workload schemes (pollux / gimbal) would write the same model, batch_size, iterations"
                    if kind == "workloads" else "two Lyra schemes would write the same job attributes")
            raise ValueError(f"annotate[{second}]: {what}; give at most one of each kind")
    if kinds == ["lyra", "workloads"]:
        raise ValueError("annotate: give the workload scheme before the Lyra one (Lyra's attributes are drawn"
                         " from the GPU counts and durations the workload scheme may rewrite)")
    return chosen


def check_annotation(value: Any) -> Any:
    """An ``annotate`` value as a replay or an experiment takes it: ``False``, one scheme
    (:func:`annotation_scheme`) or a list combined (:func:`annotation_schemes`); raises ValueError
    naming the bad scheme, field or list item."""
    if isinstance(value, list):
        annotation_schemes(value)
    elif value is not False:
        annotation_scheme(value)
    return value


def scheme_seed(seed: int, position: int) -> int:
    """The seed of the ``position``-th scheme of a combination: the replay's own for the first, else one
    derived from both (so the schemes' uniform draws are not the same numbers)."""
    if position == 0:
        return seed
    return int(np.random.SeedSequence([seed, position]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def annotate_gimbal(
    jobs: pd.DataFrame,
    scheme: GimbalScheme | None = None,
    catalog: WorkloadCatalog | None = None,
    seed: int = 0,
    gpu_type: str | None = None,
    gpus_per_server: int = DEFAULT_GPUS_PER_SERVER,
    deadlines: bool = True,
) -> pd.DataFrame:
    """Gimbal's set-up (see :class:`GimbalScheme`) for every row: the table must carry no models.
    Adds ``size_class`` (0 small, 1 medium, 2 large); ``num_gpus`` and ``duration`` are replaced."""
    scheme = scheme or GimbalScheme()
    catalog = catalog or default_catalog()
    for i, group in enumerate(scheme.models):
        for model in group:
            if model not in catalog.annotated_models:
                raise AnnotationError(f"gimbal scheme models[{i}]: {model!r} cannot be annotated; "
                                      f"annotatable catalog models: {catalog.annotated_models}")
    if _has_model(jobs).any():
        raise JobAnnotationError("already has a model, but the gimbal scheme assigns every row's", jobs,
                                 _has_model(jobs), "model")
    for col in ("duration", "submit_time"):
        if col not in jobs.columns:
            raise JobAnnotationError(f"the gimbal scheme needs column {col!r} (missing from the job table)")
    duration = pd.to_numeric(jobs["duration"], errors="coerce").to_numpy(float)
    bad = ~(np.isfinite(duration) & (duration > 0))
    if bad.any():
        raise JobAnnotationError("must be a positive number for rows to annotate", jobs, bad, "duration")
    n = len(jobs)
    rng = np.random.default_rng(seed)
    u_gpus, u_model, u_batch, u_lambda = rng.random(n), rng.random(n), rng.random(n), rng.random(n)

    cls = np.empty(n, dtype=np.int64)  # by duration rank, shortest first; ties by row order
    order = np.argsort(duration, kind="stable")
    bounds = np.cumsum([0, *scheme.class_counts(n)])
    for c in range(3):
        cls[order[bounds[c]:bounds[c + 1]]] = c

    gpus = np.empty(n, dtype=np.int64)
    for c, dist in ((0, scheme.small_medium_gpus), (1, scheme.small_medium_gpus), (2, scheme.large_gpus)):
        values = np.array(sorted(dist))
        cdf = np.cumsum([dist[g] for g in values])
        rows = cls == c
        gpus[rows] = values[np.minimum(np.searchsorted(cdf, u_gpus[rows], side="right"), len(values) - 1)]

    names = np.empty(n, dtype=object)
    batch = np.empty(n, dtype=np.int64)
    for i in range(n):
        group = scheme.models[cls[i]]
        model = group[min(int(u_model[i] * len(group)), len(group) - 1)]
        sizes = catalog.workload(model).batch_sizes
        names[i], batch[i] = model, sizes[min(int(u_batch[i] * len(sizes)), len(sizes) - 1)]

    scaled = np.maximum(duration, scheme.min_duration_s) * scheme.duration_scale
    if scheme.max_duration_s is not None:
        scaled = np.minimum(scaled, scheme.max_duration_s)
    t_iter = catalog.solo_iteration_times(names, batch, gpus.astype(float), gpu_type=gpu_type,
                                          gpus_per_server=gpus_per_server)
    out = jobs.copy()
    out["num_gpus"] = gpus
    out["duration"] = scaled
    out["model"] = names
    out["batch_size"] = batch
    out["iterations"] = np.maximum(scaled / t_iter, 1.0)
    out["size_class"] = cls
    if deadlines:
        lam = LAMBDA_RANGE[0] + (LAMBDA_RANGE[1] - LAMBDA_RANGE[0]) * u_lambda
        submit = pd.to_numeric(out["submit_time"], errors="coerce").to_numpy(float)
        new = submit + lam * scaled
        if "deadline" in out.columns:
            old = pd.to_numeric(out["deadline"], errors="coerce").to_numpy(float)
            new = np.where(np.isnan(old), new, old)
        out["deadline"] = new
    return out


# ---- Lyra's scenarios (Lyra EuroSys'23 §7.1; docs/explanation/lyra.md) ------------------------
#: scenario -> (fungible job share, elastic GPU-time share, heterogeneous job share); ``None`` = all
LYRA_SCENARIOS: dict[str, tuple[float, float | None, float]] = {
    "basic": (0.21, 0.36, 0.0),
    "advanced": (0.21, 0.36, 0.10),
    "heterogeneous": (0.0, 0.36, 0.10),
    "ideal": (1.0, None, 1.0),
}


class LyraScheme(UserModel):
    """Lyra's scenario annotation in an experiment (``annotate: {scheme: lyra, scenario: basic}``):
    the fields of :func:`lyra_scenario`; the draws are seeded with the replay's seed."""

    model_config = ConfigDict(allow_inf_nan=False)

    scheme: Literal["lyra"] = "lyra"
    scenario: Literal["basic", "advanced", "heterogeneous", "ideal"] = "basic"
    elastic_range: float = Field(default=2.0, ge=1.0, le=64.0)
    checkpoint: float = Field(default=0.0, ge=0.0, le=1.0)
    scaling_loss: float = Field(default=0.0, ge=0.0, le=0.999)


LYRA_ELASTIC_MIN_GPUS = 2  # elastic candidates: >= 2 GPUs and >= 1 h (docs/explanation/lyra.md)
LYRA_ELASTIC_MIN_S = 3600.0


def lyra_scenario(
    jobs: pd.DataFrame, scenario: str = "basic", seed: int = 0, *, elastic_range: float = 2.0,
    checkpoint: float = 0.0, scaling_loss: float = 0.0,
) -> pd.DataFrame:
    """``jobs`` with Lyra's job attributes for ``scenario`` (basic / advanced / heterogeneous / ideal):
    ``fungible`` (may run on loaned inference GPUs: 21 % of jobs, uniform), ``elastic_min,
    elastic_max`` (GPUs; 0 = inelastic): jobs with >= 2 GPUs and >= 1 h drawn at random until they
    hold 36 % of the GPU-time (all jobs in ``ideal``), range ``[d, elastic_range x d]`` (Ideal's rule)
    and fungible; ``heterogeneous`` (10 % of jobs; all in ``ideal``); ``checkpoint`` (that share of
    jobs keeps its progress when preempted; the paper's default 0); ``scaling_loss`` (0.2 = Lyra's
    imperfect scaling, §7.2) on elastic jobs. Seeded: one draw per row and purpose, in row order."""
    if scenario not in LYRA_SCENARIOS:
        raise AnnotationError(f"unknown Lyra scenario {scenario!r}; choose one of {sorted(LYRA_SCENARIOS)}")
    for name, value, lo, hi in (("elastic_range", elastic_range, 1.0, 64.0), ("checkpoint", checkpoint, 0.0, 1.0),
                                ("scaling_loss", scaling_loss, 0.0, 0.999)):
        if not lo <= value <= hi:
            raise AnnotationError(f"Lyra scenario option {name} must be in [{lo}, {hi}], got {value!r}")
    for col in ("num_gpus", "duration"):
        if col not in jobs.columns:
            raise JobAnnotationError(f"Lyra scenarios need column {col!r} (missing from the job table)")
    fungible_share, elastic_share, hetero_share = LYRA_SCENARIOS[scenario]
    n = len(jobs)
    gpus = pd.to_numeric(jobs["num_gpus"], errors="coerce").to_numpy(float)
    duration = pd.to_numeric(jobs["duration"], errors="coerce").to_numpy(float)
    bad = ~(np.isfinite(gpus) & (gpus >= 1) & np.isfinite(duration) & (duration > 0))
    if bad.any():
        raise JobAnnotationError("num_gpus >= 1 and duration > 0 needed for Lyra scenarios", jobs, bad)
    rng = np.random.default_rng(seed)
    u_fungible, u_hetero, u_checkpoint, order = rng.random(n), rng.random(n), rng.random(n), rng.permutation(n)
    if elastic_share is None:
        elastic = np.ones(n, dtype=bool)
    else:
        work = gpus * duration
        candidate = (gpus >= LYRA_ELASTIC_MIN_GPUS) & (duration >= LYRA_ELASTIC_MIN_S)
        picked = order[candidate[order]]
        cumulative = np.cumsum(work[picked])
        take = int(np.searchsorted(cumulative, elastic_share * work.sum(), side="left"))
        elastic = np.zeros(n, dtype=bool)
        elastic[picked[: take + 1] if take < len(picked) else picked] = True
    out = jobs.copy()
    out["fungible"] = (u_fungible < fungible_share) | elastic
    out["elastic_min"] = np.where(elastic, gpus, 0).astype(np.int64)
    out["elastic_max"] = np.where(elastic, np.floor(gpus * elastic_range), 0).astype(np.int64)
    out["heterogeneous"] = u_hetero < hetero_share
    out["checkpoint"] = u_checkpoint < checkpoint
    if scaling_loss:
        out["scaling_loss"] = np.where(elastic, scaling_loss, 0.0)
    return out
