"""Iteration-time model fitting (Castor §3.1, eq. 1-3) by bounded nonlinear least squares.

One fit per workload and GPU type: ``alpha_comp, beta_comp`` (eq. 1, compute vs per-GPU batch),
``alpha_comm_{intra,inter}, beta_comm_{intra,inter}`` (eq. 2 with the ring all-reduce cost, by GPUs
and servers spanned) and the overlap ``delta`` (eq. 3); the model itself is
:func:`schedlab.sched.models.workloads.iteration_time`. :func:`fit_eq3` is the one fitting routine: the
Pollux catalog script (``schedlab.tools.fit_catalog_from_pollux``) and ``schedlab fit iteration-time``
(profile store rows) both call it. Parameters a data set cannot identify (no multi-GPU rows: all
communication terms and delta; no multi-server rows: the ``inter`` terms) are held at 0 (delta at 1)
and listed in the fit's ``fixed``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.sched.models.workloads import _eq3

PARAM_NAMES = (
    "alpha_comp",
    "beta_comp",
    "alpha_comm_intra",
    "beta_comm_intra",
    "alpha_comm_inter",
    "beta_comm_inter",
    "delta",
)
GROUPS = ("single", "intra", "inter")


@dataclass
class Eq3Fit:
    """Fitted eq. 1-3 parameters of one workload on one GPU type, with their errors."""

    params: dict[str, float]
    mape: dict[str, float | int]  # in-sample, per row group + "all" + "rows"
    fixed: list[str] = field(default_factory=list)


def predict(p, bsz, num_gpus, servers, model_mb: float, accumulation_steps=1) -> np.ndarray:
    """Eq. 1-3 (vectorised; ``bsz`` is the per-GPU batch B, processed as ``accumulation_steps`` micro-batches)."""
    a_c, b_c, a_i, b_i, a_x, b_x, delta = (float(v) for v in p)
    bsz = np.asarray(bsz, float)
    s = np.broadcast_to(np.asarray(accumulation_steps, float), bsz.shape)
    return _eq3(a_c, b_c, a_i, b_i, a_x, b_x, delta, float(model_mb), bsz,
                np.asarray(num_gpus, float), np.asarray(servers, float), s)


def row_groups(num_gpus, servers) -> np.ndarray:
    """``single`` (1 GPU), ``intra`` (one server) or ``inter`` (several servers) per row."""
    n, srv = np.asarray(num_gpus), np.asarray(servers)
    return np.where(n == 1, "single", np.where(srv == 1, "intra", "inter"))


def mape_by_group(params: dict[str, float], df: pd.DataFrame, model_mb: float, *, time: str = "step_time",
                  batch: str = "local_bsz", accum: str | None = None) -> dict[str, float | int]:
    """Mean absolute percentage error of eq. 3 per row group (groups without rows are left out)."""
    s = df[accum].to_numpy(float) if accum else 1.0
    pred = predict([params[k] for k in PARAM_NAMES], df[batch], df["num_gpus"], df["servers"], model_mb, s)
    ape = np.abs(pred / df[time].to_numpy(float) - 1.0)
    groups = row_groups(df["num_gpus"], df["servers"])
    out: dict[str, float | int] = {g: float(ape[groups == g].mean()) for g in GROUPS if (groups == g).any()}
    out["all"] = float(ape.mean()) if len(ape) else math.nan
    out["rows"] = int(len(df))
    return out


def fit_eq3(df: pd.DataFrame, model_mb: float, *, time: str = "step_time", batch: str = "local_bsz",
            accum: str | None = None) -> Eq3Fit:
    """Bounded least squares of eq. 1-3 on one workload's rows (columns ``num_gpus``, ``servers``,
    ``batch`` = per-GPU batch, ``time`` = seconds per iteration, optional ``accum`` = steps s).

    Objective: relative error of the predicted time; the row groups (1 GPU / one server / several
    servers) get equal total weight. Starting values: a line through the smallest-GPU-count rows for
    eq. 1, the medians of the excess time for eq. 2; delta is started at 1, 2, 4 and 8 and the
    lowest cost kept. Bounds: all terms >= 0, 1 <= delta <= 10."""
    obs = df[time].to_numpy(float)
    bsz = df[batch].to_numpy(float)
    n = df["num_gpus"].to_numpy(float)
    srv = df["servers"].to_numpy(float)
    s = df[accum].to_numpy(float) if accum else np.ones_like(obs)
    groups = row_groups(n, srv)
    w = np.empty(len(df))
    for g in np.unique(groups):
        m = groups == g
        w[m] = 1.0 / math.sqrt(m.sum())

    base = n == n.min()
    micro = bsz / s
    if np.unique(micro[base]).size >= 2:
        b0, a0 = np.polyfit(micro[base], obs[base] / s[base], 1)
    else:
        a0, b0 = 0.5 * obs[base].mean() / s[base].mean(), 0.5 * obs[base].mean() / s[base].mean() / micro[base].mean()
    a0, b0 = max(a0, 1e-4), max(b0, 1e-6)
    extra = np.maximum(obs - s * (a0 + b0 * micro), 1e-4)
    x0 = np.array([a0, b0, 0.0, 0.0, 0.0, 0.0, 1.0])
    fixed: list[str] = []
    for k, g in ((2, "intra"), (4, "inter")):
        m = groups == g
        if m.any():
            x0[k] = float(np.median(extra[m] / (2 * (n[m] - 1)))) / 2
            x0[k + 1] = float(np.median(extra[m])) / model_mb / 2
        else:
            fixed += [PARAM_NAMES[k], PARAM_NAMES[k + 1]]
    if not (groups != "single").any():
        fixed.append("delta")
    free = np.array([name not in fixed for name in PARAM_NAMES])

    lower = np.array([0.0] * 6 + [1.0])
    upper = np.array([np.inf] * 6 + [10.0])

    def full(p_free: np.ndarray) -> np.ndarray:
        p = x0.copy()
        p[free] = p_free
        return p

    def resid(p_free: np.ndarray) -> np.ndarray:
        return w * (predict(full(p_free), bsz, n, srv, model_mb, s) / obs - 1.0)

    from scipy.optimize import least_squares  # here: importing this module (a profile's GPU type) loads no solver

    best = None
    for d0 in (1.0, 2.0, 4.0, 8.0) if free[6] else (1.0,):
        start = x0.copy()
        start[6] = d0
        start = np.clip(start, lower + 1e-9, upper - 1e-9)[free]
        res = least_squares(resid, start, bounds=(lower[free], upper[free]), x_scale="jac", max_nfev=20000)
        if best is None or res.cost < best.cost:
            best = res
    params = {k: float(v) for k, v in zip(PARAM_NAMES, full(best.x))}
    return Eq3Fit(params, mape_by_group(params, df, model_mb, time=time, batch=batch, accum=accum), fixed)


def holdout_split(df: pd.DataFrame, holdout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, test): ``holdout`` of each row group's configurations held out at random
    (a group with fewer than 3 rows stays in training)."""
    rng = np.random.default_rng(seed)
    groups = row_groups(df["num_gpus"], df["servers"])
    test = np.zeros(len(df), bool)
    for g in GROUPS:
        idx = np.flatnonzero(groups == g)
        if len(idx) >= 3:
            k = min(max(1, round(holdout * len(idx))), len(idx) - 2)
            test[rng.choice(idx, size=k, replace=False)] = True
    return np.flatnonzero(~test), np.flatnonzero(test)


def fit_with_holdout(df: pd.DataFrame, model_mb: float, *, holdout: float = 0.2, seed: int = 0,
                     time: str = "step_time", batch: str = "local_bsz", accum: str | None = None
                     ) -> tuple[Eq3Fit, dict[str, float | int]]:
    """Fit on the training configurations; return the fit and its MAPE on the held-out ones."""
    train, test = holdout_split(df, holdout, seed)
    fit = fit_eq3(df.iloc[train], model_mb, time=time, batch=batch, accum=accum)
    held = (mape_by_group(fit.params, df.iloc[test], model_mb, time=time, batch=batch, accum=accum)
            if len(test) else {"all": math.nan, "rows": 0})
    return fit, held


def load_pollux(model_dir: str | Path) -> pd.DataFrame:
    """Pollux's measured ``placements.csv`` + ``scalability.csv`` of one workload as one table:
    ``num_gpus, servers, local_bsz, step_time, sync_time, source, group`` (a placement like ``"13"``
    is 4 GPUs on 2 servers)."""
    model_dir = Path(model_dir)
    p = pd.read_csv(model_dir / "placements.csv", dtype={"placement": str})
    digits = p["placement"].map(lambda pl: [int(c) for c in str(pl)])
    p["num_gpus"] = [sum(d) for d in digits]
    p["servers"] = [len(d) for d in digits]
    p["source"] = "placements"
    s = pd.read_csv(model_dir / "scalability.csv")
    s = s.rename(columns={"num_replicas": "num_gpus", "num_nodes": "servers"})
    s["source"] = "scalability"
    cols = ["num_gpus", "servers", "local_bsz", "step_time", "sync_time", "source"]
    df = pd.concat([p[cols], s[cols]], ignore_index=True)
    df = df[(df["step_time"] > 0) & np.isfinite(df["step_time"])].reset_index(drop=True)
    df["group"] = row_groups(df["num_gpus"], df["servers"])
    return df


def gpu_type_of(device: str | None, gpu_model: str | None) -> str:
    """Short GPU type of a profile row (``h100``, ``a100``, ``t4``, …); ``cpu`` for CPU runs."""
    if device == "cpu" or not gpu_model:
        return "cpu"
    text = str(gpu_model).lower()
    for known in ("h200", "h100", "gh200", "a100", "a6000", "a40", "a10", "l40s", "l40", "l4", "v100", "p100",
                  "k80", "t4", "rtx 4090", "rtx 3090"):
        if known in text:
            return known.replace(" ", "")
    return re.sub(r"[^a-z0-9]+", "-", text.replace("nvidia", "")).strip("-")


def solo_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Eq. 3 rows from a profile store frame: ok solo runs, per-GPU batch B = micro-batch x accum,
    one server (the profiler runs on one host)."""
    solo = df[(df["kind"] == "solo") & (df["status"] == "ok") & df["iter_time_mean_s"].notna()]
    return pd.DataFrame({
        "workload": solo["workload"], "size": solo["size"],
        "gpu_type": [gpu_type_of(d, m) for d, m in zip(solo["device"], solo["gpu_model"])],
        "batch": solo["batch_size"].astype(float) * solo["accum_steps"].astype(float),
        "accum": solo["accum_steps"].astype(float), "num_gpus": solo["num_gpus"].astype(int), "servers": 1,
        "iter_time": solo["iter_time_mean_s"].astype(float),
    }).reset_index(drop=True)


def model_size_mb(workload: str, size: str) -> float:
    """M of eq. 2 for a profiled workload: its parameters x 4 bytes, in MB (builds the torch model)."""
    from schedlab.profiling.workloads import get

    return sum(p.numel() for p in get(workload).build(size).parameters()) * 4 / 1e6


def fit_store(df: pd.DataFrame, *, holdout: float = 0.2, seed: int = 0,
              sizes_mb: dict[str, float] | None = None,
              skipped: list[str] | None = None) -> dict[str, dict[str, dict]]:
    """Per workload and GPU type: the eq. 1-3 fit on the training configurations with its in-sample
    and held-out MAPE (all rows' fit when too few rows to hold any out). The store measures one host,
    so the ``inter`` terms are not fitted: they take the ``intra`` terms' values (listed in ``fixed`` and,
    with where they come from, in ``assumed``). A workload measured at one
    per-GPU batch only cannot separate eq. 1's alpha from beta: it is not fitted, and why is appended
    to ``skipped``."""
    rows = solo_rows(df)
    out: dict[str, dict[str, dict]] = {}
    for (workload, size, gpu_type), g in rows.groupby(["workload", "size", "gpu_type"]):
        g = g.reset_index(drop=True)
        if g["batch"].nunique() < 2:
            if skipped is not None:
                skipped.append(f"{workload} {gpu_type}: measured at one per-GPU batch "
                               f"({g['batch'].iloc[0]:g}) only; eq. 1 needs at least two")
            continue
        mb = (sizes_mb or {}).get(workload) or model_size_mb(workload, size)
        kw = dict(time="iter_time", batch="batch", accum="accum")
        fit, held = fit_with_holdout(g, mb, holdout=holdout, seed=seed, **kw)
        if held["rows"] == 0:
            fit = fit_eq3(g, mb, **kw)
        params = {k: float(f"{v:.6g}") for k, v in fit.params.items()}
        assumed = {}
        if "alpha_comm_inter" in fit.fixed and "alpha_comm_intra" not in fit.fixed:
            # a profile store measures one host (every row ``servers: 1``): held at 0, the inter terms would make
            # a job spanning servers communicate for free (two testbed nodes ran 2-device jobs 1.3x slower than
            # that); the server's own all-reduce cost is the lower bound the data supports
            assumed = {"alpha_comm_inter": "alpha_comm_intra", "beta_comm_inter": "beta_comm_intra"}
            params.update({k: params[v] for k, v in assumed.items()})
        out.setdefault(workload, {})[gpu_type] = {
            **params, "model_size_mb": round(mb, 4), "size": size, "fixed": fit.fixed,
            **({"assumed": assumed} if assumed else {}), "mape_train": fit.mape, "mape_holdout": held,
        }
    return out


def store_artifact(df: pd.DataFrame, store_version: dict, *, holdout: float = 0.2, seed: int = 0,
                   skipped: list[str] | None = None) -> dict:
    """The iteration-time artifact (``schedlab fit iteration-time``'s JSON; read by
    :class:`~schedlab.sched.models.fitted.IterationTimeModel`) fitted from a profile store frame: every
    fittable workload (:func:`fit_store`, why the others are not in ``skipped``) with the training data's
    hash and the store's version. ValueError when no workload can be fitted."""
    import hashlib

    from schedlab.sched.models.fitted import ITERATION_KIND, SCHEMA_VERSION

    skipped = [] if skipped is None else skipped
    fits = fit_store(df, holdout=holdout, seed=seed, skipped=skipped)
    if not fits:
        raise ValueError(f"no workload in {store_version.get('path', 'the profile store')} can be fitted "
                         f"({len(skipped)} measured at one batch only)")
    rows = solo_rows(df)
    data_hash = hashlib.sha256(rows.sort_values(list(rows.columns)).to_csv(index=False).encode()).hexdigest()
    return {"schema_version": SCHEMA_VERSION, "kind": ITERATION_KIND, "workloads": fits,
            "training": {"source": "store", "holdout": holdout, "seed": seed, "data_sha256": data_hash,
                         "profile_store": store_version}}


__all__ = ["Eq3Fit", "GROUPS", "fit_store", "store_artifact", "gpu_type_of", "load_pollux", "model_size_mb", "solo_rows", "PARAM_NAMES", "fit_eq3", "fit_with_holdout", "holdout_split",
           "mape_by_group", "predict", "row_groups"]
