"""Gimbal replay speed: the full Philly trace on ``philly-512`` through each Gimbal policy (>= 1,000 jobs/s, peak memory < 1 GB, and the cost of one coordination step).

The trace is loaded as in ``sharing_speed.py`` (``LoadOptions(max_gpus=512)``), given workloads with
``annotate(table, seed=0)`` (not timed) and replayed with the share-aware ξ source
``mpscap:gavel:<Gavel's table>`` (docs/explanation/gimbal.md over Gavel's measured pairs; ``--interference``
to change it). ``gimbal-makespan`` wraps the round-based Gavel; it replays the full trace too unless
``--gavel-jobs N`` limits it to the first N jobs.

Each policy runs in a fresh subprocess (peak memory is its own: max RSS including Python, pandas and
the loaded trace). Printed per policy: jobs, replay seconds (engine plus the job table and summary),
jobs/s, the replay's CPU seconds and jobs per CPU second (steadier than wall time on a shared
machine), peak MB, and the wall time of one **coordination step** (the policy's handling of one of
Gimbal's timers: a monitor tick, one iteration of Algorithm 1's search, its end), mean and p99 in
microseconds, timed by wrapping the policy instance's ``on_timer``; the share of the replay's wall
time spent in coordination steps (``coord``) and in the base policy (``base``: its event handlers
and ``schedule``, including the engine calls they make, e.g. starts); plus the number of searches
and the policy's mean search length (simulated seconds, Fig. 15's quantity) from its ``metrics()``.

    python -m schedlab.benchmarks.gimbal_speed [--trace PATH] [--policy gimbal-jct …] [--gavel-jobs N]
"""

from __future__ import annotations

import argparse
import json
import time
from array import array

from schedlab.benchmarks.common import DATA, DEFAULT_TRACE, peak_mb, require_trace, run_isolated

POLICIES = ["gimbal-jct", "gimbal-deadline", "gimbal-makespan"]
ROUND_BASED = {"gimbal-makespan"}
GAVEL_TABLE = DATA / "profiles" / "gavel" / "simulation_throughputs.json"


def _percentile(values, q: float) -> float:
    import numpy as np

    return float(np.percentile(np.frombuffer(values, dtype=float), q)) if len(values) else float("nan")


BASE_HANDLERS = ("on_arrival", "on_finish", "on_epoch", "on_timer", "schedule")


def _time_base(base, spent: list[float], clock) -> None:
    """Wrap the base policy's handlers so that ``spent[0]`` sums their wall time (outermost calls)."""
    depth = [0]

    def timed(method):
        def wrapper(*args):
            depth[0] += 1
            t0 = clock()
            try:
                return method(*args)
            finally:
                depth[0] -= 1
                if not depth[0]:
                    spent[0] += clock() - t0

        return wrapper

    for name in BASE_HANDLERS:
        setattr(base, name, timed(getattr(base, name)))


def instrument() -> tuple[array, list[float]]:
    """Make every policy that ``replay`` builds time its ``on_timer`` calls for Gimbal's own timers
    (payloads tagged by the coordinator) and its base policy's handlers; returns the array (seconds)
    of coordination steps and the one-element list of base seconds the replay fills."""
    import schedlab.sched.parts as parts_module  # the one module that makes each replay's policies
    from schedlab.sched.policies.gimbal.search import TAG

    steps = array("d")
    base_s = [0.0]
    make_policy = parts_module.make_policy
    clock = time.perf_counter

    def make_timed_policy(name, params=None, **kwargs):  # kwargs: make_policy's source=
        policy = make_policy(name, params, **kwargs)
        on_timer = policy.on_timer  # the bound method

        def timed_on_timer(engine, payload) -> None:
            if not (isinstance(payload, tuple) and payload and payload[0] == TAG):
                on_timer(engine, payload)  # the base policy's own timers
                return
            t0 = clock()
            on_timer(engine, payload)
            steps.append(clock() - t0)

        policy.on_timer = timed_on_timer  # the engine calls policy.on_timer(engine, payload)
        if getattr(policy, "base", None) is not None:
            _time_base(policy.base, base_s, clock)
        return policy

    parts_module.make_policy = make_timed_policy
    return steps, base_s


def one(trace: str, policy: str, max_jobs: int, cluster: str, interference: str) -> dict:
    from schedlab.sched.models.annotate import annotate
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.traces import LoadOptions, load_trace

    table, _ = load_trace(trace, "philly", LoadOptions(max_jobs=max_jobs or None, max_gpus=512))
    table = annotate(table, seed=0)
    spec = ReplaySpec(cluster=cluster, policies=[policy], interference=interference)
    prepared = prepare(spec, table)
    steps, base_s = instrument()
    started, cpu_started = time.perf_counter(), time.process_time()
    [result] = run(spec, prepared)
    seconds, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    summary = result.summary
    return {
        "policy": policy, "jobs": len(table), "seconds": seconds, "jobs_per_s": len(table) / seconds,
        "cpu_s": cpu_s, "jobs_per_cpu_s": len(table) / cpu_s,
        "coord_fraction": sum(steps) / seconds, "base_fraction": base_s[0] / seconds,
        "peak_mb": peak_mb(), "steps": len(steps),
        "step_mean_us": 1e6 * sum(steps) / len(steps) if steps else float("nan"),
        "step_p99_us": 1e6 * _percentile(steps, 99),
        "searches": summary.get("gimbal_searches", float("nan")),
        "search_mean_s": summary.get("gimbal_search_mean_s", float("nan")),
        "avg_jct_s": summary["avg_jct_s"], "shared_job_fraction": summary["shared_job_fraction"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--cluster", default="philly-512")
    parser.add_argument("--policy", nargs="+", default=POLICIES)
    parser.add_argument("--interference", default=f"mpscap:gavel:{GAVEL_TABLE}")
    parser.add_argument("--jobs", type=int, default=0, help="first N jobs for every policy (0 = all)")
    parser.add_argument("--gavel-jobs", type=int, default=0, help="first N jobs for gimbal-makespan (0 = all)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.trace, args.policy[0], args.jobs, args.cluster, args.interference)))
        return
    require_trace(args.trace)
    print(f"trace {args.trace} on {args.cluster} (workloads: annotate seed 0; ξ: {args.interference})")
    print(f"{'policy':16s} {'jobs':>6s} {'seconds':>8s} {'jobs/s':>7s} {'cpu s':>7s} {'jobs/cpu-s':>10s}"
          f" {'peak MB':>7s} {'steps':>7s} {'step mean us':>12s} {'step p99 us':>11s} {'coord':>6s} {'base':>6s}"
          f" {'searches':>8s} {'search s':>8s} {'shared':>6s}")
    for policy in args.policy:
        jobs = args.gavel_jobs if policy in ROUND_BASED and not args.jobs else args.jobs
        r = run_isolated(__spec__.name, ["--trace", args.trace, "--cluster", args.cluster, "--policy", policy,
                                    "--jobs", str(jobs), "--interference", args.interference])
        note = "  (round-based base: first jobs only)" if policy in ROUND_BASED and jobs else ""
        print(f"{policy:16s} {r['jobs']:6d} {r['seconds']:8.2f} {r['jobs_per_s']:7.0f} {r['cpu_s']:7.2f}"
              f" {r['jobs_per_cpu_s']:10.0f} {r['peak_mb']:7.0f} {r['steps']:7d} {r['step_mean_us']:12.1f}"
              f" {r['step_p99_us']:11.1f} {r['coord_fraction']:6.1%} {r['base_fraction']:6.1%}"
              f" {r['searches']:8.0f} {r['search_mean_s']:8.1f} {r['shared_job_fraction']:6.2f}{note}", flush=True)


if __name__ == "__main__":
    main()
