"""Replay speed: the full Philly trace on ``philly-512`` through every baseline, at 10k / 40k / all jobs.

Each (policy, size) runs in a fresh subprocess so its peak memory (max RSS, including Python, pandas
and the loaded trace) is its own. Prints jobs/s, replay seconds, peak MB and the growth ratio.

    python -m schedlab.benchmarks.replay_speed [--trace PATH] [--policy fifo sjf …] [--sizes 10000 40000 0]
"""

from __future__ import annotations

import argparse
import json
import time

from schedlab.benchmarks.common import DEFAULT_TRACE, peak_mb, require_trace, run_isolated


def one(trace: str, policy: str, size: int, cluster: str) -> dict:
    from schedlab.sched.replay import ReplaySpec, prepare, run

    spec = ReplaySpec(trace=trace, format="philly", options={"max_jobs": size or None, "max_gpus": 512},
                      cluster=cluster, policies=[policy])
    prepared = prepare(spec)
    table = prepared.table
    started = time.perf_counter()
    [result] = run(spec, prepared)
    seconds = time.perf_counter() - started
    return {
        "policy": policy,
        "jobs": len(table),
        "seconds": seconds,
        "jobs_per_s": len(table) / seconds,
        "peak_mb": peak_mb(),
        "avg_jct_s": result.summary["avg_jct_s"],
        "passes": result.summary["scheduling_passes"],
    }


def main() -> None:
    from schedlab.sched.policies import BASELINES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--cluster", default="philly-512")
    parser.add_argument("--policy", nargs="+", default=list(BASELINES))
    parser.add_argument("--sizes", nargs="+", type=int, default=[10_000, 40_000, 0], help="0 = all jobs")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.trace, args.policy[0], args.sizes[0], args.cluster)))
        return
    require_trace(args.trace)
    print(f"trace {args.trace} on {args.cluster}")
    print(f"{'policy':10s} {'jobs':>7s} {'seconds':>8s} {'jobs/s':>9s} {'peak MB':>8s} {'s per 1k jobs':>13s}")
    for policy in args.policy:
        for size in args.sizes:
            r = run_isolated(__spec__.name, ["--trace", args.trace, "--cluster", args.cluster, "--policy", policy,
                                        "--sizes", str(size)])
            print(f"{policy:10s} {r['jobs']:7d} {r['seconds']:8.2f} {r['jobs_per_s']:9.0f} {r['peak_mb']:8.0f}"
                  f" {1000 * r['seconds'] / r['jobs']:13.3f}", flush=True)


if __name__ == "__main__":
    main()
