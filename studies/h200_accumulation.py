"""What halving the batch with gradient accumulation costs on the H200 (SJF-BSBF §IV-A4, Alg. 2),
measured (data/profiles/h200 phases 1, 2, 5, 9, 10) against the replays' model (eq. 3 on the catalog,
``SharingModel.accumulation_speed``; ξ from the Gavel table).

    python -m schedlab.studies.h200_accumulation [--profiles data/profiles/h200/profiles.parquet]

Units: the profiler's iteration time is one optimizer step, ``accum`` micro-batches included
(profiling/runner.py ``step``), so a phase-9/10 row is already per full (global-batch) step; its ξ is
over the phase-9 solo of the same configuration (``t_solo_s``: the store's solo at the same workload,
batch and accumulation), not over the full-batch solo. Per workload:

- ``acc_cost``: t(B/2 x 2) / t(B), solo (phase 9 over phase 1); ``eq3_h200``: eq. 3's s x t(B/s) on the
  measured t(B/2) (phase 5) over t(B), the model's structure on this GPU's own solos;
  ``model``: the replay's t_iter(B, 2) / t_iter(B, 1) on the catalog (its GPU type for sjf-bsbf-sim);
- ``xi_full``, ``xi_half``: median ξ under MPS 50/50 over the 9 partners, full batch (phase 2) and
  half batch x 2 (phase 10, each over its own accumulating solo);
- ``step_pair``: median per-full-step time of the half-batch pair over the full-batch pair
  (phase 10 over phase 2, the same partner), measured; ``step_model``: the same from the model
  (catalog speed and Gavel ξ at the micro-batch, MPS 50/50);
- ``progress_full``, ``progress_half``: median combined progress 1/ξa + 1/ξb of the workload's pairs,
  the half-batch pair counted in full-batch solo steps (t_solo(B) / t_pair(B/2 x 2) per side).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from schedlab.benchmarks.common import DATA, ROOT

#: the middle batch of each workload (conf/sweeps/gpu-node.yaml ``mid``); phase 9-10 run at half of it
MID = {"cifar10": 128, "imagenet": 64, "yolov3": 8, "vgg16": 64, "mobilenetv2": 64, "bert": 16, "gpt": 8,
       "deepspeech2": 16, "ncf": 32768}
GAVEL = f"gavel:{DATA / 'profiles' / 'gavel' / 'simulation_throughputs.json'}"


def solo_times(df: pd.DataFrame) -> pd.Series:
    """Newest ok solo's mean iteration time (s) per (workload, batch, accumulation)."""
    solo = df[(df["status"] == "ok") & (df["kind"] == "solo")].sort_values("created_at")
    return solo.groupby(["workload", "batch_size", "accum_steps"])["iter_time_mean_s"].last()


def mps_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """Phase 2 and 10 rows (MPS 50/50 on both sides, every workload at its middle batch or half of it),
    one row per (workload, partner) orientation, with the full- and half-batch measurements side by side."""
    p = df[(df["status"] == "ok") & (df["kind"] == "pair") & (df["mode"] == "mps")]
    both50 = p.groupby("config_key")["share"].transform(lambda s: len(s) == 2 and bool((s == 50).all()))
    p = p[both50.astype(bool)]
    mid = p["workload"].map(MID)
    full = p[(p["accum_steps"] == 1) & (p["batch_size"] == mid) & (p["partner_batch_size"] == p["partner"].map(MID))]
    half = p[(p["accum_steps"] == 2) & (p["batch_size"] == mid // 2)]
    cols = ["iter_time_mean_s", "xi", "t_solo_s"]
    f = full.groupby(["workload", "partner"])[cols].mean().add_suffix("_full")
    h = half.groupby(["workload", "partner"])[cols].mean().add_suffix("_half")
    out = f.join(h, how="inner")
    out["step_pair"] = out["iter_time_mean_s_half"] / out["iter_time_mean_s_full"]
    return out.reset_index()


def combined_progress(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per unordered pair: 1/ξa + 1/ξb at full batch, and the half-batch pair in full-batch solo steps."""
    idx = pairs.set_index(["workload", "partner"])
    rows = []
    for (a, b), r in idx.iterrows():
        if a > b:
            continue
        o = idx.loc[(b, a)]
        rows.append({"a": a, "b": b, "progress_full": 1 / r["xi_full"] + 1 / o["xi_full"],
                     "progress_half": r["t_solo_s_full"] / r["iter_time_mean_s_half"]
                     + o["t_solo_s_full"] / o["iter_time_mean_s_half"]})
    return pd.DataFrame(rows)


def model_side(workloads: list[str], cluster: str = "sjf-bsbf-sim") -> pd.DataFrame:
    """The replay's model for the same (workload, batch): accumulation cost t(B,2)/t(B,1) on the catalog at
    the cluster's GPU type, and the per-full-step ratio of a half-batch MPS 50/50 pair over the full-batch
    one (catalog speed, Gavel ξ at the micro-batch), median over the catalog partners."""
    from schedlab.sched.core.cluster import load_cluster
    from schedlab.sched.core.job import Job
    from schedlab.sched.models.interference import make_interference
    from schedlab.sched.models.workloads import default_catalog
    from schedlab.sched.models.annotate import catalog_gpu_type

    catalog = default_catalog()
    gpu = catalog_gpu_type(catalog, load_cluster(cluster).training_pool.gpu_type)
    source = make_interference(GAVEL)
    known = [w for w in workloads if w in catalog.workloads and catalog.workload(w).gpu_params]

    def job(w: str, steps: int) -> Job:
        j = Job(job_id=w, submit_time=0.0, num_gpus=1, duration=1.0, model=w, batch_size=float(MID[w]))
        j.accumulation_steps = steps
        return j

    def cost(w: str) -> float:
        return (catalog.solo_iteration_time(w, MID[w], 1, gpu, accumulation_steps=2)
                / catalog.solo_iteration_time(w, MID[w], 1, gpu))

    rows = []
    for w in known:
        steps = []
        for p in known:
            full = source.ratio(job(w, 1), job(p, 1), "mps", (50.0, 50.0))[0]
            half = source.ratio(job(w, 2), job(p, 2), "mps", (50.0, 50.0))[0]
            steps.append(cost(w) * half / full)
        rows.append({"workload": w, "model": cost(w), "step_model": float(pd.Series(steps).median())})
    return pd.DataFrame(rows).set_index("workload")


def table(profiles: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    df = pd.read_parquet(profiles)
    solo = solo_times(df)
    rows = []
    for w, b in MID.items():
        full, acc = solo.get((w, b, 1)), solo.get((w, b // 2, 2))
        half = solo.get((w, b // 2, 1))
        if full is None or acc is None:
            raise SystemExit(f"{profiles}: no phase-1 or phase-9 solo of {w} (batch {b}, {b // 2} x 2)")
        rows.append({"workload": w, "B": b, "t_full_ms": 1e3 * full, "t_acc_ms": 1e3 * acc, "acc_cost": acc / full,
                     "eq3_h200": 2 * half / full if half is not None else math.nan})
    out = pd.DataFrame(rows).set_index("workload")
    pairs = mps_pairs(df)
    by_w = pairs.groupby("workload").agg(xi_full=("xi_full", "median"), xi_half=("xi_half", "median"),
                                         step_pair=("step_pair", "median"))
    prog = combined_progress(pairs)
    both = pd.concat([prog.rename(columns={"a": "w"}), prog[prog["a"] != prog["b"]].rename(columns={"b": "w"})])
    out = out.join(by_w).join(both.groupby("w")[["progress_full", "progress_half"]].median())
    out = out.join(model_side(list(MID)))
    return out, pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=Path, default=ROOT / "data" / "profiles" / "h200" / "profiles.parquet")
    args = parser.parse_args()
    out, pairs = table(args.profiles)
    pd.set_option("display.width", 200)
    print(out.round(3).to_string())
    prog = combined_progress(pairs)
    print(f"\n{len(pairs)} orientations: median xi full {pairs['xi_full'].median():.3f}, half {pairs['xi_half'].median():.3f}"
          f" (lower in {(pairs['xi_half'] < pairs['xi_full']).sum()}); per-full-step half/full median"
          f" {pairs['step_pair'].median():.3f}, range {pairs['step_pair'].min():.3f}-{pairs['step_pair'].max():.3f},"
          f" > 1 in {(pairs['step_pair'] > 1).sum()}")
    print(f"{len(prog)} pairs: median combined progress full {prog['progress_full'].median():.3f},"
          f" half (full-batch solo steps) {prog['progress_half'].median():.3f}")
    print(f"solo accumulation cost median {out['acc_cost'].median():.3f}; eq. 3 on the H200 solos"
          f" median {out['eq3_h200'].median():.3f}")


if __name__ == "__main__":
    main()
