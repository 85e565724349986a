"""Lyra's speed figures (specs/lyra.md §5 of issue #11): the MCKP DP on the paper's largest instance
(354 items, 245 GPUs; target <= 20 ms), a full 15-day Philly replay with elastic scaling (target >=
2,000 jobs/s) and its peak Python memory (target < 1 GB). Prints the figures.

    python benchmarks/lyra_speed.py [--trace ../shared/data/traces/philly/philly_jobs_pollux.csv]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
from schedlab.sched.annotate import lyra_scenario
from schedlab.sched.mckp import solve
from schedlab.sched.replay import replay
from schedlab.sched.traces import LoadOptions, load_trace

WINDOW_START_S = 3_456_000.0  # the busiest 15 days of the Philly trace (day 40): 23,437 jobs
CLUSTER = "84x8"  # calibrated so that FIFO has training usage 0.71 and mean queueing 3,303 s (Table 5: 0.72, 3,072 s)


def mckp_instance(rng: np.random.Generator, items: int = 354, capacity: int = 245):
    groups, left = [], items
    while left:
        k = int(min(left, rng.integers(1, 17)))
        lo, rem = int(rng.integers(1, 17)), float(rng.uniform(600, 86400))
        w = np.arange(1, k + 1)
        groups.append((w, rem - rem * lo / (lo + w)))
        left -= k
    return groups, capacity


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default="../shared/data/traces/philly/philly_jobs_pollux.csv")
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    times = []
    for _ in range(args.repeat):
        groups, capacity = mckp_instance(rng)
        t0 = time.perf_counter()
        solve(groups, capacity)
        times.append(time.perf_counter() - t0)
    print(f"MCKP DP, 354 items, 245 GPUs: median {np.median(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms"
          f" over {args.repeat} instances (target <= 20 ms)")
    table, _ = load_trace(args.trace, fmt="philly", options=LoadOptions(
        start=WINDOW_START_S, end=WINDOW_START_S + 15 * 86400, on_oversize="drop", max_gpus=672))
    table = lyra_scenario(table, "basic", seed=0)
    tracemalloc.start()
    t0 = time.perf_counter()
    result = replay(table, CLUSTER, "lyra")
    wall = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    s = result.summary
    print(f"15-day Philly replay, lyra (scaling), {len(table)} jobs on {CLUSTER}: {wall:.1f} s,"
          f" {len(table) / wall:.0f} jobs/s (target >= 2,000; tracemalloc slows it), peak traced memory"
          f" {peak / 2**20:.0f} MiB (target < 1 GiB); {s['scaling_ops']} scaling ops,"
          f" MCKP max {s['mckp_max_solve_s'] * 1e3:.2f} ms")
    t0 = time.perf_counter()
    replay(table, CLUSTER, "lyra")
    wall = time.perf_counter() - t0
    print(f"same replay without tracemalloc: {wall:.1f} s, {len(table) / wall:.0f} jobs/s")


if __name__ == "__main__":
    main()
