"""``schedlab replay``: replay a job trace through one or more policies on a simulated cluster, print
their comparison and write the results to ``--out`` (with ``--track``, also MLflow runs).

The flags translate into a :class:`~schedlab.sched.spec.ReplaySpec`, which validates them (and whose
parts, :mod:`schedlab.sched.parts`, are built before any work); an error is re-worded with the flag's
name. argparse only turns text into numbers and keeps the choices it lists in ``--help``."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from schedlab import checks, settings
from schedlab.cli.common import interrupted_by
from schedlab.sched.contained import DEFAULT_TIME_LIMIT_S, Contained, PolicyFailed
from schedlab.sched.core.placement import ALIASES, DEFAULT, STRATEGIES
from schedlab.sched.policies import BASELINES
from schedlab.sched.reporting.terminal import comparison_table, format_table, load_line
from schedlab.sched.spec import AUTO, ReplaySpec, SpecError, policy_runs
from schedlab.sched.traces import FORMATS, TIME_ORIGINS

DEFAULT_CLUSTER = "castor-sim"


def flag(option: str) -> str:
    """The replay flag for a trace-loading option named in an error's hint (``fmt`` -> ``--format``)."""
    return {"fmt": "--format", "vcs": "--vc"}.get(option, "--" + option.replace("_", "-"))


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("replay", help="replay a job trace through one or more policies",
                            description="Replay a job trace through one or more policies on a simulated cluster"
                            " and print their comparison; results go to --out.")
    p.add_argument("--trace", help="trace file or folder (default: the built-in synthetic trace)")
    p.add_argument("--format", choices=sorted(FORMATS), help="trace format (default: detect)")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER,
                   help=f"shipped name, YAML path or NxG[:type] (default: {DEFAULT_CLUSTER})")
    p.add_argument("--policy", nargs="+", default=list(BASELINES), metavar="POLICY",
                   help="policies (default: all baselines): registered names (`schedlab policies`), or your own"
                   " as path/to/file.py:ClassName or package.module:ClassName (docs/tutorials/write-a-policy.md)")
    p.add_argument("--set", action="append", default=[], metavar="POLICY.PARAM=VALUE",
                   help="a policy parameter, e.g. tiresias.promote_knob=4 (repeatable; VALUE is YAML); POLICY is"
                   " its name, its label or its spec as given to --policy")
    p.add_argument("--placement", default=DEFAULT, metavar="{" + ",".join([*STRATEGIES, *ALIASES]) + "}",
                   help=f"which free GPUs a job gets (default: {DEFAULT}; consolidated is the old name of"
                   " fewest-servers; strict-consolidated (first fit) and strict-best-fit (fullest server) keep a job on the"
                   " fewest servers it can span, or make it wait)")
    p.add_argument("--interference", default="analytic",
                   help="ξ source for shared GPUs: analytic[:XI], gavel:PATH[:WORKER], table:PATH, model:PATH|URI,"
                   " mpscap[:rho=R][:eta=E]:BASE (MPS caps, Gimbal)")
    p.add_argument("--iteration-time", default="catalog", metavar="SPEC",
                   help="solo iteration times: catalog (default) or a model from `schedlab fit iteration-time`, by"
                   " path or models:/iteration-time/N; its parameters replace the catalog's for the workloads and"
                   " GPU types it covers")
    p.add_argument("--smact-profiles", metavar="DIR",
                   help="a profile store (e.g. $SCHEDLAB_HOME/profiles): add the SM-activity distribution over all"
                   " GPUs (Castor Fig. 12c/d) from its SMACT records: smact_* metrics and smact.parquet")
    p.add_argument("--inference-load", metavar="SPEC",
                   help="lend inference servers to training on this load (Lyra): a time,utilization CSV,"
                   " ServeGen's CSV[:MODEL] or constant:U; the cluster needs an 'inference' pool")
    p.add_argument("--inference-predictor", dest="predictor", choices=["oracle", "last"],
                   help="how the orchestrator predicts the next period's inference load (default: oracle)")
    p.add_argument("--inference-headroom", dest="headroom", type=checks.number(float), metavar="F",
                   help="fraction of inference servers never lent (0 <= F < 1; default: 0.02, Lyra §7.1)")
    p.add_argument("--reclaim", help="which on-loan servers go back: lyra, scf, random,"
                   " random-idle-first, optimal (default: lyra)")
    p.add_argument("--gpu-equivalence", dest="gpu_equivalence", type=checks.number(float), metavar="R",
                   help="inference GPUs standing for one training GPU (default: 3, Lyra §7.5)")
    p.add_argument("--keep-progress", dest="lose_progress", action="store_false", default=None,
                   help="jobs preempted at a reclaim keep their progress unless their checkpoint column says"
                   " otherwise (default: they restart from zero, Lyra §4)")
    p.add_argument("--preemption-overhead", metavar="S",
                   help="checkpoint-restore seconds charged when a preempted job restarts (>= 0; default: the"
                   " policy's, 63 for most), or by its GPU count: '1:7,8:30,inf:60' or helios (the Helios simulator's)")
    p.add_argument("--seed", type=checks.number(int), default=0,
                   help="seed of the replay and of the synthetic trace (>= 0; default 0)")
    p.add_argument("--max-jobs", type=checks.number(int), metavar="N", help="first N jobs of the trace (N >= 1)")
    p.add_argument("--num-jobs", type=checks.number(int), metavar="N", help="synthetic trace: number of jobs (N >= 1)")
    p.add_argument("--load", type=checks.number(float), default=1.0,
                   help="load scaling: submit times divided by this (> 0; default 1)")
    p.add_argument("--start", type=checks.number(float), help="time window start (s from the time origin, >= 0)")
    p.add_argument("--end", type=checks.number(float), help="time window end (s from the time origin, > --start)")
    p.add_argument("--vc", action="append", help="keep only these VCs (repeatable)")
    p.add_argument("--time-origin", choices=list(TIME_ORIGINS),
                   help="which trace time becomes the replay's 0: first-job (the earliest job kept; --start/--end"
                   " count from the earliest job read; the default) or file (the file's own clock, which --start/--end"
                   " count from too; the default of --format pollux, whose 60 s rounds count from it as in Pollux's"
                   " simulator)")
    p.add_argument("--on-oversize", default="error", choices=["error", "drop", "clip"],
                   help="a job larger than the cluster: stop with an error (default), drop it, or clip its GPUs")
    p.add_argument("--on-bad-duration", default="error", choices=["error", "drop"],
                   help="a missing or non-positive duration: stop with an error (default) or drop the job")
    p.add_argument("--on-duplicate-id", default="error", choices=["error", "drop", "rename"],
                   help="a repeated job id: stop with an error (default), drop the repeat, or rename it")
    p.add_argument("--on-unsorted", default="sort", choices=["error", "sort"],
                   help="submit times out of order: sort them (default) or stop with an error")
    p.add_argument("--annotate", action="store_true",
                   help="assign workloads (model, batch, iterations) and deadlines from the catalog (Castor §9.1)")
    p.add_argument("--out", help="output folder; refused if it holds results, unless --overwrite"
                   " (default: a new folder under $SCHEDLAB_HOME/replays/)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the results already in --out (removed before the replay starts)")
    p.add_argument("--time-limit", type=checks.number(float, gt=0), default=DEFAULT_TIME_LIMIT_S, metavar="S",
                   help="seconds each policy's replay may run before it is stopped and fails, e.g. a policy that"
                   f" never returns (> 0; default {DEFAULT_TIME_LIMIT_S:g}, about 12 x the longest shipped replay)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--track", action="store_true", help="also log each policy's replay as an MLflow run"
                   " ($MLFLOW_TRACKING_URI, else $SCHEDLAB_HOME/mlflow.db; see `schedlab ui`)")
    p.add_argument("--experiment", default="replay", help="MLflow experiment of --track (default: replay)")
    p.set_defaults(func=run)


#: a spec field (an error's location: :func:`_field`) -> the flag that sets it
FLAGS = {"trace": "--trace", "format": "--format", "cluster": "--cluster", "policies": "--policy", "params": "--set",
         "seed": "--seed", "placement": "--placement", "preemption_overhead_s": "--preemption-overhead",
         "interference": "--interference", "iteration_time": "--iteration-time", "smact_profiles": "--smact-profiles",
         "annotate": "--annotate", "inference": "--inference-load", "inference.load": "--inference-load",
         "inference.predictor": "--inference-predictor", "inference.headroom": "--inference-headroom",
         "inference.reclaim": "--reclaim", "inference.gpu_equivalence": "--gpu-equivalence",
         "inference.lose_progress": "--keep-progress",
         **{f"options.{k}": f"--{k.replace('_', '-')}" for k in ("start", "end", "max_jobs", "num_jobs", "load",
                                                                  "seed", "time_origin", "on_oversize",
                                                                  "on_bad_duration", "on_duplicate_id", "on_unsorted")},
         "options.vcs": "--vc", "options.max_gpus": "--cluster"}
#: LoanOptions fields as the replay options that set them (their ``dest``; ``--keep-progress`` clears
#: ``lose_progress``); None when not given, so that LoanOptions' defaults apply
LOAN_OPTIONS = ("predictor", "headroom", "reclaim", "gpu_equivalence", "lose_progress")
#: pydantic's bound errors, as argparse words a number out of range
BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="), "less_than": ("lt", "<"),
          "less_than_equal": ("le", "<=")}


def _field(loc: tuple[Any, ...]) -> str:
    """``("policies", 0, "params")`` -> ``params``; ``("options", "load")`` -> ``options.load``."""
    if loc[:1] == ("policies",):
        return "params" if "params" in loc else "policies"
    return ".".join(str(part) for part in loc[:2] if not isinstance(part, int))


def _worded(field: str, message: str, given: Any = None) -> str:
    flag = FLAGS.get(field, field)
    if field == "trace":
        return f"--trace {given}: {message}"
    if field == "params":
        return f"--set {message}" if message.startswith("'") else f"--set: {message}"
    if field == "inference" and "pool" in message:
        return f"--inference-load: {message} (e.g. --cluster lyra-testbed)"
    return f"{flag}: {message}"


def _reworded(err: ValidationError, within: tuple[str, ...] = ()) -> str:
    """The spec's errors (of its part ``within``) as one line, each naming the flag as typed."""
    lines = []
    for e in err.errors():
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] in BOUNDS:
            key, sign = BOUNDS[e["type"]]
            bound = e["ctx"][key]
            message = f"must be {sign} {bound:g}" if isinstance(bound, float) else f"must be {sign} {bound}"
            message += f", got {checks.plain(e['input'])!r}"
        elif e["type"] != "value_error" and isinstance(e.get("input"), (int, float, str)):
            message += f" (got {checks.plain(e['input'])!r})"
        lines.append(_worded(_field((*within, *checks.error_loc(e))), message, e.get("input")))
    return "; ".join(dict.fromkeys(lines))


def replay_spec(args: argparse.Namespace) -> ReplaySpec:
    """The replay the flags describe (``annotate: auto`` unless ``--annotate``): a ValueError naming the
    flag for any value the spec refuses."""
    loan = {field: getattr(args, field) for field in LOAN_OPTIONS if getattr(args, field) is not None}
    if args.inference_load is None and loan:
        from schedlab.sched.core.pools import LoanOptions

        try:  # a bad value first, then that it has nothing to apply to
            LoanOptions(load="constant:0", **loan)
        except ValidationError as err:
            raise ValueError(_reworded(err, ("inference",))) from None
        raise ValueError(f"{FLAGS['inference.' + next(iter(loan))]}: applies only with --inference-load (and a"
                         " cluster with an 'inference' pool)")
    options = {"start": args.start, "end": args.end, "vcs": args.vc, "max_jobs": args.max_jobs, "load": args.load,
               "on_oversize": args.on_oversize, "on_bad_duration": args.on_bad_duration,
               "on_duplicate_id": args.on_duplicate_id, "on_unsorted": args.on_unsorted, "seed": args.seed,
               "num_jobs": args.num_jobs, "time_origin": args.time_origin}
    try:
        return ReplaySpec(
            trace=args.trace, format=args.format, options={k: v for k, v in options.items() if v is not None},
            annotate=True if args.annotate else AUTO, cluster=args.cluster, policies=policy_runs(args.policy, args.set),
            seed=args.seed, placement=args.placement, preemption_overhead_s=args.preemption_overhead,
            interference=args.interference, iteration_time=args.iteration_time, smact_profiles=args.smact_profiles,
            inference={"load": args.inference_load, **loan} if args.inference_load is not None else None)
    except SpecError as err:
        raise ValueError(_worded(err.field, str(err))) from None
    except ValidationError as err:
        raise ValueError(_reworded(err)) from None


def replay_parts(spec: ReplaySpec, conf: settings.Settings) -> Any:
    """The replay's parts (:func:`schedlab.sched.parts.build`), every file read before any work: the
    models named by MLflow URI fetched from the tracking store, the SMACT profile read from its store."""
    from schedlab.sched import parts
    from schedlab.sched.models.fitted import is_uri

    fetch = None
    if is_uri(spec.iteration_time) or "models:/" in spec.interference or "runs:/" in spec.interference:
        from schedlab.tasks.model_tracking import fetcher

        fetch = fetcher(conf.tracking_uri, conf.registry_uri)
    from schedlab.profiling.smact import profile_for

    smact = profile_for(spec)  # None without --smact-profiles; a ValueError names the folder
    try:
        return parts.build(spec, fetch, smact)
    except SpecError as err:
        raise ValueError(_worded(err.field, str(err))) from None


def run(args: argparse.Namespace) -> int:
    from schedlab.sched.results.outdir import claim, fresh_folder

    spec = replay_spec(args)
    tracking_uri = _check_tracking(args.settings) if args.track else None
    parts = replay_parts(spec, args.settings)
    out = Path(args.out) if args.out else fresh_folder(settings.replays_dir(args.settings.home))
    # a file, read-only, busy or non-empty --out fails here, before the replay
    lock = claim(out, overwrite=args.overwrite, created=not args.out)
    try:
        return _run_replay(args, spec, parts, out, tracking_uri)
    finally:
        lock.release()


def _run_replay(args: argparse.Namespace, spec: ReplaySpec, parts: Any, out: Path, tracking_uri: str | None) -> int:
    """Replay ``spec`` (:func:`schedlab.sched.replay.run`): each policy's results written, and logged
    with ``--track``, as it ends; then the comparison."""
    from schedlab.sched.replay import prepare, run, write_atomic

    prepared = prepare(spec, parts=parts)
    report, notes, cluster = prepared.report, prepared.notes, prepared.cluster
    if notes.get("annotated") and not args.annotate:
        print("annotating workloads from the catalog: sharing policies need them (Castor §9.1)")
    print(load_line(report))
    if "iteration_time_note" in notes:
        print(f"iteration times: {notes['iteration_time_note']}")
    failures: list[PolicyFailed] = []
    with _tracked(args, tracking_uri, spec, report.source, cluster.total_gpus, out) as runs:
        def finished(result: Any) -> None:
            result.write(out / result.policy if len(spec.policies) > 1 else out)
            if runs is not None:
                runs.log(result)

        def failed(error: PolicyFailed) -> None:  # the other policies go on
            print(f"schedlab replay: {error}", file=sys.stderr, flush=True)
            failures.append(error)
            if runs is not None:
                runs.fail(error.label, error.message)

        results = run(spec, prepared, progress=not args.no_progress and sys.stderr.isatty(), each=finished,
                      contained=Contained(args.time_limit), failed=failed)
        comparison = comparison_table([result.summary for result in results])
        write_atomic(out / "comparison.csv", lambda p: comparison.to_csv(p, index=False))
        link = runs.finish(results, failed=bool(failures)) if runs is not None else None
    print(f"cluster: {cluster.name} ({cluster.total_gpus} GPUs), placement: {spec.placement}, seed: {spec.seed}")
    if results:
        print(format_table(comparison))
    for error in failures:
        print(f"{error.label}: FAILED ({error.message})")
    unused: dict[str, list[str]] = {}  # a model or option that changed nothing -> the policies it did not change
    for result in results:
        for message in result.unused:
            unused.setdefault(message, []).append(result.policy)
    for message, labels in unused.items():
        print(f"{', '.join(labels)}: {message}")
    print(f"results: {out}/")
    if link is not None:
        print(f"MLflow: {link}")
    return 1 if failures else 0


def _check_tracking(conf: settings.Settings) -> str:
    """``--track``: the tracking store, checked before any replay (exit 2 when it cannot be used)."""
    from schedlab.tasks.tracking import TrackingError, check_tracking

    uri = conf.tracking_uri
    try:
        check_tracking(uri)
    except TrackingError as err:
        raise ValueError(str(err)) from None
    return uri


#: the load options ``--track`` records as ``trace.option.*`` where given
TRACKED_LOAD_OPTIONS = ("max_jobs", "num_jobs", "load", "start", "end", "vc", "time_origin")


@contextlib.contextmanager
def _tracked(args: argparse.Namespace, uri: str | None, spec: ReplaySpec, source: str, total_gpus: int,
             out: Path) -> Iterator[Any]:
    """``--track``: the replay's MLflow runs (:mod:`schedlab.tasks.adhoc`), created before the first
    policy is replayed, a SIGTERM turned into an interruption meanwhile (the runs not done end KILLED);
    None without ``--track``."""
    if uri is None:
        yield None
        return
    import signal

    from schedlab.sched.reporting import mlflow_view
    from schedlab.tasks import tracking
    from schedlab.tasks.adhoc import adhoc_runs

    shared = {"trace.source": source, "trace.format": args.format or "auto", "cluster": args.cluster,
              "seed": args.seed, "placement": spec.placement, "interference": args.interference,
              "iteration_time": args.iteration_time, "trace.annotate": args.annotate,
              "code_version": tracking.code_version(),
              **{f"trace.option.{k}": getattr(args, k) for k in TRACKED_LOAD_OPTIONS if getattr(args, k) is not None},
              **{f"inference.{k}": v for k, v in (spec.inference.model_dump() if spec.inference else {}).items()}}
    config = {"*": shared, **{policy.label: {
        "preemption_overhead_s": mlflow_view.preemption_overhead(policy.name, spec.preemption_overhead_s),
        **{f"params.{k}": json.dumps(v) for k, v in policy.effective_params().items()},
        **mlflow_view.policy_source_params(policy.name)}
        for policy in spec.policies}}
    root = None if uri.startswith(("http://", "https://")) else args.settings.artifact_root
    with interrupted_by(signal.SIGTERM), adhoc_runs(uri, args.experiment, root, config, total_gpus, out) as runs:
        yield runs
