"""The ``schedlab`` command line: one entry point, one sub-command per job.

Every option is checked before any work starts: a bad value exits 2 with a message naming the option
as typed (numbers through :mod:`schedlab.checks`); Ctrl-C exits 130 without a traceback."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from schedlab import __version__, checks, settings
from schedlab.flows.cli import interrupted_by, register as register_flows
from schedlab.profiling.cli import register as register_profile
from schedlab.sched.core.cluster import ClusterError, load_cluster
from schedlab.sched.results.outdir import os_reason
from schedlab.sched.core.placement import ALIASES, DEFAULT, STRATEGIES, canonical_placement, check_policy
from schedlab.tasks.fit_cli import register as register_fit
from schedlab.tasks.compare import METRICS
from schedlab.sched.policies import BASELINES, POLICIES
from schedlab.sched.traces import FORMATS, TIME_ORIGINS, LoadOptions, TraceError, path_problem

DEFAULT_CLUSTER = "castor-sim"


DESCRIPTION = ("Replay GPU-cluster job traces through schedulers, run experiments over Dask tracked in"
               " MLflow, profile training workloads and fit the models that decide how fast shared jobs run.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="schedlab", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"schedlab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_replay(commands)
    policies = commands.add_parser("policies", help="list every registered policy",
                                   description="List every registered policy, its paper and its parameters (installed packages'"
                                   " `schedlab.policies` entry points included).")
    policies.set_defaults(func=_policies)
    _add_check_policy(commands)
    for register in (register_flows, register_profile, register_fit):  # experiment/ui/serve…, profile, fit
        register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    settings.skip_exit_collection()
    args = build_parser().parse_args(_attach_dash_values(sys.argv[1:] if argv is None else argv))
    # built once here and passed down (args.settings); exported before any command imports prefect or mlflow
    args.settings = settings.Settings.from_env().apply()
    try:
        return int(args.func(args) or 0)
    except (TraceError, ClusterError, ValueError) as err:
        message = err.describe(_flag) if isinstance(err, TraceError) else err
        print(f"schedlab {args.command}: error: {message}", file=sys.stderr)
        return 2
    except OSError as err:  # read-only, full disk, no permission: the user's to fix, not a crash
        where = f"{err.filename}: " if err.filename else ""
        print(f"schedlab {args.command}: error: {where}{os_reason(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nschedlab {args.command}: interrupted", file=sys.stderr)
        return 130


#: options whose value may start with a dash: ``--cluster -1x8`` must reach the cluster check, which names the
#: number out of range, instead of argparse's "expected one argument"
DASH_VALUES = ("--cluster",)


def _attach_dash_values(argv: list[str]) -> list[str]:
    """``argv`` with ``--cluster -1x8`` written as ``--cluster=-1x8``."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in DASH_VALUES and arg[:1] == "-" and arg[1:2].isdigit():
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _flag(option: str) -> str:
    """The replay flag for a trace-loading option named in an error's hint (``fmt`` -> ``--format``)."""
    return {"fmt": "--format", "vcs": "--vc"}.get(option, "--" + option.replace("_", "-"))


def _add_replay(commands: argparse._SubParsersAction) -> None:
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
    p.add_argument("--inference-headroom", dest="headroom", type=checks.number(float, ge=0, lt=1), metavar="F",
                   help="fraction of inference servers never lent (0 <= F < 1; default: 0.02, Lyra §7.1)")
    p.add_argument("--reclaim", help="which on-loan servers go back: lyra, scf, random,"
                   " random-idle-first, optimal (default: lyra)")
    p.add_argument("--gpu-equivalence", dest="gpu_equivalence", type=checks.number(float, gt=0), metavar="R",
                   help="inference GPUs standing for one training GPU (default: 3, Lyra §7.5)")
    p.add_argument("--keep-progress", dest="lose_progress", action="store_false", default=None,
                   help="jobs preempted at a reclaim keep their progress unless their checkpoint column says"
                   " otherwise (default: they restart from zero, Lyra §4)")
    p.add_argument("--preemption-overhead", type=_restore_overhead, metavar="S",
                   help="checkpoint-restore seconds charged when a preempted job restarts (>= 0; default: the"
                   " policy's, 63 for most), or by its GPU count: '1:7,8:30,inf:60' or helios (the Helios simulator's)")
    p.add_argument("--seed", type=checks.seed, default=0,
                   help="seed of the replay and of the synthetic trace (>= 0; default 0)")
    p.add_argument("--max-jobs", type=checks.count, metavar="N", help="first N jobs of the trace (N >= 1)")
    p.add_argument("--num-jobs", type=checks.count, metavar="N", help="synthetic trace: number of jobs (N >= 1)")
    p.add_argument("--load", type=checks.number(float, gt=0), default=1.0,
                   help="load scaling: submit times divided by this (> 0; default 1)")
    p.add_argument("--start", type=checks.seconds, help="time window start (s from the time origin, >= 0)")
    p.add_argument("--end", type=checks.number(float, gt=0), help="time window end (s from the time origin, > --start)")
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
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--track", action="store_true", help="also log each policy's replay as an MLflow run"
                   " ($MLFLOW_TRACKING_URI, else $SCHEDLAB_HOME/mlflow.db; see `schedlab ui`)")
    p.add_argument("--experiment", default="replay", help="MLflow experiment of --track (default: replay)")
    p.set_defaults(func=_replay)


def _restore_overhead(text: str) -> float | str:
    """``--preemption-overhead``: seconds or a table by GPU count, as the replay spec takes it."""
    from schedlab.sched.core.restore import canonical

    try:
        return canonical(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_check_policy(commands: argparse._SubParsersAction) -> None:
    from schedlab.sched.policy_check import MAX_CALLS, MAX_JOBS

    p = commands.add_parser(
        "check-policy", help="check a policy against the engine's rules on generated traces",
        description="Run a policy through generated traces (1-10 jobs) and clusters (1-4 servers x 1-8 GPUs)"
        " with Hypothesis and check the engine's rules: GPUs never over capacity, no start before submission,"
        " every job finishes, progress monotone, same seed -> same results, the engine touched only through its"
        " API, bounded time per call. Each broken rule is reported with a minimal reproducing trace."
        " Exit 0: all rules hold; 1: some broken.")
    p.add_argument("spec", metavar="SPEC", help="the policy: a registered name (see `schedlab policies`), "
                   "path/to/file.py:Class, package.module:Class or an installed entry point")
    p.add_argument("--set", action="append", default=[], metavar="PARAM=VALUE",
                   help="a policy parameter, e.g. promote_knob=4 (repeatable; VALUE is YAML)")
    p.add_argument("--examples", type=checks.number(int, ge=1, le=100_000), default=100, metavar="N",
                   help="generated cases to try (1-100000; default 100); shrinking a failure adds more")
    p.add_argument("--seed", type=checks.seed, default=0,
                   help="seed of the case generator and of every replay (>= 0; default 0)")
    p.add_argument("--max-jobs", type=checks.number(int, ge=1, le=MAX_JOBS), default=MAX_JOBS, metavar="N",
                   help=f"most jobs in a generated trace (1-{MAX_JOBS}; default {MAX_JOBS})")
    p.add_argument("--deadline-s", type=checks.number(float, gt=0), default=1.0, metavar="S",
                   help="most seconds one policy call may take (> 0; default 1)")
    p.add_argument("--max-calls", type=checks.number(int, ge=1, le=10_000_000), default=MAX_CALLS, metavar="N",
                   help=f"policy calls one replay may take before 'finishes' fails (default {MAX_CALLS:,})")
    p.add_argument("--no-elastic", action="store_true", help="generate no elastic jobs (elastic_min/max)")
    p.add_argument("--save", metavar="DIR", help="write each minimal failing trace to DIR/RULE.csv")
    p.set_defaults(func=_check_policy)


def _check_policy(args: argparse.Namespace) -> int:
    from schedlab.sched.policies import load_policy_class
    from schedlab.sched.policy_check import CheckOptions, check_policy

    load_policy_class(args.spec)  # ValueError naming what is wrong with the spec
    # PARAM=VALUE, or POLICY.PARAM=VALUE as replay's --set takes it
    pairs = [pair if pair.startswith(f"{args.spec}.") else f"{args.spec}.{pair}" for pair in args.set]
    params = _policy_params(pairs, {args.spec: args.spec})[args.spec]
    options = CheckOptions(examples=args.examples, seed=args.seed, max_jobs=args.max_jobs,
                           deadline_s=args.deadline_s, elastic=not args.no_elastic, params=params,
                           max_calls=args.max_calls)
    save = Path(args.save) if args.save else None
    if save is not None:
        if save.exists() and not save.is_dir():
            raise ValueError(f"--save {save}: exists and is not a folder")
        if save.exists() and any(save.glob("*.csv")):
            raise ValueError(f"--save {save}: already holds CSV files; choose an empty or new folder")
    report = check_policy(args.spec, options)
    saved = {v.rule: v.save(save) for v in report.violations} if save is not None else None
    print(report.text(saved))
    return 0 if report.passed else 1


def _policy_params(pairs: list[str], names: dict[str, str]) -> dict[str, dict[str, Any]]:
    """``--set POLICY.PARAM=VALUE`` by policy label; ``names`` maps each way a policy may be named in
    POLICY (its label, its spec as given) to its label. The longest name that prefixes the key wins (a
    file spec has dots of its own)."""
    params: dict[str, dict[str, Any]] = {label: {} for label in names.values()}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        name = max((n for n in names if key.startswith(n + ".")), key=len, default=None)
        if not sep or "." not in key:
            raise ValueError(f"--set {pair!r}: expected POLICY.PARAM=VALUE")
        if name is None:
            given = key.partition(".")[0]
            raise ValueError(f"--set {pair!r}: policy {given!r} is not among --policy"
                             f" {' '.join(dict.fromkeys(names.values()))}{checks.did_you_mean(given, names)}")
        label, param = names[name], key[len(name) + 1:]
        if param in params[label]:
            raise ValueError(f"--set {pair!r}: {label}.{param} is set twice")
        try:
            params[label][param] = checks.load_yaml(value)
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ValueError(f"--set {pair!r}: VALUE is not valid YAML ({problem})") from None
    return params


def _policy_specs(given: list[str]) -> dict[str, str]:
    """``--policy``'s specs (a relative file path made absolute) by label, each class loaded (a missing
    file, class or module, a clash with a shipped name: ValueError naming it)."""
    from schedlab.sched.policies import policy_label, resolve_spec

    specs: dict[str, str] = {}
    for spec in given:
        try:
            resolved = resolve_spec(spec)
            label = policy_label(resolved)
        except ValueError as err:
            raise ValueError(f"--policy: {err}") from None
        if label in specs:
            raise ValueError(f"--policy: {label!r} given twice" + (f" ({specs[label]} and {resolved})"
                                                                      if specs[label] != resolved else ""))
        specs[label] = resolved
    return specs


#: LoadOptions fields as the replay options that set them (for messages)
LOAD_OPTION_NAMES = {"start": "--start", "end": "--end", "vcs": "--vc", "max_jobs": "--max-jobs", "load": "--load",
                     "seed": "--seed", "num_jobs": "--num-jobs", "max_gpus": "--cluster",
                     "time_origin": "--time-origin"}


def _check_replay(args: argparse.Namespace) -> tuple[Any, Any, str | None]:
    """Every ``replay`` option that argparse cannot check alone, before any work: policies and their
    ``--set`` parameters, the cluster, the model sources and the trace window; returns the replay as a
    :class:`~schedlab.sched.replay.ReplaySpec` (``annotate: auto`` unless ``--annotate``), the fetch for
    models named by MLflow URI (None without one) and the tracking store of ``--track``."""
    from schedlab.sched.models.fitted import is_uri, make_iteration_time
    from schedlab.sched.models.interference import make_interference
    from schedlab.sched.policies import load_policy_class, make_policy
    from schedlab.sched.replay import AUTO, ReplaySpec

    specs = _policy_specs(args.policy)
    names = {**{given: label for given, label in zip(args.policy, specs)}, **{label: label for label in specs}}
    params = _policy_params(args.set, names)
    for label, spec in specs.items():
        try:
            make_policy(spec, params[label])
        except ValueError as err:
            raise ValueError(f"--set: {err}") from None
    try:
        args.placement = canonical_placement(args.placement)
        for label, spec in specs.items():
            check_policy(args.placement, label, load_policy_class(spec).waits_when_refused)
    except ValueError as err:
        raise ValueError(f"--placement: {err}") from None
    try:
        cluster = load_cluster(args.cluster)
    except ClusterError as err:
        raise ValueError(f"--cluster: {err}") from None
    tracking_uri = _check_tracking(args.settings) if args.track else None
    fetch = None
    if is_uri(args.iteration_time) or "models:/" in args.interference or "runs:/" in args.interference:
        from schedlab.tasks.model_tracking import fetcher

        fetch = fetcher(args.settings.tracking_uri, args.settings.registry_uri)
    try:
        make_interference(args.interference, fetch)
    except (ValueError, OSError) as err:
        raise ValueError(f"--interference: {err}") from None
    try:
        make_iteration_time(args.iteration_time, fetch)
    except (ValueError, OSError) as err:
        raise ValueError(f"--iteration-time: {err}") from None
    loan = _loan_options(args, cluster)
    if args.smact_profiles:
        from schedlab.profiling.smact import smact_profile

        smact_profile(args.smact_profiles, cluster.training_pool.gpu_type)  # ValueError names the folder
    if args.start is not None and args.end is not None and args.end <= args.start:
        raise ValueError(f"--end ({args.end:g}) must be greater than --start ({args.start:g})")
    try:
        options = LoadOptions(
            start=args.start, end=args.end, vcs=args.vc, max_jobs=args.max_jobs, load=args.load,
            max_gpus=cluster.training_pool.servers * cluster.training_pool.gpus_per_server,
            on_oversize=args.on_oversize, on_bad_duration=args.on_bad_duration,
            on_duplicate_id=args.on_duplicate_id, on_unsorted=args.on_unsorted,
            seed=args.seed, num_jobs=args.num_jobs, time_origin=args.time_origin,
        )
    except ValidationError as err:
        raise ValueError(checks.validation_message(err, LOAD_OPTION_NAMES)) from None
    spec = ReplaySpec(
        trace=args.trace, format=args.format, options=options, annotate=True if args.annotate else AUTO,
        cluster=args.cluster, policies=[{"name": spec, "params": params[label], "label": label}
                                         for label, spec in specs.items()],
        seed=args.seed, placement=args.placement, preemption_overhead_s=args.preemption_overhead,
        interference=args.interference, iteration_time=args.iteration_time,
        smact_profiles=args.smact_profiles, inference=loan,
    )
    return spec, fetch, tracking_uri


#: LoanOptions fields as the replay options that set them (their ``dest``; ``--keep-progress`` clears
#: ``lose_progress``); None when not given, so that LoanOptions' defaults apply
LOAN_OPTION_NAMES = {"predictor": "--inference-predictor", "headroom": "--inference-headroom", "reclaim": "--reclaim",
                     "gpu_equivalence": "--gpu-equivalence", "lose_progress": "--keep-progress"}


def _loan_options(args: argparse.Namespace, cluster: Any) -> Any:
    """``--inference-load`` and its companions as LoanOptions (None without it), the load read now."""
    given = {field: getattr(args, field) for field in LOAN_OPTION_NAMES if getattr(args, field) is not None}
    if args.inference_load is None:
        if given:
            raise ValueError(f"{LOAN_OPTION_NAMES[next(iter(given))]}: applies only with --inference-load (and a"
                             " cluster with an 'inference' pool)")
        return None
    from schedlab.sched.models.inference import InferenceLoadError, load_inference
    from schedlab.sched.core.pools import LoanOptions

    try:
        cluster.lending_pool()
    except ClusterError as err:
        raise ValueError(f"--inference-load: {err} (e.g. --cluster lyra-testbed)") from None
    try:
        options = LoanOptions(load=args.inference_load, **given)
    except ValidationError as err:
        raise ValueError(checks.validation_message(err, LOAN_OPTION_NAMES)) from None
    try:
        load_inference(options.load)
    except (InferenceLoadError, OSError) as err:
        raise ValueError(f"--inference-load: {err}") from None
    return options


def _replay(args: argparse.Namespace) -> int:
    from schedlab.sched.results.outdir import claim, fresh_folder

    spec, fetch, tracking_uri = _check_replay(args)
    problem = path_problem(Path(args.trace), folder=True) if args.trace else None
    if problem is not None:
        raise ValueError(f"--trace {args.trace}: {problem}")
    out = Path(args.out) if args.out else fresh_folder(settings.replays_dir(args.settings.home))
    # a file, read-only, busy or non-empty --out fails here, before the replay
    lock = claim(out, overwrite=args.overwrite, created=not args.out)
    try:
        return _run_replay(args, spec, fetch, out, tracking_uri)
    finally:
        lock.release()


def _run_replay(args: argparse.Namespace, spec: Any, fetch: Any, out: Path, tracking_uri: str | None) -> int:
    """Replay ``spec`` (:func:`schedlab.sched.replay.run`): each policy's results written, and logged
    with ``--track``, as it ends; then the comparison."""
    from schedlab.profiling.smact import profile_for
    from schedlab.sched.replay import prepare, run, write_atomic

    prepared = prepare(spec, fetch=fetch, smact=profile_for(spec))
    report, notes, cluster = prepared.report, prepared.notes, prepared.cluster
    if notes.get("annotated") and not args.annotate:
        print("annotating workloads from the catalog: sharing policies need them (Castor §9.1)")
    print(f"trace: {report.source} ({report.format}): read {report.read}, kept {report.kept},"
          f" dropped {counted(report.dropped)}, repaired {counted(report.repaired)}")
    if "iteration_time_note" in notes:
        print(f"iteration times: {notes['iteration_time_note']}")
    with _tracked(args, tracking_uri, spec, report.source, cluster.total_gpus, out) as runs:
        def finished(result: Any) -> None:
            result.write(out / result.policy if len(spec.policies) > 1 else out)
            if runs is not None:
                runs.log(result)

        results = run(spec, prepared, fetch=fetch, progress=not args.no_progress and sys.stderr.isatty(),
                      each=finished)
        comparison = comparison_table([result.summary for result in results])
        write_atomic(out / "comparison.csv", lambda p: comparison.to_csv(p, index=False))
        link = runs.finish(results) if runs is not None else None
    print(f"cluster: {cluster.name} ({cluster.total_gpus} GPUs), placement: {spec.placement}, seed: {spec.seed}")
    print(format_table(comparison))
    print(f"results: {out}/")
    if link is not None:
        print(f"MLflow: {link}")
    return 0


#: a trace load's repair reasons (sched/traces/common.py) in words
REPAIR_WORDS = {"unsorted_sorted": "sorted by submit time", "oversize_clipped": "GPUs clipped to the cluster",
                "duplicate_id_renamed": "duplicate id renamed", "fractional_gpu_rounded_up": "fractional GPUs rounded up"}


def counted(reasons: dict[str, int]) -> str:
    """``{"oversize": 2, "unsorted_sorted": 1}`` as ``3 (2 oversize, 1 sorted by submit time)``; ``0`` when empty."""
    total = sum(reasons.values())
    if not total:
        return "0"
    return f"{total} (" + ", ".join(f"{n} {REPAIR_WORDS.get(why, why.replace('_', ' '))}"
                                    for why, n in reasons.items() if n) + ")"


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
def _tracked(args: argparse.Namespace, uri: str | None, spec: Any, source: str, total_gpus: int,
             out: Path) -> Iterator[Any]:
    """``--track``: the replay's MLflow runs (:mod:`schedlab.tasks.adhoc`), created before the first
    policy is replayed, a SIGTERM turned into an interruption meanwhile (the runs not done end KILLED);
    None without ``--track``."""
    if uri is None:
        yield None
        return
    import signal

    from schedlab.tasks import mlflow_view, tracking
    from schedlab.tasks.adhoc import adhoc_runs

    shared = {"trace.source": source, "trace.format": args.format or "auto", "cluster": args.cluster,
              "seed": args.seed, "placement": args.placement, "interference": args.interference,
              "iteration_time": args.iteration_time, "trace.annotate": args.annotate,
              "code_version": tracking.code_version(),
              **{f"trace.option.{k}": getattr(args, k) for k in TRACKED_LOAD_OPTIONS if getattr(args, k) is not None},
              **{f"inference.{k}": v for k, v in (spec.inference.model_dump() if spec.inference else {}).items()}}
    config = {"*": shared, **{policy.label: {
        "preemption_overhead_s": mlflow_view.preemption_overhead(policy.name, spec.preemption_overhead_s),
        **{f"params.{k}": json.dumps(v) for k, v in mlflow_view.policy_params(policy.name, policy.params).items()},
        **mlflow_view.policy_source_params(policy.name)}
        for policy in spec.policies}}
    root = None if uri.startswith(("http://", "https://")) else args.settings.artifact_root
    with interrupted_by(signal.SIGTERM), adhoc_runs(uri, args.experiment, root, config, total_gpus, out) as runs:
        yield runs


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
    print(policy_listing(shutil.get_terminal_size().columns))
    return 0


def policy_listing(width: int) -> str:
    """Every policy: its name in a column as wide as the longest name, then its summary, paper,
    parameters and simplifications, each wrapped to ``width`` and indented under the first."""
    import textwrap

    from schedlab.sched.policies import PLUGIN_DISTS

    column = max(len(name) for name in POLICIES) + 2
    body = max(width - column, 30)
    lines = []
    for name, cls in sorted(POLICIES.items()):
        paper = getattr(cls, "paper", "")
        parts = [f"{getattr(cls, 'summary', '')}{f'  [{paper}]' if paper else ''}".strip()]
        if name in PLUGIN_DISTS:
            parts.append("installed from {}=={}".format(*PLUGIN_DISTS[name]))
        defaults = cls.Params().model_dump(mode="json")
        if defaults:
            parts.append("parameters: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in defaults.items()))
        if cls.simplified:
            parts.append(f"simplified: {cls.simplified}")
        for i, part in enumerate(parts):
            wrapped = textwrap.wrap(part, body, subsequent_indent="  " if i else "", break_on_hyphens=False) or [""]
            for j, text in enumerate(wrapped):
                lines.append((name if i == 0 and j == 0 else "").ljust(column) + text)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
