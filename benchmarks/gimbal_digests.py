"""Did a Gimbal speed change alter any result? Job tables of each Gimbal policy, compared by hash.

Two set-ups: the first ``--jobs`` annotated Philly jobs on ``philly-512`` (as in
``gimbal_speed.py``; ``gimbal-makespan`` on ``--gavel-jobs``) and the ``gimbal`` cluster set-up of
``conf/experiments/gimbal-jct.yaml`` (Philly-150 from day 50, Gimbal's annotation scheme, seed 0).
``--record DIR`` writes ``DIR/digests.json`` (SHA-256 of each job table, floats via ``repr``, and of
the summary without wall-clock fields); ``--check DIR`` replays again and exits 1 on any difference.

    python benchmarks/gimbal_digests.py --record /tmp/before
    python benchmarks/gimbal_digests.py --check /tmp/before
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import DEFAULT_TRACE, require_trace
from gimbal_speed import GAVEL_TABLE, POLICIES, ROUND_BASED
from result_digests import summary_digest, table_digest, write_digests

TIMING_FIELDS = ("lp_solve_mean_s", "lp_solve_p99_s", "load_wall_s", "gimbal_step_mean_us", "gimbal_step_p99_us")
SETUP_150 = {"start": 4320000, "max_jobs": 150}
ANNOTATE_150 = {"scheme": "gimbal", "max_duration_s": 3600, "duration_scale": 0.5}


def digests(result) -> dict[str, str]:
    summary = summary_digest(result.summary, lambda k: k in TIMING_FIELDS or k.endswith("wall_s"))
    return {"table": table_digest(result.jobs), "summary": summary}


def run_all(trace: str, policies: list[str], jobs: int, gavel_jobs: int) -> dict[str, dict[str, str]]:
    from schedlab.sched.models.annotate import annotate
    from schedlab.sched.core.cluster import load_cluster
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.traces import LoadOptions, load_trace

    interference = f"mpscap:gavel:{GAVEL_TABLE}"
    out: dict[str, dict[str, str]] = {}
    for policy in policies:
        n = gavel_jobs if policy in ROUND_BASED else jobs
        table, _ = load_trace(trace, "philly", LoadOptions(max_jobs=n, max_gpus=512))
        spec = ReplaySpec(cluster="philly-512", policies=[policy], interference=interference)
        [result] = run(spec, prepare(spec, annotate(table, seed=0)))
        out[f"philly-512/{n}/{policy}"] = digests(result)
        cluster = load_cluster("gimbal")
        gpus = cluster.training_pool.servers * cluster.training_pool.gpus_per_server
        spec = ReplaySpec(trace=trace, format="philly", options=LoadOptions(max_gpus=gpus, **SETUP_150),
                          annotate=ANNOTATE_150, cluster=cluster, policies=[policy], seed=0, interference=interference)
        [result] = run(spec)
        out[f"gimbal-150/{policy}"] = digests(result)
        for key in (f"philly-512/{n}/{policy}", f"gimbal-150/{policy}"):
            print(f"{key:34s} table {out[key]['table'][:16]} summary {out[key]['summary'][:16]}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="DIR")
    mode.add_argument("--check", metavar="DIR")
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--policy", nargs="+", default=POLICIES)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--gavel-jobs", type=int, default=5_000)
    args = parser.parse_args()
    if args.jobs <= 0 or args.gavel_jobs <= 0:
        parser.error("--jobs and --gavel-jobs must be positive")
    require_trace(args.trace)
    found = run_all(args.trace, args.policy, args.jobs, args.gavel_jobs)
    path = Path(args.record or args.check) / "digests.json"
    if args.record:
        write_digests(path, found)
        return
    recorded = json.loads(path.read_text())
    differ = [k for k, v in found.items() if recorded.get(k) != v]
    missing = [k for k in found if k not in recorded]
    for k in differ:
        print(f"DIFFERS: {k}" + (" (not recorded)" if k in missing else ""))
    if differ:
        sys.exit(f"results differ for: {', '.join(differ)}")
    print("all identical")


if __name__ == "__main__":
    main()
