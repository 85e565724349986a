"""Scale: how load + replay time and peak memory grow with the trace (100k / 1M / 10M jobs).

Synthetic Philly-like traces (``fmt=synthetic``, seed 0, sized for ``philly-512``) are written once
as canonical CSV under ``--dir`` (default ``/tmp/schedlab-scale``; 10M jobs is ~400 MB). Each
measurement runs in a fresh subprocess (peak memory is its own: max RSS, including Python and
pandas) and prints: jobs, load seconds, replay seconds (engine, job table and summary), jobs/s over
load + replay, and peak MB. ``--head N`` also loads only the first N jobs of each file
(``--max-jobs N``), which shows whether the loader reads only what it needs.

    python -m schedlab.benchmarks.scale [--sizes 100000 1000000 10000000] [--policy fifo] [--head 1000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from schedlab.benchmarks.common import peak_mb, run_isolated


def trace_path(directory: Path, jobs: int) -> Path:
    return directory / f"synthetic-{jobs}.csv"


def generate(directory: Path, jobs: int) -> Path:
    """Write the ``jobs``-job synthetic trace (once; an existing file is reused)."""
    from schedlab.sched.traces import LoadOptions, load_trace

    path = trace_path(directory, jobs)
    if not path.exists():
        table, _ = load_trace(None, "synthetic", LoadOptions(num_jobs=jobs, seed=0, max_gpus=512))
        tmp = path.with_name(f".{path.name}.tmp")
        table.to_csv(tmp, index=False)
        tmp.replace(path)
    return path


def one(path: str, policy: str, cluster: str, head: int) -> dict:
    from schedlab.sched.replay import ReplaySpec, prepare, run

    spec = ReplaySpec(trace=path, format="canonical", options={"max_jobs": head or None, "max_gpus": 512},
                      cluster=cluster, policies=[policy])
    started = time.perf_counter()
    prepared = prepare(spec)
    table = prepared.table
    loaded = time.perf_counter()
    seconds = 0.0
    if not head:
        run(spec, prepared)
        seconds = time.perf_counter() - loaded
    return {"jobs": len(table), "load_s": loaded - started, "replay_s": seconds, "peak_mb": peak_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=int, default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--policy", default="fifo")
    parser.add_argument("--cluster", default="philly-512")
    parser.add_argument("--dir", default="/tmp/schedlab-scale")
    parser.add_argument("--head", type=int, default=1000, help="also load only the first N jobs (0 = skip)")
    parser.add_argument("--one", metavar="TRACE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.policy, args.cluster, args.head)))
        return
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    print(f"synthetic traces in {directory}, {args.policy} on {args.cluster}")
    print(f"{'jobs':>9s} {'mode':>12s} {'load s':>8s} {'replay s':>9s} {'jobs/s':>8s} {'peak MB':>8s}")
    for size in args.sizes:
        path = str(generate(directory, size))
        runs = [("load+replay", 0)] + ([(f"first {args.head}", args.head)] if args.head else [])
        for mode, head in runs:
            r = run_isolated(__spec__.name, [path, "--policy", args.policy, "--cluster", args.cluster,
                                        "--head", str(head)])
            total = r["load_s"] + r["replay_s"]
            rate = f"{r['jobs'] / total:8.0f}" if not head else f"{'':8s}"
            print(f"{size:9d} {mode:>12s} {r['load_s']:8.2f} {r['replay_s']:9.2f} {rate} {r['peak_mb']:8.0f}",
                  flush=True)


if __name__ == "__main__":
    main()
