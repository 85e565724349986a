"""Export the profile store's pair and MPS-cap measurements as an interference table (the ``table:``
ξ source, ``sched/models/interference.py``'s ``PairsTable``), for Gimbal's share-aware replays (spec
``gimbal.md`` §5, §7.2 item 6).

Columns: ``model_a, batch_a, model_b, batch_b, mode, share_a, share_b, gpus_a, gpus_b, xi_a, xi_b``; one
row per measured pair *and* job (both orientations, so either job can be looked up first), shares in
percent (``timeslice`` rows and uncapped MPS runs: 100), ``gpus_*`` each job's device count.
Restricted-solo rows (kind ``solo-mps`` in the store) have an empty ``model_b``: ``xi_a`` is σ(p) of
``model_a`` alone under cap ``share_a``, ``xi_b`` empty.
Profiled workload names are the catalog's (``fit_interference.CATALOG_TO_PROFILED``). Only ``ok``
records with a finite ξ are used; the newest measurement of a configuration wins.

    python -m schedlab.profiling.mps_table STORE_DIR OUT.csv [--size full]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from .fit_interference import CATALOG_TO_PROFILED

COLUMNS = ["model_a", "batch_a", "model_b", "batch_b", "mode", "share_a", "share_b", "gpus_a", "gpus_b", "xi_a", "xi_b"]
_TO_CATALOG = {profiled: catalog for catalog, profiled in CATALOG_TO_PROFILED.items()}


def _share(value) -> float:
    return 100.0 if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def mps_table(df: pd.DataFrame, size: str | None = None) -> pd.DataFrame:
    """The table from a store frame (``ProfileStore.latest()``); ``size`` keeps one model size.  A
    measured ξ below 1 (a job ran faster beside a partner than alone: seen on an H200 for launch-bound
    jobs, see ``data/profiles/h200/README.md``) is raised to 1, the ``table:`` source's domain; the
    count is in ``table.attrs["raised_to_1"]``."""
    ok = df[(df["status"] == "ok") & df["xi"].notna()]
    if size is not None:
        ok = ok[ok["size"] == size]
    ok = ok[np.isfinite(ok["xi"].astype(float).to_numpy())]
    rows: list[dict] = []
    for _, grp in ok[ok["kind"] == "pair"].sort_values("created_at").groupby("config_key"):
        if len(grp) != 2:
            continue
        for i in range(2):
            r, p = grp.iloc[i], grp.iloc[1 - i]
            rows.append({"model_a": _TO_CATALOG.get(r.workload, r.workload), "batch_a": float(r.batch_size),
                         "model_b": _TO_CATALOG.get(p.workload, p.workload), "batch_b": float(p.batch_size),
                         "mode": r["mode"], "share_a": _share(r["share"]), "share_b": _share(p["share"]),
                         "gpus_a": int(r.num_gpus), "gpus_b": int(p.num_gpus),
                         "xi_a": float(r.xi), "xi_b": float(p.xi)})
    for _, r in ok[ok["kind"] == "solo-mps"].sort_values("created_at").iterrows():
        rows.append({"model_a": _TO_CATALOG.get(r.workload, r.workload), "batch_a": float(r.batch_size),
                     "model_b": "", "batch_b": math.nan, "mode": "mps", "share_a": _share(r["share"]),
                     "share_b": math.nan, "gpus_a": int(r.num_gpus), "gpus_b": 1,
                     "xi_a": float(r.xi), "xi_b": math.nan})
    table = pd.DataFrame(rows, columns=COLUMNS)
    keys = ["model_a", "batch_a", "model_b", "batch_b", "mode", "share_a", "share_b", "gpus_a", "gpus_b"]
    table = table.drop_duplicates(subset=keys, keep="last").reset_index(drop=True)
    xi = table[["xi_a", "xi_b"]]
    table[["xi_a", "xi_b"]] = xi.clip(lower=1.0)  # NaN (a restricted-solo row's xi_b) stays NaN
    table.attrs["raised_to_1"] = int((xi < 1.0).sum().sum())
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="export the profile store as a share-aware interference table")
    ap.add_argument("store", type=Path, help="profile store folder or packed file (data/profiles/<gpu>/profiles.parquet)")
    ap.add_argument("out", type=Path, help="CSV or .parquet")
    ap.add_argument("--size", default=None, help="keep one model size (full | tiny); default: all")
    a = ap.parse_args(argv)
    from .store import read_profiles

    if a.store.is_dir() and not (a.store / "records").is_dir():
        print(f"error: {a.store} is not a profile store (no records/ folder)", file=sys.stderr)
        return 2
    try:
        df, _ = read_profiles(a.store, allow_empty=True)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = mps_table(df, a.size)
    if table.empty:
        print(f"error: no ok pair or MPS-cap measurements in {a.store}", file=sys.stderr)
        return 1
    table.to_parquet(a.out, index=False) if a.out.suffix == ".parquet" else table.to_csv(a.out, index=False)
    print(f"wrote {len(table)} rows to {a.out}; {table.attrs['raised_to_1']} measured xi below 1 raised to 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
