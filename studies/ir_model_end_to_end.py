"""Castor §9.5 "Impact of IR prediction model": replay one trace with ``castor`` deciding on ξ from
measurements vs from the fitted model, the truth being the measurements in both, and compare the
average JCT and the sharing benefit (Castor: under 10% apart).
The average sharing benefit (eq. 24, a mean of per-job ratios) is dominated by a few jobs with very
large ratios, so the median is printed too.

    python -m schedlab.studies.ir_model_end_to_end                  # 240 synthetic jobs on castor-physical
    python -m schedlab.studies.ir_model_end_to_end --jobs 480 --load 2 --cluster castor-sim

Measurements: Gavel's published co-location table (``gavel:PATH``, V100, one GPU, time-sliced; the
MPS rule of ``sched/models/interference.py`` for MPS). Model: the configuration-only XGBoost ξ model fitted
on that table (``conf/models/interference-gavel-v100``, trained on 80% of its pairs). The trace is the
built-in synthetic one with workloads annotated from the catalog (Castor §9.1). Also prints the
held-out RMSE of the model and of the interpolation baseline, as stored in the model's meta.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from schedlab import conf
from schedlab.benchmarks.common import DATA

GAVEL = DATA / "profiles" / "gavel" / "simulation_throughputs.json"
MODEL = conf.path("models", "interference-gavel-v100")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gavel", type=Path, default=GAVEL)
    ap.add_argument("--model", default=str(MODEL), help="model directory or models:/… URI")
    ap.add_argument("--cluster", default="castor-physical")
    ap.add_argument("--jobs", type=int, default=240)
    ap.add_argument("--load", type=float, default=1.0, help="submit times divided by this")
    ap.add_argument("--mode", default="mps", choices=["mps", "timeslice"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = ap.parse_args(argv)
    if not args.gavel.exists():
        print(f"Gavel table not found: {args.gavel}", file=sys.stderr)
        return 2

    from schedlab.sched.core.cluster import load_cluster
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.traces import LoadOptions, load_trace

    cluster = load_cluster(args.cluster)
    truth = f"gavel:{args.gavel}:v100"
    sources = {"measured": truth, "model": f"model:{args.model}"}
    print(f"castor ({args.mode}) on {cluster.name} ({cluster.total_gpus} GPUs), {args.jobs} synthetic jobs, "
          f"load x{args.load}; truth = Gavel v100 table")
    print(f"{'seed':>4s} {'predictor':10s} {'avg JCT (s)':>12s} {'sharing benefit':>16s} {'shared jobs':>12s} "
          f"{'median SB':>10s} {'fallbacks':>9s} {'s':>5s}")
    diffs = []
    for seed in args.seeds:
        table, _ = load_trace(None, None, LoadOptions(num_jobs=args.jobs, seed=seed, load=args.load))  # 64 GPUs' load
        replay = ReplaySpec(annotate=True, cluster=cluster, seed=seed, interference=truth,
                            policies=[{"name": "castor", "params": {"mode": args.mode, "predictor": spec}}
                                      for spec in sources.values()])
        prepared = prepare(replay, table)
        out = {}
        for label, policy in zip(sources, replay.policies):
            t = time.time()
            [res] = run(replay.model_copy(update={"policies": (policy,)}), prepared)
            s = res.summary
            j = res.jobs[res.jobs["exclusive_jct_estimate"].notna()]
            s["median_sharing_benefit"] = float((j["exclusive_jct_estimate"] / j["jct_s"]).median())
            out[label] = s
            print(f"{seed:4d} {label:10s} {s['avg_jct_s']:12.0f} {s['avg_sharing_benefit']:16.4f} "
                  f"{s['shared_job_fraction']:12.1%} {s['median_sharing_benefit']:10.4f} "
                  f"{s['xi_fallback_pairs']:9d} {time.time() - t:5.1f}")
        jct = out["model"]["avg_jct_s"] / out["measured"]["avg_jct_s"] - 1
        sb = out["model"]["avg_sharing_benefit"] / out["measured"]["avg_sharing_benefit"] - 1
        med = out["model"]["median_sharing_benefit"] / out["measured"]["median_sharing_benefit"] - 1
        diffs.append((jct, sb))
        print(f"{seed:4d} {'difference':10s} {jct:+12.2%} {sb:+16.2%} {'':12s} {med:+10.2%}")
    if len(diffs) > 1:
        jct_d = [abs(d[0]) for d in diffs if d[0] == d[0]]
        sb_d = [abs(d[1]) for d in diffs if d[1] == d[1]]  # seeds where no job shared have no benefit
        print(f"mean |difference|: avg JCT {sum(jct_d) / max(len(jct_d), 1):.2%} ({len(jct_d)} seeds), "
              f"sharing benefit {sum(sb_d) / max(len(sb_d), 1):.2%} ({len(sb_d)} seeds with sharing)")

    meta_path = Path(args.model) / "meta.json"
    if meta_path.exists():
        m = json.loads(meta_path.read_text())["metrics"]
        for label, e in (("xgboost", m), ("interpolation", m["interpolation"])):
            print(f"held-out {label:13s} RMSE {e['rmse']:.4f} (job0 {e['rmse_job0']:.4f}, job1 {e['rmse_job1']:.4f}), "
                  f"in [1.4, 1.6] {e['rmse_band']:.4f} (n={e['rows_band']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
