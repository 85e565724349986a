"""Did a speed change alter any result? Full-trace job tables, before and after, compared by hash.

``--record DIR`` replays the trace through each policy (the baselines as in ``replay_speed.py``; the
sharing policies on the table annotated as in ``sharing_speed.py``) and writes ``DIR/<policy>.parquet``
(the whole job table) and ``DIR/digests.json`` (a SHA-256 per policy of every column, floats
written with ``repr`` so that the last bit counts, plus the summary's result fields). ``--check DIR``
replays again and compares with what was recorded; it exits 1 naming the first differing column.

    python benchmarks/result_digests.py --record /tmp/before [--policy fifo tiresias …]
    python benchmarks/result_digests.py --check /tmp/before
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from common import DEFAULT_TRACE, require_trace, run_isolated

# summary fields that measure the run, not its result (wall-clock solve times)
TIMING_FIELDS = ("lp_solve_mean_s", "lp_solve_p99_s")


def table_digest(jobs) -> str:
    text = jobs.to_csv(index=False, float_format=lambda x: repr(float(x)))
    return hashlib.sha256(text.encode()).hexdigest()


def summary_digest(summary: dict, is_timing: Callable[[str], bool]) -> str:
    """SHA-256 of a replay summary's result fields; ``is_timing(key)`` names those that measure the run."""
    text = json.dumps({k: v for k, v in summary.items() if not is_timing(k)}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def write_digests(path: Path, found: dict) -> None:
    """``--record``: ``found`` as JSON at ``path`` (its folder created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(found, indent=1) + "\n")
    print(f"recorded {len(found)} digests in {path}")


def one(trace: str, policy: str, max_jobs: int, cluster: str, out: str) -> dict:
    from schedlab.sched.models.annotate import annotate
    from schedlab.sched.policies import SHARING
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.traces import LoadOptions, load_trace

    table, _ = load_trace(trace, "philly", LoadOptions(max_jobs=max_jobs or None, max_gpus=512))
    if policy in SHARING:
        table = annotate(table, seed=0)
    spec = ReplaySpec(cluster=cluster, policies=[policy])
    prepared = prepare(spec, table)
    started = time.perf_counter()
    [result] = run(spec, prepared)
    seconds = time.perf_counter() - started
    result.jobs.to_parquet(Path(out) / f"{policy}.parquet", index=False)
    return {
        "policy": policy,
        "jobs": len(table),
        "seconds": seconds,
        "table": table_digest(result.jobs),
        "summary": summary_digest(result.summary, TIMING_FIELDS.__contains__),
        "utilization": table_digest(result.utilization),
    }


def explain(before: Path, after: Path) -> str:
    """The first column (and row) where two recorded job tables differ."""
    import pandas as pd

    a, b = pd.read_parquet(before), pd.read_parquet(after)
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return f"shape differs: {a.shape} {list(a.columns)} vs {b.shape} {list(b.columns)}"
    for column in a.columns:
        x, y = a[column], b[column]
        same = (x == y) | (x.isna() & y.isna())
        if not same.all():
            row = int((~same).to_numpy().argmax())
            return f"column {column!r} first differs at row {row}: {x.iloc[row]!r} vs {y.iloc[row]!r}"
    return "job tables equal; the summary or utilization differs"


def main() -> None:
    from schedlab.sched.policies import BASELINES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="DIR")
    mode.add_argument("--check", metavar="DIR")
    mode.add_argument("--one", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--cluster", default="philly-512")
    parser.add_argument("--policy", nargs="+", default=[*BASELINES, "gavel"])
    parser.add_argument("--jobs", type=int, default=0, help="first N jobs (0 = all)")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.trace, args.policy[0], args.jobs, args.cluster, args.one)))
        return
    require_trace(args.trace)
    recorded_dir = Path(args.record or args.check)
    if args.record:
        recorded_dir.mkdir(parents=True, exist_ok=True)
        out_dir = recorded_dir
        recorded = {}
    else:
        recorded = json.loads((recorded_dir / "digests.json").read_text())
        out_dir = recorded_dir / "check"
        out_dir.mkdir(exist_ok=True)
    failed = []
    for policy in args.policy:
        # run_isolated passes ``--one`` first: the output folder is its value
        r = run_isolated(__file__, [str(out_dir), "--trace", args.trace, "--cluster", args.cluster,
                                    "--policy", policy, "--jobs", str(args.jobs)])
        line = f"{policy:10s} {r['jobs']:7d} jobs {r['seconds']:8.2f} s  table {r['table'][:16]}"
        if args.record:
            recorded[policy] = r
            (recorded_dir / "digests.json").write_text(json.dumps(recorded, indent=1) + "\n")
        else:
            old = recorded.get(policy)
            if old is None:
                line += "  (not recorded)"
            elif all(old[k] == r[k] for k in ("jobs", "table", "summary", "utilization")):
                line += "  identical"
            else:
                failed.append(policy)
                line += "  DIFFERS: " + explain(recorded_dir / f"{policy}.parquet", out_dir / f"{policy}.parquet")
        print(line, flush=True)
    if failed:
        sys.exit(f"results differ for: {', '.join(failed)}")


if __name__ == "__main__":
    main()
