"""Sharing replay speed: the full Philly trace on ``philly-512`` through the GPU-sharing policies.

The trace is loaded as in ``replay_speed.py`` (``LoadOptions(max_gpus=512)``) and given workloads with
``annotate(table, seed=0)`` (not timed); ξ comes from the replay's default source (``analytic``;
``castor`` decides on its own predictor, the shipped XGBoost model). ``gavel`` replays only the first
10,000 jobs (``--gavel-jobs``): it is round-based (a pass every 6-minute round, an LP re-solve at most
every 1,920 s) and is far slower per job than the event-driven policies.

Each policy runs in a fresh subprocess (peak memory is its own: max RSS including Python, pandas and
the loaded trace). Printed per policy: jobs, replay seconds (engine plus the job table and summary,
as in ``replay_speed.py``), jobs/s, peak MB, and two latencies measured by wrapping the policy
instance's ``schedule`` with a timer:

- **decision**: over the passes that started at least one job, a pass's wall time divided by the
  jobs it started, counted once per started job (so the mean is the time of those passes over the
  jobs they started); mean and p99, in microseconds. Restarts (gavel, gandiva) count as starts.
- **pass**: every ``schedule`` call, whether or not it started anything; mean and p99.

    python -m schedlab.benchmarks.sharing_speed [--trace PATH] [--policy sjf-bsbf castor …] [--gavel-jobs 10000]
"""

from __future__ import annotations

import argparse
import json
import time
from array import array

from schedlab.benchmarks.common import DEFAULT_TRACE, peak_mb, require_trace, run_isolated

POLICIES = ["sjf-ffs", "sjf-bsbf", "castor", "lucid", "gandiva", "gavel"]
ROUND_BASED = {"gavel"}


def _percentile(values, q: float) -> float:
    import numpy as np

    return float(np.percentile(np.frombuffer(values, dtype=float), q)) if len(values) else float("nan")


def instrument():
    """Make every policy that ``replay`` builds time its ``schedule`` calls; count engine starts.
    Returns the ``(decisions, passes)`` arrays (seconds) the replay fills."""
    import schedlab.sched.parts as parts_module  # the one module that makes each replay's policies
    from schedlab.sched.core.engine import Engine

    decisions, passes = array("d"), array("d")
    starts = [0]
    engine_start = Engine.start

    def counting_start(self, *args, **kwargs):
        ok = engine_start(self, *args, **kwargs)
        starts[0] += ok
        return ok

    make_policy = parts_module.make_policy

    def make_timed_policy(name, params=None, **kwargs):  # kwargs: make_policy's source=
        policy = make_policy(name, params, **kwargs)
        schedule = policy.schedule  # the bound method
        clock = time.perf_counter

        def timed_schedule(engine) -> None:
            before = starts[0]
            t0 = clock()
            schedule(engine)
            elapsed = clock() - t0
            passes.append(elapsed)
            started = starts[0] - before
            if started:
                decisions.extend([elapsed / started] * started)

        policy.schedule = timed_schedule  # the engine calls policy.schedule(engine)
        return policy

    Engine.start = counting_start
    parts_module.make_policy = make_timed_policy
    return decisions, passes


def one(trace: str, policy: str, max_jobs: int, cluster: str) -> dict:
    from schedlab.sched.models.annotate import annotate
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.traces import LoadOptions, load_trace

    table, _ = load_trace(trace, "philly", LoadOptions(max_jobs=max_jobs or None, max_gpus=512))
    table = annotate(table, seed=0)
    spec = ReplaySpec(cluster=cluster, policies=[policy])
    prepared = prepare(spec, table)
    decisions, passes = instrument()
    started = time.perf_counter()
    [result] = run(spec, prepared)
    seconds = time.perf_counter() - started
    summary = result.summary
    return {
        "policy": policy,
        "jobs": len(table),
        "seconds": seconds,
        "jobs_per_s": len(table) / seconds,
        "peak_mb": peak_mb(),
        "decisions": len(decisions),
        "decision_mean_us": 1e6 * sum(decisions) / len(decisions) if decisions else float("nan"),
        "decision_p99_us": 1e6 * _percentile(decisions, 99),
        "passes": len(passes),
        "pass_mean_us": 1e6 * sum(passes) / len(passes) if passes else float("nan"),
        "pass_p99_us": 1e6 * _percentile(passes, 99),
        "schedule_s": sum(passes),
        "avg_jct_s": summary["avg_jct_s"],
        "shared_job_fraction": summary["shared_job_fraction"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--cluster", default="philly-512")
    parser.add_argument("--policy", nargs="+", default=POLICIES)
    parser.add_argument("--jobs", type=int, default=0, help="first N jobs for every policy (0 = all)")
    parser.add_argument("--gavel-jobs", type=int, default=10_000, help="first N jobs for gavel (0 = all)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.trace, args.policy[0], args.jobs, args.cluster)))
        return
    require_trace(args.trace)
    print(f"trace {args.trace} on {args.cluster} (workloads: annotate seed 0; ξ: analytic)")
    print(f"{'policy':9s} {'jobs':>6s} {'seconds':>8s} {'jobs/s':>7s} {'peak MB':>7s}"
          f" {'decisions':>9s} {'dec mean us':>11s} {'dec p99 us':>10s} {'passes':>7s} {'pass mean us':>12s}"
          f" {'pass p99 us':>11s} {'shared':>6s}")
    for policy in args.policy:
        jobs = args.gavel_jobs if policy in ROUND_BASED and not args.jobs else args.jobs
        r = run_isolated(__spec__.name, ["--trace", args.trace, "--cluster", args.cluster, "--policy", policy,
                                    "--jobs", str(jobs)])
        note = "  (round-based: first jobs only)" if policy in ROUND_BASED and jobs else ""
        print(f"{policy:9s} {r['jobs']:6d} {r['seconds']:8.2f} {r['jobs_per_s']:7.0f} {r['peak_mb']:7.0f}"
              f" {r['decisions']:9d} {r['decision_mean_us']:11.1f} {r['decision_p99_us']:10.1f} {r['passes']:7d}"
              f" {r['pass_mean_us']:12.1f} {r['pass_p99_us']:11.1f} {r['shared_job_fraction']:6.2f}{note}", flush=True)


if __name__ == "__main__":
    main()
