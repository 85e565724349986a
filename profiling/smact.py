"""SMACT per workload and per co-located pair from the profile store (Castor Table 2's SMACT,
``DCGM_FI_PROF_SM_ACTIVE``, stored as ``smact_mean``), for the replay's SM-activity distribution
(:mod:`schedlab.sched.models.smact`, Castor Fig. 12c/d)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from schedlab.profiling.fitting import gpu_type_of
from schedlab.profiling.store import ProfileStore
from schedlab.sched.models.smact import SmactProfile

if TYPE_CHECKING:
    from schedlab.sched.replay import ReplaySpec


def profile_for(spec: ReplaySpec) -> SmactProfile | None:
    """The SMACT profile of the store ``spec.smact_profiles`` names, on the replay cluster's training
    GPU type (None when the spec names none): what :func:`schedlab.sched.replay.prepare` takes as
    ``smact`` (a ValueError names a folder that is not a profile store)."""
    if spec.smact_profiles is None:
        return None
    return smact_profile(spec.smact_profiles, spec.cluster_spec().training_pool.gpu_type)


def smact_profile(profiles: str | os.PathLike[str] | pd.DataFrame, gpu_type: str) -> SmactProfile:
    """SMACT of the store's ok ``full``-size GPU runs on ``gpu_type`` (newest run per configuration):
    solo runs per workload, and pairs as the mean of their two members' windows on the shared GPUs.
    When the store has no SMACT for ``gpu_type``, every GPU type's runs are used and a note says so."""
    source = "dataframe" if isinstance(profiles, pd.DataFrame) else str(profiles)
    if isinstance(profiles, pd.DataFrame):
        df = profiles
    else:
        if not (Path(profiles) / "records").is_dir():
            raise ValueError(f"{profiles}: not a profile store (no records/ folder)")
        df = ProfileStore(profiles).latest()
    notes: list[str] = []
    if df.empty:
        return SmactProfile({}, {}, source, gpu_type, ["the profile store is empty"])
    df = df[(df["status"] == "ok") & df["smact_mean"].notna()].copy()
    tiny = int((df["size"] != "full").sum())
    if tiny:
        notes.append(f"{tiny} record(s) of non-full model sizes ignored")
    df = df[df["size"] == "full"]
    df["gpu_type"] = [gpu_type_of(d, m) for d, m in zip(df["device"], df["gpu_model"])]
    df = df[df["gpu_type"] != "cpu"]
    used = gpu_type
    if not (df["gpu_type"] == gpu_type).any() and not df.empty:
        used = ",".join(sorted(set(df["gpu_type"])))
        notes.append(f"no SMACT profiled on {gpu_type!r}; used {used!r}")
    else:
        df = df[df["gpu_type"] == gpu_type]
    df = df.sort_values("created_at")
    solo: dict[str, dict[tuple[float, int], float]] = {}
    for r in df[df["kind"] == "solo"].itertuples():
        solo.setdefault(r.workload, {})[(float(r.batch_size), int(r.num_gpus))] = float(r.smact_mean)  # newest wins
    pairs: dict[tuple[str, str], dict[tuple[float, float], float]] = {}
    for _, grp in df[df["kind"] == "pair"].groupby("config_key"):
        if len(grp) != 2:
            continue
        a, b = sorted(grp.itertuples(), key=lambda r: (r.workload, r.job))
        pairs.setdefault((a.workload, b.workload), {})[(float(a.batch_size), float(b.batch_size))] = (
            (float(a.smact_mean) + float(b.smact_mean)) / 2)
    return SmactProfile(
        solo={w: [(bs, g, v) for (bs, g), v in sorted(rows.items())] for w, rows in solo.items()},
        pairs={k: [(ba, bb, v) for (ba, bb), v in sorted(rows.items())] for k, rows in pairs.items()},
        source=source, gpu_type=used, notes=notes,
    )


__all__ = ["profile_for", "smact_profile"]
