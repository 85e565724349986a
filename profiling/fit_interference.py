"""Training the interference-ratio (ξ) model (Castor §6.2) and its interpolation baseline (§6).

Training rows: one per measured pair and job. ``job0_*`` are the solo features of the job whose ξ
is the label, ``job1_*`` its partner's; pair features are MPS on/off, the two MPS shares and the
GPU count. Two row sources:

- :func:`rows_from_store`: the profile store (``schedlab profile``); job features are the Castor
  §6.1 Table 2 indicators the solo runs recorded (means; missing stays NaN) and the micro-batch.
- :func:`rows_from_gavel`: Gavel's published co-location throughputs (one GPU, time-sliced);
  configuration-only features: job family (one-hot), batch size, and the solo steps/s.

The split is by pair (no pair on both sides), 80/20 as in Castor §6.2.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.interpolate import LinearNDInterpolator

from schedlab.profiling.indicators import ALL_INDICATORS

ID_COLUMNS = ("job0_workload", "job1_workload", "job", "pair", "xi")
XGB_PARAMS = {"max_depth": 5, "eta": 0.1, "subsample": 0.8, "colsample_bytree": 0.8,
              "min_child_weight": 1.0, "objective": "reg:squarederror"}
NUM_ROUNDS = 150
BAND = (1.4, 1.6)  # Castor §6.4: where decisions flip
# profiled workload (profiling/workloads.py) for each catalog workload (conf/workloads.yaml): one vocabulary
CATALOG_TO_PROFILED = {name: name for name in ("cifar10", "imagenet", "yolov3", "bert", "deepspeech2", "ncf",
                                               "vgg16", "mobilenetv2", "gpt")}


def _pair_key(a: tuple, b: tuple) -> str:
    return " | ".join(sorted(map(str, (a, b))))


def rows_from_store(df: pd.DataFrame) -> tuple[pd.DataFrame, list[dict[str, Any]], list[str]]:
    """(training rows, solo table, indicator names) from a profile store frame (``latest()``).

    A job's features are its own solo's (same micro-batch *and* accumulation steps) and its
    micro-batch. The ``pair`` (the unit :func:`split_by_pair` holds out) is the pair of jobs, each
    (workload, per-GPU batch = micro-batch x accumulation steps, GPUs): like the mode and the MPS
    shares, processing a job's batch as several micro-batches (SJF-BSBF §V-B) is a configuration of
    the same pair, so a pair measured both ways is held out or trained on as a whole.

    The solo table keeps only the solos that describe a job on some training row (the features the
    model is trained with): a solo at a batch no pair was measured at would be a feature outside the
    training set, so a job at such a batch is described by its workload's nearest paired batch; pairs
    measured at other batches, or with accumulation, bring their solos in automatically. The model
    looks a job up by micro-batch: where one micro-batch was paired both with and without
    accumulation, the solo without it describes the job."""
    ok = df[df["status"] == "ok"]
    solo = ok[ok["kind"] == "solo"].sort_values("created_at")
    pairs = ok[(ok["kind"] == "pair") & ok["xi"].notna()]
    pairs = pairs[np.isfinite(pairs["xi"].astype(float))]
    inds = [n for n in ALL_INDICATORS if solo[f"{n.lower()}_mean"].notna().any()]
    skey = ["workload", "size", "batch_size", "accum_steps", "num_gpus", "amp", "device"]
    table = {tuple(r[k] for k in skey): {n: _num(r[f"{n.lower()}_mean"]) for n in inds}
             for _, r in solo.iterrows()}  # newest wins
    rows, paired = [], set()
    for _, grp in pairs.groupby("config_key"):
        if len(grp) != 2:
            continue
        for i in range(2):
            r, p = grp.iloc[i], grp.iloc[1 - i]
            sr, sp = table.get(tuple(r[k] for k in skey)), table.get(tuple(p[k] for k in skey))
            if sr is None or sp is None:
                continue
            paired |= {tuple(r[k] for k in skey), tuple(p[k] for k in skey)}
            row = {f"job0_{n}": sr[n] for n in inds} | {"job0_batch": float(r.batch_size)}
            row |= {f"job1_{n}": sp[n] for n in inds} | {"job1_batch": float(p.batch_size)}
            row |= {"mps": float(r["mode"] == "mps"), "share0": _num(r["share"]), "share1": _num(p["share"]),
                    "gpus": float(r.num_gpus), "job0_workload": r.workload, "job1_workload": p.workload,
                    "job": int(r.job), "xi": float(r.xi),
                    "pair": _pair_key(_job_key(r), _job_key(p))}
            rows.append(row)
    entries: dict[tuple, tuple[int, dict[str, Any]]] = {}  # (workload, micro-batch, GPUs), first measured first
    for k, values in table.items():
        e = (k[0], k[2], k[4])
        if k in paired and (e not in entries or k[3] < entries[e][0]):  # fewest accumulation steps wins
            entries[e] = (k[3], {"workload": k[0], "batch": float(k[2]), "gpus": int(k[4]), "values": values})
    return pd.DataFrame(rows), [entry for _, entry in entries.values()], inds + ["batch"]


def _job_key(r: pd.Series) -> tuple:
    """A pair's job: (workload, per-GPU batch = micro-batch x accumulation steps, GPUs)."""
    return str(r.workload), int(r.batch_size) * int(r.accum_steps), int(r.num_gpus)


def _num(v: Any) -> float:
    return math.nan if v is None or pd.isna(v) else float(v)


_TYPE = re.compile(r"^(.*) \(batch size (\d+)\)$")


def rows_from_gavel(path: str | Path, worker: str = "v100") -> tuple[pd.DataFrame, list[dict[str, Any]], list[str], int]:
    """(rows, solo table, job features, pairs dropped) from Gavel's ``simulation_throughputs.json``:
    scale factor 1, ξ = solo / paired steps/s; pairs measured as 0 (cannot run together) are dropped."""
    import json

    table = json.loads(Path(path).read_text())[worker]
    solo: dict[str, float] = {}
    measured: dict[tuple[str, str], tuple[float, float]] = {}
    for key, entry in table.items():
        job_type, scale = ast.literal_eval(key)
        if scale != 1:
            continue
        solo[job_type] = float(entry["null"])
        for other, both in entry.items():
            if other != "null" and ast.literal_eval(other)[1] == 1:
                measured[(job_type, ast.literal_eval(other)[0])] = (float(both[0]), float(both[1]))

    def split(job_type: str) -> tuple[str, float]:
        m = _TYPE.match(job_type)
        return (m.group(1), float(m.group(2))) if m else (job_type, math.nan)

    families = sorted({split(t)[0] for t in solo})
    feats = {t: {f"fam_{f}": float(split(t)[0] == f) for f in families} | {"batch": split(t)[1], "solo_tput": solo[t]}
             for t in solo}
    job_features = [f"fam_{f}" for f in families] + ["batch", "solo_tput"]
    rows, dropped = [], 0
    for (a, b), (ta, tb) in sorted(measured.items()):
        if a > b:
            continue  # Gavel stores each pair both ways, symmetrically
        if ta <= 0 or tb <= 0:
            dropped += 1
            continue
        for i, (me, other, thr) in enumerate(((a, b, ta), (b, a, tb))):
            row = {f"job0_{k}": v for k, v in feats[me].items()} | {f"job1_{k}": v for k, v in feats[other].items()}
            row |= {"job0_workload": split(me)[0], "job1_workload": split(other)[0], "job": i,
                    "xi": solo[me] / thr, "pair": _pair_key((a,), (b,))}
            rows.append(row)
    solo_entries = [{"workload": split(t)[0], "batch": None if math.isnan(split(t)[1]) else split(t)[1], "gpus": 1,
                     "values": {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in feats[t].items()}}
                    for t in sorted(solo)]
    return pd.DataFrame(rows), solo_entries, job_features, dropped


def feature_names(rows: pd.DataFrame, job_features: list[str]) -> tuple[list[str], list[str]]:
    """(all feature names in model order, pair features present in ``rows``)."""
    pair = [c for c in ("mps", "share0", "share1", "gpus") if c in rows.columns]
    return [f"job0_{f}" for f in job_features] + [f"job1_{f}" for f in job_features] + pair, pair


def split_by_pair(rows: pd.DataFrame, holdout: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (train, test); ``holdout`` of the pairs (at least one, at most all but one) are test."""
    pairs = np.array(sorted(rows["pair"].unique()))
    if len(pairs) < 2:
        raise ValueError(f"need at least 2 measured pairs to hold some out, got {len(pairs)}")
    rng = np.random.default_rng(seed)
    k = min(max(1, round(holdout * len(pairs))), len(pairs) - 1)
    test_pairs = set(rng.choice(pairs, size=k, replace=False))
    is_test = rows["pair"].isin(test_pairs).to_numpy()
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def train(rows: pd.DataFrame, features: list[str], seed: int = 0, target: str = "log_xi"):
    """An XGBoost booster on ``rows`` (label ξ, or log ξ)."""
    import xgboost as xgb

    y = rows["xi"].to_numpy(float)
    d = xgb.DMatrix(rows[features].to_numpy(float), label=np.log(y) if target == "log_xi" else y,
                    feature_names=features, missing=np.nan)
    return xgb.train({**XGB_PARAMS, "seed": seed, "nthread": 1}, d, num_boost_round=NUM_ROUNDS)


def _rmse(err: np.ndarray) -> float:
    return float(np.sqrt(np.mean(err**2))) if len(err) else math.nan


def errors(test: pd.DataFrame, pred: np.ndarray) -> dict[str, float]:
    """Castor §6.4's report: RMSE per job of the pair, overall, inside and outside ξ ∈ [1.4, 1.6]."""
    y, job = test["xi"].to_numpy(float), test["job"].to_numpy()
    err = pred - y
    band = (y >= BAND[0]) & (y <= BAND[1])
    return {"rmse_job0": _rmse(err[job == 0]), "rmse_job1": _rmse(err[job == 1]), "rmse": _rmse(err),
            "mae": float(np.mean(np.abs(err))), "mape": float(np.mean(np.abs(err) / y)),
            "rmse_band": _rmse(err[band]), "mae_band": float(np.mean(np.abs(err[band]))) if band.any() else math.nan,
            "rows_band": int(band.sum()), "rmse_outside_band": _rmse(err[~band]),
            "side_errors_1.5": float(np.mean((pred > 1.5) != (y > 1.5))), "test_rows": int(len(y)),
            # co-located progress rate is 1/ξ: its relative error is |ξ/ξ̂ - 1|
            "progress_error": float(np.mean(np.abs(y / pred - 1.0))) if len(y) else math.nan}


def interpolate(train_rows: pd.DataFrame, test_rows: pd.DataFrame) -> tuple[np.ndarray, float]:
    """Castor §6's alternative: per (workload pair, pair configuration), linear interpolation of the
    measured ξ over (log batch0, log batch1), nearest measured point outside their hull, the mean
    training ξ where the workload pair was never measured. Returns (predictions, fraction covered)."""
    keys = ["job0_workload", "job1_workload"] + [c for c in ("mps", "share0", "share1", "gpus") if c in train_rows]
    coords = ["job0_batch", "job1_batch"]

    def xy(f: pd.DataFrame) -> np.ndarray:  # batchless job types (NaN) sit at 0
        return np.nan_to_num(np.log(np.clip(f[coords].to_numpy(float), 1e-9, None)))

    groups = {k: g for k, g in train_rows.fillna({c: -1.0 for c in keys[2:]}).groupby(keys)}
    fill = test_rows.fillna({c: -1.0 for c in keys[2:]})
    out, covered = np.full(len(test_rows), float(train_rows["xi"].mean())), 0
    for i, (_, r) in enumerate(fill.iterrows()):
        g = groups.get(tuple(r[k] for k in keys))
        if g is None:
            continue
        covered += 1
        pts, vals = xy(g), g["xi"].to_numpy(float)
        q = xy(pd.DataFrame([r]))
        est = math.nan
        if len(np.unique(pts, axis=0)) >= 3 and np.linalg.matrix_rank(pts - pts.mean(0)) == 2:
            est = float(LinearNDInterpolator(pts, vals)(q)[0])
        if math.isnan(est):
            est = float(vals[np.argmin(np.linalg.norm(pts - q, axis=1))])
        out[i] = est
    return out, covered / max(len(test_rows), 1)


def importance(booster, top: int = 5) -> dict[str, float]:
    """Top features by total gain, normalised to sum 1 over all features (Castor Fig. 5)."""
    gain = booster.get_score(importance_type="total_gain")
    total = sum(gain.values()) or 1.0
    return {k: round(v / total, 4) for k, v in sorted(gain.items(), key=lambda kv: -kv[1])[:top]}


def data_hash(rows: pd.DataFrame, features: list[str]) -> str:
    """sha256 of the training rows (features, label, pair, job), order-independent."""
    cols = features + ["xi", "job", "pair"]
    text = rows[cols].sort_values(["pair", "job"]).to_csv(index=False, float_format="%.17g")
    return hashlib.sha256(text.encode()).hexdigest()


def fit(rows: pd.DataFrame, solo: list[dict[str, Any]], job_features: list[str], *, variant: str,
        workload_map: dict[str, str], provenance: dict[str, Any], holdout: float = 0.2, seed: int = 0,
        target: str = "log_xi", name: str = "interference-ratio"):
    """Split by pair, train on the training pairs, evaluate on the held-out ones (model and
    interpolation baseline). Returns the :class:`InterferenceModel` (trained on the training
    pairs, so its metrics describe it) with the metrics in its ``meta``."""
    from schedlab.sched.models.fitted import INTERFERENCE_KIND, SCHEMA_VERSION, InterferenceModel

    import xgboost as xgb

    features, pair_features = feature_names(rows, job_features)
    tr, te = split_by_pair(rows, holdout, seed)
    booster = train(rows.iloc[tr], features, seed, target)
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "kind": INTERFERENCE_KIND, "name": name, "variant": variant,
        "feature_names": features, "job_features": job_features, "pair_features": pair_features,
        "target": target, "modes": ["timeslice", "mps"] if rows.get("mps", pd.Series([0.0])).max() > 0
        else ["timeslice"], "solo": solo, "workload_map": workload_map,
        "training": {"rows": int(len(rows)), "pairs": int(rows["pair"].nunique()), "train_rows": int(len(tr)),
                     "test_rows": int(len(te)), "holdout": holdout, "seed": seed,
                     "test_pairs": sorted(rows.iloc[te]["pair"].unique().tolist()),
                     "data_sha256": data_hash(rows, features), "xgboost": xgb.__version__,
                     "params": {**XGB_PARAMS, "num_boost_round": NUM_ROUNDS}},
        "provenance": provenance,
    }
    model = InterferenceModel(booster, meta)
    test = rows.iloc[te]
    pred = np.maximum(model.predict(test[features].to_numpy(float)), 1.0)
    interp, covered = interpolate(rows.iloc[tr], test)
    meta["metrics"] = {**errors(test, pred), "importance": importance(booster),
                       "interpolation": {**errors(test, interp), "covered": round(covered, 4)},
                       "by_setting": {name: errors(test[mask], pred[mask]) for name, mask in settings(test).items()}}
    return model


def settings(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """Masks of the held-out rows by co-location setting: time-sliced, MPS at equal shares (Castor's
    50/50), MPS at unequal shares (Gimbal's squeeze); only settings present, only store rows."""
    if "mps" not in rows.columns or "share0" not in rows.columns:
        return {}
    mps = rows["mps"].to_numpy(float) == 1.0
    equal = np.isclose(rows["share0"].to_numpy(float), rows["share1"].to_numpy(float))
    out = {"timeslice": ~mps, "mps equal": mps & equal, "mps unequal": mps & ~equal}
    return {k: v for k, v in out.items() if v.any()}
