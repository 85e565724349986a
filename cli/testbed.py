"""``schedlab testbed``: the shipped policies on real devices (CPU core sets or GPUs), each run compared with
its replay in the simulator on the node's own models (``docs/how-to/testbed.md``); ``--track`` logs each policy's
run to MLflow. The same session without Prefect or MLflow: ``python -m schedlab.profiling.testbed``."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from schedlab.profiling.testbed import add_arguments

    tb = subparsers.add_parser(
        "testbed", help="run policies on real devices and measure the simulator's error against them",
        description="Run a small trace (a file with model, batch_size, iterations, or a generated Castor §9.1-style"
                    " mini trace) under each policy on real devices, replay it in the simulator with the node's"
                    " own models, and compare: average, p95 JCT and makespan, per-job errors, the first decision"
                    " that differs and the first activity more than --tolerance-s apart. Writes, per policy,"
                    " OUT/<policy>/{testbed,replay}/ (jobs.parquet, summary.json, activity.jsonl),"
                    " comparison.json and comparison.html, and OUT/summary.json.")
    add_arguments(tb)
    tb.add_argument("--track", action="store_true", help="also log each policy's run to MLflow (params, the"
                                                         " comparison's figures as metrics, the folder as artifacts)")
    tb.add_argument("--experiment", default="testbed", help="MLflow experiment of --track (default: testbed)")
    tb.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from schedlab.profiling.testbed.session import execute
    from schedlab.profiling.testbed.spec import from_args

    spec = from_args(args)  # a bad option: ValueError, exit 2 naming it
    uri = None
    if args.track:
        from schedlab.tasks.tracking import TrackingError, check_tracking

        uri = args.settings.tracking_uri
        try:
            check_tracking(uri)
        except TrackingError as err:
            raise ValueError(str(err)) from None
    code = execute(spec)
    if uri is not None:
        from schedlab.tasks.testbed import log_session

        runs = log_session(uri, args.experiment, args.settings.artifact_root, spec, spec.out)
        print(f"MLflow ({uri}), experiment {args.experiment!r}: "
              + ", ".join(f"{label} run {run_id}" for label, run_id in runs.items()))
    return code
