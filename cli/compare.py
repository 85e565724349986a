"""``schedlab compare EXPERIMENT A B``: two policies of an experiment, job by job (helped, hurt, unchanged;
by GPU count and duration; the jobs A hurts most with their timelines under both) and their fairness and
tail figures, from the replays' ``jobs.parquet`` in the tracking store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    cp = subparsers.add_parser(
        "compare", help="two policies of an experiment, job by job: helped, hurt, fairness, tails",
        description="Pair the jobs of two policies' replays of an experiment (the same trace and seed) and print"
                    " the per-job JCT ratio (B / A), the jobs A helps, hurts and leaves unchanged (overall, by GPU"
                    " count and by duration), the ten jobs A hurts most with their timelines, and per policy the"
                    " slowdown, Themis' finish-time fairness and p95/p99 JCT and queueing by job size. Writes"
                    " jobs.csv (one row per job and seed) and drilldown.html into --out.")
    cp.add_argument("experiment", help="the experiment's name (as in its YAML and MLflow)")
    cp.add_argument("a", metavar="A", help="a policy label of the experiment")
    cp.add_argument("b", metavar="B", help="another policy label of the experiment")
    cp.add_argument("--trace", help="only this trace label (default: every trace both policies ran)")
    cp.add_argument("--cluster", help="only this cluster (default: every cluster both policies ran)")
    cp.add_argument("--tolerance", type=float, default=1e-9,
                    help="a job is unchanged when its JCT ratio is within 1 +/- this (>= 0, default 1e-9)")
    cp.add_argument("--out", type=Path, help="folder for jobs.csv and drilldown.html (default:"
                                             " $SCHEDLAB_HOME/compare/<experiment>/<A>-vs-<B>)")
    cp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from schedlab.sched.reporting import drilldown
    from schedlab.tasks.compare import cluster_gpus, replay_jobs

    if not args.tolerance >= 0:
        print(f"schedlab compare: error: --tolerance must be >= 0, got {args.tolerance}", file=sys.stderr)
        return 2
    if args.a == args.b:
        print(f"schedlab compare: error: A and B are the same label ({args.a!r})", file=sys.stderr)
        return 2
    tables = replay_jobs(args.settings.tracking_uri, args.experiment, (args.a, args.b), args.trace, args.cluster)
    parts = drilldown.drilldown(tables, args.a, args.b, cluster_gpus(c for _, c, _ in tables), args.tolerance)
    out = args.out or Path(args.settings.home) / "compare" / _safe(args.experiment) / f"{_safe(args.a)}-vs-{_safe(args.b)}"
    out.mkdir(parents=True, exist_ok=True)
    drilldown.jobs_csv(parts["jobs"], args.a, args.b).to_csv(out / "jobs.csv", index=False)
    drilldown.write_page(parts, args.a, args.b, out / "drilldown.html")
    print(drilldown.to_text(parts, args.a, args.b))
    print(f"\nper job: {out / 'jobs.csv'}\npage: {out / 'drilldown.html'}")
    return 0


def _safe(name: str) -> str:
    """A label as one folder name (no separators, no parent references)."""
    return "".join(c if c.isalnum() or c in "-_.+~@" else "_" for c in name).strip(".") or "_"
