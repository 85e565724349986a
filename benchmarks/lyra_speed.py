"""Lyra's speed figures (docs/explanation/lyra.md): the MCKP DP on the paper's largest instance
(354 items, 245 GPUs; target <= 20 ms), and full 15-day Philly replays (target >= 2,000 jobs/s, peak
memory < 1 GB): ``lyra`` with elastic scaling only, and Table 5's set-up *with loaning* — ``lyra``
(loaning + scaling) and ``opportunistic`` — on the calibrated cluster plus an inference pool.

The set-up (shared with the Lyra digest tests, ``tests/test_digests_lyra.py``; tell whoever reproduces Table 5 to use the same):

- trace: the busiest 15 days of Philly (from day 40, 23,437 jobs after dropping jobs > 672 GPUs),
  ``lyra_scenario(table, "basic", seed=0)``;
- cluster ``lyra-sim``: the calibrated training pool, 84 x 8 V100 (FIFO: training usage 0.71, mean
  queueing 3,303 s; Table 5 row 1: 0.72, 3,072 s), plus an inference pool of 99 x 8 T4 — the paper's
  inference:training server ratio 520 / 443 = 1.174 (docs/explanation/lyra.md), 84 x 1.174 = 98.6 -> 99;
- inference load: ServeGen ``m-small`` request rates mapped to occupancy as docs/explanation/lyra.md
  recommends (``sched/models/inference.py``: zero windows filled, 1st/99th percentile -> 0.42/0.95, 14 days
  tiled), oracle predictor, 2 % headroom (2 servers), 5-minute orchestrator, reclaim ``lyra``.

Every replay runs in a fresh interpreter (``common.run_isolated``), so its peak resident memory
(``ru_maxrss``: interpreter, pandas and the trace included) is its own; the replay's wall and CPU
(``process_time``: less sensitive to a shared, loaded machine) times exclude loading the trace.

    python -m schedlab.benchmarks.lyra_speed [--trace PATH] [--inference PATH] [--only loaning|scaling|mckp]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from schedlab.benchmarks.common import DATA, DEFAULT_TRACE, peak_mb, require_trace, run_isolated

WINDOW_START_S = 3_456_000.0  # the busiest 15 days of the Philly trace (day 40): 23,437 jobs
TRAINING_SERVERS = 84  # calibrated: FIFO training usage 0.71, mean queueing 3,303 s (Table 5: 0.72, 3,072 s)
INFERENCE_SERVERS = 99  # 84 x 520 / 443 (Lyra §7.1: 443 training, 520 inference servers), rounded
DEFAULT_INFERENCE = DATA / "inference" / "servegen_total_rate_per_10min.csv"
CASES = {  # name -> (policy, params, with the inference pool)
    "lyra-scaling": ("lyra", None, False),
    "lyra-loaning": ("lyra", None, True),
    "opportunistic": ("opportunistic", None, True),
}


def lyra_sim():
    """The calibrated 84 x 8 V100 training pool plus a 99 x 8 T4 inference pool (module doc)."""
    from schedlab.sched.core.cluster import ClusterSpec, PoolSpec

    return ClusterSpec(name="lyra-sim", pools=[
        PoolSpec(name="training", servers=TRAINING_SERVERS, gpus_per_server=8, gpu_type="v100", gpu_memory_gb=32),
        PoolSpec(name="inference", servers=INFERENCE_SERVERS, gpus_per_server=8, gpu_type="t4", gpu_memory_gb=16)])


def load_table(trace: str):
    from schedlab.sched.models.annotate import lyra_scenario
    from schedlab.sched.traces import LoadOptions, load_trace

    table, _ = load_trace(trace, fmt="philly", options=LoadOptions(
        start=WINDOW_START_S, end=WINDOW_START_S + 15 * 86400, on_oversize="drop",
        max_gpus=TRAINING_SERVERS * 8))
    return lyra_scenario(table, "basic", seed=0)


def run_case(table, case: str, inference_path: str, params: dict | None = None, loan: dict | None = None):
    """Replay ``table`` as ``case`` (CASES) on ``lyra-sim`` (``params`` replace the policy's, ``loan``
    adds LoanOptions fields); returns (result, wall seconds, CPU seconds)."""
    from schedlab.sched.core.pools import LoanOptions
    from schedlab.sched.replay import ReplaySpec, prepare, run

    policy, default_params, loaning = CASES[case]
    cluster = lyra_sim()
    if not loaning:  # the training pool alone
        cluster = cluster.model_copy(update={"pools": cluster.pools[:1]})
    inference = LoanOptions(load=str(inference_path), **(loan or {})) if loaning else None
    spec = ReplaySpec(cluster=cluster, inference=inference, policies=[
        {"name": policy, "params": (params if params is not None else default_params) or {}}])
    prepared = prepare(spec, table)
    started, cpu = time.perf_counter(), time.process_time()
    [result] = run(spec, prepared)
    return result, time.perf_counter() - started, time.process_time() - cpu


def mckp_instance(rng: np.random.Generator, items: int = 354, capacity: int = 245):
    groups, left = [], items
    while left:
        k = int(min(left, rng.integers(1, 17)))
        lo, rem = int(rng.integers(1, 17)), float(rng.uniform(600, 86400))
        w = np.arange(1, k + 1)
        groups.append((w, rem - rem * lo / (lo + w)))
        left -= k
    return groups, capacity


def mckp(repeat: int) -> None:
    from schedlab.sched.policies.lyra.knapsack import solve

    rng = np.random.default_rng(0)
    times = []
    for _ in range(repeat):
        groups, capacity = mckp_instance(rng)
        t0 = time.perf_counter()
        solve(groups, capacity)
        times.append(time.perf_counter() - t0)
    print(f"MCKP DP, 354 items, 245 GPUs: median {np.median(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms"
          f" over {repeat} instances (target <= 20 ms)")


def one(case: str, trace: str, inference_path: str) -> dict:
    table = load_table(trace)
    result, wall, cpu = run_case(table, case, inference_path)
    s = result.summary
    keys = ("loan_ops", "servers_lent", "reclaim_ops", "servers_reclaimed", "reclaim_preemptions", "reclaim_shrinks",
            "scaling_ops", "preemption_ratio", "mckp_max_solve_s", "reclaim_max_solve_s", "reclaim_mean_solve_s")
    return {"case": case, "jobs": len(table), "wall_s": wall, "cpu_s": cpu, "peak_mb": peak_mb(),
            **{k: s[k] for k in keys if k in s}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--inference", default=str(DEFAULT_INFERENCE), help="ServeGen CSV (or any load spec)")
    parser.add_argument("--repeat", type=int, default=50, help="MCKP instances")
    parser.add_argument("--only", choices=("mckp", "scaling", "loaning"))
    parser.add_argument("--one", choices=list(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.trace, args.inference)))
        return
    if args.only in (None, "mckp"):
        mckp(args.repeat)
    if args.only == "mckp":
        return
    require_trace(args.trace)
    cases = {"scaling": ["lyra-scaling"], "loaning": ["lyra-loaning", "opportunistic"]}.get(args.only, list(CASES))
    for case in cases:
        r = run_isolated(__spec__.name, [case, "--trace", args.trace, "--inference", args.inference])
        ops = ", ".join(f"{k} {r[k]}" for k in ("loan_ops", "reclaim_ops", "servers_reclaimed", "reclaim_preemptions",
                                                "reclaim_shrinks", "scaling_ops") if k in r)
        solve = f"MCKP max {r['mckp_max_solve_s'] * 1e3:.2f} ms" if "mckp_max_solve_s" in r else ""
        if "reclaim_max_solve_s" in r:
            solve += f", reclaim mean {r['reclaim_mean_solve_s'] * 1e3:.2f} / max {r['reclaim_max_solve_s'] * 1e3:.2f} ms"
        print(f"15-day Philly, {case:<14} {r['jobs']} jobs: {r['wall_s']:.1f} s, {r['jobs'] / r['wall_s']:.0f} jobs/s"
              f" (target >= 2,000; CPU {r['cpu_s']:.1f} s, {r['jobs'] / r['cpu_s']:.0f} jobs/CPU-s), peak RSS"
              f" {r['peak_mb']:.0f} MB (target < 1 GB); {ops}; {solve}", flush=True)


if __name__ == "__main__":
    main()
