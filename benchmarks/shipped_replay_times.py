"""How long the shipped paper set-ups' replays take: the figure a per-replay time limit is chosen from.

Each replay of the chosen configs (``conf/experiments/``; one seed, the labels given) runs in this
process through the experiment's own ``execute`` (no Prefect, no MLflow), one after the other; per
replay: CPU seconds (user + system), wall seconds, jobs. The configs read the development data beside the
repository. Measured on the shared 2-core development machine (load average 1-2; seed 0, load 1): pollux on
lyra-scaling 604 CPU s / 605 s wall, AFS there 89 s, every other shipped replay 41 s or less (showdown's
pollux, at its own load 4) — the default time limit (``sched/contained.py``) is 12 x the longest.

    python -m schedlab.benchmarks.shipped_replay_times lyra-scaling --labels pollux afs [--seed 0] [--load 1.0]
"""

from __future__ import annotations

import argparse
import resource
import time


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--labels", nargs="*", help="only these policies' replays (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", type=float, help="only this load (default: every load)")
    args = parser.parse_args()

    from schedlab.sched.spec.experiment_file import load_config
    from schedlab.tasks.replay import execute

    print(f"{'config':<22} {'policy':<20} {'load':>5} {'jobs':>7} {'CPU s':>8} {'wall s':>8}", flush=True)
    for name in args.configs:
        config = load_config(name, [args.seed])
        for spec in config.grid("benchmark"):
            if args.labels and spec.label not in args.labels or args.load is not None and spec.load != args.load:
                continue
            cpu, wall = cpu_s(), time.perf_counter()
            result, _ = execute(spec)
            print(f"{name:<22} {spec.label:<20} {spec.load:>5g} {len(result.jobs):>7,} {cpu_s() - cpu:>8.1f}"
                  f" {time.perf_counter() - wall:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
