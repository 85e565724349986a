"""Experiment fan-out speed and the per-replay cost of Prefect + MLflow.

12 replays (6 baseline policies x 2 seeds) of a 10,000-job synthetic trace on castor-sim, run as an
``experiment`` twice: on a 1-worker LocalCluster (serial: one replay after the other, through the
same Prefect task, MLflow logging and plots) and on a 2-worker LocalCluster. Prints

* the flow's wall time in each case (from the flow's start to its end: the replays, their logging,
  the comparison) and the ratio parallel / serial (target <= 0.65);
* the per-replay overhead of Prefect plus MLflow logging: (serial flow wall - the replays' own
  compute, trace loading included) / 12 (target < 1.5 s);
* the fixed start-up (Prefect API, LocalCluster) outside the flow, for information.

    python -m schedlab.benchmarks.experiment_overhead [--jobs 10000] [--home DIR]

Each run uses a fresh experiment name, so nothing is skipped as already logged.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

POLICIES = ["fifo", "sjf", "ssf", "srtf", "tiresias", "backfill"]


def write_config(folder: Path, name: str, jobs: int) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nbaseline: fifo\nseeds: [0, 1]\n"
        f"traces: [{{name: synthetic, format: synthetic, options: {{num_jobs: {jobs}, load: 2.0}}}}]\n"
        f"clusters: [castor-sim]\npolicies: [{', '.join(POLICIES)}]\n"
    )
    return path


def run(folder: Path, name: str, jobs: int, workers: int) -> dict:
    from schedlab.flows.experiment import run_experiment
    from schedlab.tasks import tracking

    path = write_config(folder, name, jobs)
    started = time.perf_counter()
    report = run_experiment(path, workers=workers, home=folder)
    total = time.perf_counter() - started
    assert not report["failures"], report["failures"]
    client = tracking.client(report["tracking_uri"])
    runs = [r for r in client.search_runs([report["experiment_id"]], max_results=100)
            if r.data.tags.get("schedlab.kind") == "replay"]
    assert len(runs) == 12, len(runs)
    compute = sum(r.data.metrics["replay_wall_s"] for r in runs)
    return {"flow_s": report["experiment_wall_s"], "total_s": total, "compute_s": compute}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--home", help="SCHEDLAB_HOME for the benchmark (default: a temporary folder)")
    args = parser.parse_args()
    home = Path(args.home or tempfile.mkdtemp(prefix="schedlab-bench-"))
    os.environ["SCHEDLAB_HOME"] = str(home)
    os.environ.setdefault("SCHEDLAB_CODE_VERSION", "benchmark")
    from schedlab.settings import Settings

    Settings.from_env().apply().prefect_ready()  # this entry point's settings, before prefect is imported
    stamp = time.strftime("%Y%m%d-%H%M%S")
    serial = run(home, f"bench-serial-{stamp}", args.jobs, workers=1)
    parallel = run(home, f"bench-parallel-{stamp}", args.jobs, workers=2)
    overhead = (serial["flow_s"] - serial["compute_s"]) / 12
    print(f"\n12 replays of a {args.jobs:,}-job synthetic trace on castor-sim ({os.cpu_count()} CPUs here)")
    print(f"  replay compute (trace load + replay), sum of 12: {serial['compute_s']:.2f} s")
    print(f"  serial   (1-worker LocalCluster): flow {serial['flow_s']:.2f} s, end to end {serial['total_s']:.2f} s")
    print(f"  parallel (2-worker LocalCluster): flow {parallel['flow_s']:.2f} s, end to end {parallel['total_s']:.2f} s")
    print(f"  parallel / serial (flow): {parallel['flow_s'] / serial['flow_s']:.3f}  (target <= 0.65)")
    print(f"  per-replay overhead of Prefect + MLflow logging: {overhead:.3f} s  (target < 1.5 s)")
    print(f"  start-up outside the flow (Prefect API, LocalCluster): serial {serial['total_s'] - serial['flow_s']:.1f} s,"
          f" parallel {parallel['total_s'] - parallel['flow_s']:.1f} s")
    print(f"data: {home}")


if __name__ == "__main__":
    main()
