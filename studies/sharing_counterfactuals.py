"""Where SJF-BSBF's extra run time over SJF comes from: the same replays with one sharing cost
switched off at a time in the engine, while the policy still decides on the real ones.

    python -m schedlab.studies.sharing_counterfactuals [--seeds 0 1 2] [--variants ...] sjf-bsbf-pollux ...

Run time = JCT - queueing (each job's end minus its first start), hours, seed means. Variants of sjf-bsbf
(``actual`` is the configured replay, bit-identical to it):

- ``acc_free``: an accumulating job runs at solo speed 1 (Alg. 2's halving costs nothing);
- ``xi_free``: as acc_free, and every shared job at ξ = 1 (sharing costs nothing at all);
- ``pace_avg``: a job's pace is its GPU-weighted mean ξ (1 on unshared GPUs) instead of its slowest
  worker's (the gang's straggler, SJF-BSBF eq. 5-6 applied per GPU);
- ``min_steps``: Alg. 2 may only take the least accumulation that fits in memory (no deeper halving
  chosen by Theorem 1);
- ``mem_h200``: memory per GPU from the H200 solos' peak allocated memory (a line through each
  workload's three batch sizes, data/profiles/h200) instead of the catalog's upper-bound estimate; also
  applied to sjf-ffs (its first fit checks memory).

Analysis only: the variants patch methods for the duration of one replay and restore them; nothing here
changes a default.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.benchmarks.common import ROOT
from schedlab.studies.sharing_claims import HOUR, run_one

VARIANTS = ("actual", "acc_free", "xi_free", "pace_avg", "min_steps", "mem_h200")
LABELS = ("sjf", "sjf-ffs", "sjf-bsbf")
PROFILES = ROOT / "data" / "profiles" / "h200" / "profiles.parquet"


def h200_memory(profiles: Path = PROFILES) -> dict[str, tuple[float, float]]:
    """Per profiled workload: (static GiB, GiB per sample), a least-squares line through its ok solos'
    peak allocated memory at accumulation 1."""
    df = pd.read_parquet(profiles)
    solo = df[(df["status"] == "ok") & (df["kind"] == "solo") & (df["accum_steps"] == 1)]
    out = {}
    for w, g in solo.groupby("workload"):
        slope, static = np.polyfit(g["batch_size"].to_numpy(float), g["peak_mem_bytes"].to_numpy(float) / 2**30, 1)
        out[str(w)] = (float(static), float(slope))
    return out


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """Patch the engine for ``name`` (module docstring) for the duration of the block."""
    import schedlab.sched.policies.sharing.policy as sjf
    from schedlab.sched.core.engine import Engine
    from schedlab.sched.models.sharing import SharingModel
    from schedlab.sched.models.workloads import WorkloadCatalog

    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; known: {VARIANTS}")
    saved = {(SharingModel, "accumulation_speed"): SharingModel.accumulation_speed,
             (SharingModel, "ratio"): SharingModel.ratio,
             (sjf._SharingSJF, "options"): sjf._SharingSJF.options, (sjf._SharingSJF, "ratio"): sjf._SharingSJF.ratio,
             (Engine, "_refresh_rate"): Engine._refresh_rate, (Engine, "refresh_rate"): Engine.refresh_rate,
             (sjf, "algorithm2"): sjf.algorithm2, (WorkloadCatalog, "memory_gib"): WorkloadCatalog.memory_gib}
    real_speed, real_ratio, refresh, algorithm2 = (SharingModel.accumulation_speed, SharingModel.ratio,
                                                   Engine._refresh_rate, sjf.algorithm2)

    def policy_sees_real(fn: Callable) -> Callable:
        def wrapped(*args, **kwargs):
            engine_side = SharingModel.accumulation_speed, SharingModel.ratio
            SharingModel.accumulation_speed, SharingModel.ratio = real_speed, real_ratio
            try:
                return fn(*args, **kwargs)
            finally:
                SharingModel.accumulation_speed, SharingModel.ratio = engine_side
        return wrapped

    def refresh_avg(self, job, force=False):
        if job.workers is not None or not job.partners:
            return refresh(self, job, force)
        partners = job.partners
        job.partners = {None: (0, 1.0 + sum(c * (xi - 1.0) for c, xi in partners.values()) / len(job.gpus))}
        try:
            return refresh(self, job, force)
        finally:
            job.partners = partners

    try:
        if name in ("acc_free", "xi_free"):
            SharingModel.accumulation_speed = lambda self, job, steps: 1.0
            sjf._SharingSJF.options = policy_sees_real(saved[(sjf._SharingSJF, "options")])
            sjf._SharingSJF.ratio = policy_sees_real(saved[(sjf._SharingSJF, "ratio")])
        if name == "xi_free":
            SharingModel.ratio = lambda self, a, b, mode, shares=None: (1.0, 1.0)
        if name == "pace_avg":
            Engine._refresh_rate = Engine.refresh_rate = refresh_avg
        if name == "min_steps":
            sjf.algorithm2 = lambda left, remaining, options: algorithm2(left, remaining, options[:1])
        if name == "mem_h200":
            fits, catalog_memory = h200_memory(), WorkloadCatalog.memory_gib
            WorkloadCatalog.memory_gib = lambda self, model, batch: (
                fits[model][0] + fits[model][1] * batch if model in fits else catalog_memory(self, model, batch))
        yield
    finally:
        for (owner, attr), value in saved.items():
            setattr(owner, attr, value)


def measure(spec, name: str) -> dict[str, float]:
    """One replay under ``name``: JCT, queueing and run time (hours), sharing starts and their batch."""
    with variant(name):
        jobs, dec = run_one(spec)
    run = jobs["jct_s"] - jobs["wait_s"]
    large = jobs["num_gpus"] > 4
    return {"jct": jobs["jct_s"].mean() / HOUR, "queue": jobs["wait_s"].mean() / HOUR, "run": run.mean() / HOUR,
            "run_large": run[large].mean() / HOUR, "run_small": run[~large].mean() / HOUR,
            "starts": float(dec.groupby(["job", "time"]).ngroups) if len(dec) else 0.0,
            "steps": float(dec["steps"].mean()) if len(dec) else math.nan,
            "speed": float(dec["speed"].mean()) if len(dec) else math.nan}


def main() -> None:
    from schedlab.settings import Settings

    Settings.from_env().apply()
    from schedlab.sched.spec import load_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--csv", type=Path, help="write every replay's row here")
    args = parser.parse_args()
    started, rows = time.perf_counter(), []
    for name in args.configs:
        config = load_config(name).model_copy(update={"seeds": args.seeds})
        specs = [s for s in config.grid("sharing-counterfactuals") if math.isclose(s.load, 1.0) and s.label in LABELS]
        for spec in specs:
            names = (args.variants if spec.label == "sjf-bsbf" else
                     [v for v in ("actual", "mem_h200") if v in args.variants] if spec.label == "sjf-ffs" else ["actual"])
            for v in names:
                rows.append({"config": name, "label": spec.label, "variant": v, "seed": spec.seed, **measure(spec, v)})
    df = pd.DataFrame(rows)
    if args.csv:
        df.to_csv(args.csv, index=False)
    pd.set_option("display.width", 200)
    means = df.groupby(["config", "label", "variant"]).mean(numeric_only=True).drop(columns="seed")
    for name, g in means.groupby(level="config"):
        sjf_run = g.loc[(name, "sjf", "actual"), "run"]
        g = g.assign(run_vs_sjf=g["run"] / sjf_run - 1)
        print(f"=== {name}, seeds {args.seeds}")
        print(g.droplevel("config").round(3).to_string())
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
