"""Run the reproduction experiments' replays (no Prefect, no MLflow) on a Dask LocalCluster and print
our results beside the papers' tables and the load sweep (Castor Fig. 16 / SJF-BSBF Fig. 6a), with
the wall time.

    python benchmarks/reproduce_papers.py [--workers 2] [--loads 1.0] [castor-pollux sjf-bsbf-pollux ...]

Default configs: the Philly set-ups with the trace's own durations (castor-philly, sjf-bsbf-philly,
castor-itp) and the papers' Pollux-method workloads (castor-pollux, sjf-bsbf-pollux,
sjf-bsbf-pollux-480).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import pandas as pd

DEFAULT = ["castor-philly", "sjf-bsbf-philly", "castor-itp", "castor-pollux", "sjf-bsbf-pollux", "sjf-bsbf-pollux-480"]


def run_spec(spec) -> tuple[float, str, pd.DataFrame, float]:
    """One replay (on a Dask worker): (load, label, job table, wall seconds)."""
    from schedlab.tasks.replay import execute

    started = time.perf_counter()
    result, _ = execute(spec)
    return spec.load, spec.label, result.jobs[["num_gpus", "jct_s", "wait_s"]], time.perf_counter() - started


def main() -> None:
    from dask.distributed import Client, LocalCluster

    from schedlab.sched.reproduce import HOUR, compare, tables_for_experiment
    from schedlab.tasks.config import load_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=DEFAULT)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loads", type=float, nargs="+", help="only these load factors (default: the configs')")
    args = parser.parse_args()
    pd.set_option("display.width", 200, "display.max_columns", 20, "display.precision", 2)
    started = time.perf_counter()
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        for name in args.configs:
            config = load_config(name)
            specs = [s for s in config.grid("reproduce") if not args.loads or s.load in args.loads]
            t0 = time.perf_counter()
            jobs: dict[tuple[float, str], list[pd.DataFrame]] = defaultdict(list)
            walls: dict[str, list[float]] = defaultdict(list)
            for load, label, table, wall in client.gather(client.map(run_spec, specs, pure=False)):
                jobs[(load, label)].append(table)
                walls[label].append(wall)
            print(f"\n=== {name}: {config.description} (seeds {config.seeds}, interference"
                  f" {config.models.interference}); {len(specs)} replays in {time.perf_counter() - t0:.0f} s")
            print("mean wall s per replay: " + ", ".join(f"{k} {sum(v) / len(v):.1f}" for k, v in walls.items()))
            sweep = pd.DataFrame(
                {load: {label: sum(j["jct_s"].mean() for j in js) / len(js) / HOUR
                        for (l, label), js in jobs.items() if l == load}
                 for load in sorted({l for l, _ in jobs})}
            )
            print("average JCT (hours) by load factor:")
            print(sweep.round(2).to_string())
            for table_name, spec in tables_for_experiment(name).items():
                at_load = {label: js for (l, label), js in jobs.items() if l == spec["load"]}
                if at_load:
                    print(f"\n{table_name} at load {spec['load']} (hours; large = more than {spec['large_job_gpus']}"
                          f" GPUs; class average: {spec['class_average']}):")
                    print(compare(table_name, at_load).round(2).to_string())
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
