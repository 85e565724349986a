"""The ``schedlab`` command line (DESIGN.md, "CLI"): one entry point, one sub-command per job."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from schedlab.flows.cli import register as register_flows
from schedlab.profiling.cli import register as register_profile
from schedlab.sched.cluster import ClusterError, load_cluster
from schedlab.tasks.fit_cli import register as register_fit
from schedlab.tasks.compare import METRICS
from schedlab.sched.policies import BASELINES, POLICIES
from schedlab.sched.traces import FORMATS, LoadOptions, TraceError, load_trace

DEFAULT_CLUSTER = "castor-sim"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="schedlab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_replay(commands)
    policies = commands.add_parser("policies", help="list every registered policy")
    policies.set_defaults(func=_policies)
    for register in (register_flows, register_profile, register_fit):  # experiment/ui/serve…, profile, fit
        register(commands)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (TraceError, ClusterError, ValueError) as err:
        print(f"schedlab {args.command}: error: {err}", file=sys.stderr)
        return 2


def _add_replay(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("replay", help="replay a job trace through one or more policies")
    p.add_argument("--trace", help="trace file or folder (default: the built-in synthetic trace)")
    p.add_argument("--format", choices=sorted(FORMATS), help="trace format (default: detect)")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help="shipped name, YAML path or NxG[:type]")
    p.add_argument("--policy", nargs="+", default=list(BASELINES), help="policies (default: all baselines)")
    p.add_argument("--set", action="append", default=[], metavar="POLICY.PARAM=VALUE",
                   help="a policy parameter, e.g. tiresias.promote_knob=4 (repeatable; VALUE is YAML)")
    p.add_argument("--placement", default="consolidated", help="consolidated | best-fit | random")
    p.add_argument("--interference", default="analytic",
                   help="ξ source for shared GPUs: analytic[:XI], gavel:PATH[:WORKER], table:PATH, model:PATH|URI")
    p.add_argument("--preemption-overhead", type=float, help="checkpoint-restore seconds (default: 63)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-jobs", type=int, help="first N jobs of the trace")
    p.add_argument("--num-jobs", type=int, help="synthetic trace: number of jobs")
    p.add_argument("--load", type=float, default=1.0, help="load scaling: submit times divided by this")
    p.add_argument("--start", type=float, help="time window start (s from trace start)")
    p.add_argument("--end", type=float, help="time window end (s from trace start)")
    p.add_argument("--vc", action="append", help="keep only these VCs (repeatable)")
    p.add_argument("--on-oversize", default="error", choices=["error", "drop", "clip"])
    p.add_argument("--on-bad-duration", default="error", choices=["error", "drop"])
    p.add_argument("--on-duplicate-id", default="error", choices=["error", "drop", "rename"])
    p.add_argument("--on-unsorted", default="sort", choices=["error", "sort"])
    p.add_argument("--annotate", action="store_true",
                   help="assign workloads (model, batch, iterations) and deadlines from the catalog (Castor §9.1)")
    p.add_argument("--out", default="runs/replay", help="output folder (default: runs/replay)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--track", action="store_true", help="also log each policy's replay as an MLflow run"
                   " ($MLFLOW_TRACKING_URI, else $SCHEDLAB_HOME/mlflow.db; see `schedlab ui`)")
    p.add_argument("--experiment", default="replay", help="MLflow experiment of --track (default: replay)")
    p.set_defaults(func=_replay)


def _policy_params(pairs: list[str], policies: list[str]) -> dict[str, dict[str, Any]]:
    params: dict[str, dict[str, Any]] = {name: {} for name in policies}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        name, dot, param = key.partition(".")
        if not sep or not dot:
            raise ValueError(f"--set {pair!r}: expected POLICY.PARAM=VALUE")
        if name not in params:
            raise ValueError(f"--set {pair!r}: policy {name!r} is not among --policy {' '.join(policies)}")
        params[name][param] = yaml.safe_load(value)
    return params


def _replay(args: argparse.Namespace) -> int:
    from schedlab.sched.replay import prepare_table, replay

    unknown = [p for p in args.policy if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; registered: {', '.join(sorted(POLICIES))}")
    params = _policy_params(args.set, args.policy)
    cluster = load_cluster(args.cluster)
    tracking_uri = _check_tracking() if args.track else None
    options = LoadOptions(
        start=args.start, end=args.end, vcs=args.vc, max_jobs=args.max_jobs, load=args.load,
        max_gpus=cluster.training_pool.servers * cluster.training_pool.gpus_per_server,
        on_oversize=args.on_oversize, on_bad_duration=args.on_bad_duration,
        on_duplicate_id=args.on_duplicate_id, on_unsorted=args.on_unsorted,
        seed=args.seed, num_jobs=args.num_jobs,
    )
    table, report = load_trace(args.trace, args.format, options)
    needs_workloads = any(POLICIES[p].shares_gpus for p in args.policy) and "model" not in table.columns
    if needs_workloads and not args.annotate:
        print("annotating workloads from the catalog: sharing policies need them (Castor §9.1)")
    table, notes = prepare_table(table, cluster, annotate_workloads=args.annotate or needs_workloads, seed=args.seed)
    print(f"trace: {report.source} ({report.format}): read {report.read}, kept {report.kept},"
          f" dropped {sum(report.dropped.values())} {report.dropped or ''}, repaired {report.repaired or '{}'}")
    out = Path(args.out)
    rows, results = [], []
    for name in args.policy:
        result = replay(
            table, cluster, name, params[name], placement=args.placement, seed=args.seed,
            preemption_overhead_s=args.preemption_overhead, interference=args.interference,
            load_report={**report.to_dict(), **notes},
            progress=not args.no_progress and sys.stderr.isatty(),
        )
        result.write(out / name if len(args.policy) > 1 else out)
        rows.append(result.summary)
        results.append(result)
    comparison = comparison_table(rows)
    out.mkdir(parents=True, exist_ok=True)
    comparison.to_csv(out / "comparison.csv", index=False)
    print(f"cluster: {cluster.name} ({cluster.total_gpus} GPUs), placement: {args.placement}, seed: {args.seed}")
    print(format_table(comparison))
    print(f"results: {out}/")
    if tracking_uri is not None:
        _track(args, tracking_uri, results, params, report.source, cluster.total_gpus)
    return 0


def _check_tracking() -> str:
    """``--track``: the tracking store, checked before any replay (exit 2 when it cannot be used)."""
    from schedlab import settings
    from schedlab.tasks.tracking import TrackingError, check_tracking

    uri = settings.tracking_uri(settings.apply_env())
    try:
        check_tracking(uri)
    except TrackingError as err:
        raise ValueError(str(err)) from None
    return uri


def _track(args: argparse.Namespace, uri: str, results: list, params: dict, source: str, total_gpus: int) -> None:
    from schedlab import settings
    from schedlab.tasks import mlflow_view, tracking

    shared = {"trace.source": source, "trace.format": args.format or "auto", "cluster": args.cluster,
              "seed": args.seed, "placement": args.placement, "interference": args.interference,
              "trace.annotate": args.annotate, "code_version": tracking.code_version(),
              **{f"trace.option.{k}": getattr(args, k) for k in ("max_jobs", "num_jobs", "load", "start", "end", "vc")
                 if getattr(args, k) is not None}}
    config = {"*": shared, **{name: {
        "preemption_overhead_s": mlflow_view.preemption_overhead(name, args.preemption_overhead),
        **{f"params.{k}": json.dumps(v) for k, v in mlflow_view.policy_params(name, params[name]).items()}}
        for name in args.policy}}
    root = None if uri.startswith(("http://", "https://")) else settings.artifact_root()
    runs = mlflow_view.log_adhoc_replays(uri, args.experiment, root, results, config, total_gpus)
    experiment_id = tracking.client(uri).get_experiment_by_name(args.experiment).experiment_id
    main_run = runs.get("parent") or runs[results[0].policy]
    print(f"MLflow: {mlflow_view.run_url(uri, experiment_id, main_run)}")


COMPARISON_COLUMNS = ["policy", "jobs", *METRICS]  # the MLflow metric keys


def comparison_table(summaries: list[dict[str, Any]]):
    import pandas as pd

    return pd.DataFrame(summaries)[COMPARISON_COLUMNS]


def format_table(frame) -> str:
    """A plain fixed-width table (numbers rounded) for the terminal."""
    cells = [[str(c) for c in frame.columns]]
    for row in frame.itertuples(index=False):
        cells.append([f"{v:,.3f}" if isinstance(v, float) and abs(v) < 10 else
                      f"{v:,.0f}" if isinstance(v, (int, float)) else str(v) for v in row])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _policies(args: argparse.Namespace) -> int:
    for name, cls in sorted(POLICIES.items()):
        print(f"{name:10s} {cls.summary}  [{cls.paper}]")
        defaults = cls.Params().model_dump()
        if defaults:
            print(f"{'':10s}   parameters: {json.dumps(defaults)}")
        if cls.simplified:
            print(f"{'':10s}   simplified: {cls.simplified}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
