"""Run the reproduction experiments' replays serially (no Prefect, no MLflow) and print our results
beside the papers' tables and the load sweep (Castor Fig. 16 / SJF-BSBF Fig. 6a).

    python benchmarks/reproduce_papers.py [castor-philly sjf-bsbf-philly castor-itp]
"""

from __future__ import annotations

import sys
from collections import defaultdict

import pandas as pd

from schedlab.tasks.config import load_config
from schedlab.sched.reproduce import HOUR, compare, tables_for_experiment
from schedlab.tasks.replay import execute


def main(names: list[str]) -> None:
    pd.set_option("display.width", 200, "display.max_columns", 20, "display.precision", 2)
    for name in names:
        config = load_config(name)
        jobs: dict[tuple[float, str], list[pd.DataFrame]] = defaultdict(list)
        for spec in config.grid("reproduce"):
            result, _ = execute(spec)
            jobs[(spec.load, spec.label)].append(result.jobs)
        print(f"\n=== {name}: {config.description} (seeds {config.seeds}, interference {config.models.interference})")
        sweep = pd.DataFrame(
            {load: {label: sum(j["jct_s"].mean() for j in js) / len(js) / HOUR
                    for (l, label), js in jobs.items() if l == load}
             for load in sorted({l for l, _ in jobs})}
        )
        print("average JCT (hours) by load factor:")
        print(sweep.round(2).to_string())
        for table_name, spec in tables_for_experiment(name).items():
            at_load = {label: js for (l, label), js in jobs.items() if l == spec["load"]}
            print(f"\n{table_name} at load {spec['load']} (hours; large = more than {spec['large_job_gpus']} GPUs):")
            print(compare(table_name, at_load).round(2).to_string())


if __name__ == "__main__":
    main(sys.argv[1:] or ["castor-philly", "sjf-bsbf-philly", "castor-itp"])
