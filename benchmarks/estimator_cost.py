"""What duration estimates cost: a Philly replay (default 5,000 jobs on ``philly-512``) of ``sjf`` under the
oracle and under each estimator (``docs/estimates.md``), CPU seconds of the replay alone (trace loaded and
prepared once, outside the measurement), each repeated ``--repeat`` times in its own fresh process.
Prints the fastest and the median of the repeats and the ratio to the oracle's fastest; the learned
estimator's own fit time and xgboost's import (once per process, before the replay: not in its figure). On a shared machine the spread is noise: compare the fastest runs.

The processed Philly trace has no users or job names, so ``history`` answers every job with the mean
of the jobs ended so far and ``learned`` fits on GPUs and submit hour only; the work per job is the same
with names (a few dictionary updates per ended job).

    python -m schedlab.benchmarks.estimator_cost [--trace PATH] [--jobs 5000] [--repeat 3] [--policy sjf]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from schedlab.benchmarks.common import DEFAULT_TRACE, require_trace, run_isolated

KNOWLEDGE = {
    "oracle": {},
    "history": {"knowledge": "estimate", "estimator": "history"},
    "requested": {"knowledge": "estimate", "estimator": "requested"},
    "noisy": {"knowledge": "estimate", "estimator": "noisy", "sigma": 0.5},
    "learned": {"knowledge": "estimate", "estimator": "learned"},
}


def one(trace: str, jobs: int, cluster: str, policy: str, knowledge: str) -> dict:
    from schedlab.sched.replay import ReplaySpec, prepare, run

    spec = ReplaySpec(trace=trace, format="philly", options={"max_jobs": jobs or None, "max_gpus": 512},
                      cluster=cluster, policies=[{"name": policy, "params": KNOWLEDGE[knowledge]}])
    prepared = prepare(spec)
    started = time.process_time()
    if knowledge == "learned":  # once per worker process: measured apart from the replay
        import xgboost  # noqa: F401
    imported = time.process_time() - started
    started = time.process_time()
    [result] = run(spec, prepared)
    return {"jobs": len(prepared.table), "cpu_s": time.process_time() - started, "import_cpu_s": imported,
            "avg_jct_s": result.summary["avg_jct_s"],
            "fit_cpu_s": result.summary.get("learned_fit_cpu_s", 0.0),
            "fits": result.summary.get("learned_fits", 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--cluster", default="philly-512")
    parser.add_argument("--jobs", type=int, default=5000, help="first N jobs (0 = all)")
    parser.add_argument("--policy", default="sjf")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--knowledge", nargs="+", choices=list(KNOWLEDGE), default=list(KNOWLEDGE))
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.trace, args.jobs, args.cluster, args.policy, args.knowledge[0])))
        return
    require_trace(args.trace)
    print(f"{args.policy} on {args.cluster}, {args.trace}, first {args.jobs or 'all'} jobs; CPU s of the replay,"
          f" {args.repeat} runs each")
    print(f"{'knowledge':10s} {'fastest':>8s} {'median':>8s} {'x oracle':>9s} {'avg JCT s':>11s} {'fits':>5s}"
          f" {'fit CPU s':>9s} {'import s':>8s}")
    base = None
    for knowledge in args.knowledge:
        runs = [run_isolated(__spec__.name, ["--trace", args.trace, "--cluster", args.cluster, "--jobs", str(args.jobs),
                                        "--policy", args.policy, "--knowledge", knowledge])
                for _ in range(args.repeat)]
        cpu = [r["cpu_s"] for r in runs]
        fastest = min(cpu)
        base = fastest if knowledge == "oracle" else base
        ratio = f"{fastest / base:9.2f}" if base else f"{'':9s}"
        print(f"{knowledge:10s} {fastest:8.2f} {statistics.median(cpu):8.2f} {ratio} {runs[0]['avg_jct_s']:11.0f}"
              f" {runs[0]['fits']:5d} {min(r['fit_cpu_s'] for r in runs):9.2f}"
              f" {min(r['import_cpu_s'] for r in runs):8.2f}", flush=True)


if __name__ == "__main__":
    main()
