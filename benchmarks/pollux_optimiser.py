"""Our pollux optimiser (``pollux.optimiser.solve``) against a genetic algorithm like the study's
(``pollux.genetic.GeneticSolver``: population 100, 100 generations) on states recorded from a pollux
replay of a study workload (docs/explanation/pollux.md): objective ratio (ours / GA; >= 1 means we reach at
least the GA's value) and solve times.

    python -m schedlab.benchmarks.pollux_optimiser [--data PATH/profiles/pollux] [--workload 6]
        [--load 1.0] [--states 20] [--population 100] [--generations 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from schedlab.benchmarks.common import DATA

DEFAULT_DATA = DATA / "profiles" / "pollux"
FOLDERS = {0.5: "workloads-0.5", 1.0: "workloads", 1.5: "workloads-1.5", 2.0: "workloads-2.0"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.environ.get("SCHEDLAB_POLLUX_DATA") or str(DEFAULT_DATA))
    parser.add_argument("--workload", type=int, default=6)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--states", type=int, default=20, help="recorded states compared (evenly spaced)")
    parser.add_argument("--population", type=int, default=100)
    parser.add_argument("--generations", type=int, default=100)
    args = parser.parse_args()
    if not (Path(args.data) / "traces").is_dir():
        sys.exit(f"Pollux data not found: {args.data} (pass --data)")
    if args.load not in FOLDERS or not 1 <= args.workload <= 8:
        sys.exit(f"--load must be among {sorted(FOLDERS)} and --workload in 1-8")

    from schedlab.sched.core.cluster import ClusterState, load_cluster
    from schedlab.sched.core.engine import Engine
    from schedlab.sched.models.goodput import load_applications
    from schedlab.sched.core.job import jobs_from_table
    from schedlab.sched.policies import make_policy
    from schedlab.sched.policies.pollux.genetic import GeneticSolver
    from schedlab.sched.policies.pollux.optimiser import solve
    from schedlab.sched.policies.pollux.problem import Problem
    from schedlab.sched.replay import ReplaySpec, prepare

    path = Path(args.data) / FOLDERS[args.load] / f"workload-{args.workload}.csv"
    cluster = load_cluster("16x4:t4")
    spec = ReplaySpec(trace=str(path), format="pollux", cluster=cluster, policies=["pollux"], goodput_root=args.data)
    prepared = prepare(spec).table
    policy = make_policy("pollux")
    policy.recorded = []  # the optimiser's problems, which a replay through run() would not hand back
    Engine(jobs_from_table(prepared, load_applications(args.data)), ClusterState(cluster), policy).run()
    states = [p for p in policy.recorded if len(p.jobs) >= 2]
    step = max(1, len(states) // args.states)
    chosen = states[::step][: args.states]
    print(f"{len(policy.recorded)} rounds recorded, {len(states)} with >= 2 jobs; comparing {len(chosen)}")
    print(" jobs   ours objective    GA objective   ratio   ours ms     GA s")
    ratios, ours_t, ga_t = [], [], []
    for k, recorded in enumerate(chosen):
        fresh = lambda: Problem(recorded.jobs, recorded.nodes, recorded.gpus_per_node,  # noqa: E731
                                recorded.max_nodes_per_job, recorded.scale)
        problem = fresh()
        start = time.perf_counter()
        ours = problem.value(solve(problem))
        ours_t.append(time.perf_counter() - start)
        problem = fresh()
        start = time.perf_counter()
        ga = problem.value(GeneticSolver(args.population, args.generations, seed=k).solve(problem))
        ga_t.append(time.perf_counter() - start)
        ratios.append(ours / ga)
        print(f"{len(recorded.jobs):5d} {ours:16.6f} {ga:15.6f} {ratios[-1]:7.4f} {ours_t[-1] * 1e3:9.1f} {ga_t[-1]:8.2f}")
    print(f"ratio ours/GA: min {min(ratios):.4f}, median {statistics.median(ratios):.4f},"
          f" mean {sum(ratios) / len(ratios):.4f};"
          f" states where ours >= GA: {sum(r >= 1 - 1e-12 for r in ratios)}/{len(ratios)}")
    print(f"solve time: ours mean {sum(ours_t) / len(ours_t) * 1e3:.1f} ms (max {max(ours_t) * 1e3:.1f}),"
          f" GA mean {sum(ga_t) / len(ga_t):.2f} s")


if __name__ == "__main__":
    main()
