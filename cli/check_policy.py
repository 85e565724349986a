"""``schedlab check-policy``: run a policy through generated traces and clusters (Hypothesis) and check
the engine's rules; exit 0 when all hold, 1 when some are broken (each with a minimal reproducing trace)."""

from __future__ import annotations

import argparse
from pathlib import Path

from schedlab import checks


def register(commands: argparse._SubParsersAction) -> None:
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from schedlab.sched.policy_check import CheckOptions, check_policy
    from schedlab.sched.spec import PolicyRun, SpecError, policy_runs

    # PARAM=VALUE, or POLICY.PARAM=VALUE as replay's --set takes it
    pairs = [pair if pair.startswith(f"{args.spec}.") else f"{args.spec}.{pair}" for pair in args.set]
    try:
        [policy] = policy_runs([args.spec], pairs)
        params = PolicyRun(name=policy["name"], params=policy["params"]).params
    except SpecError as err:  # the spec's own message; a pair named by --set
        raise ValueError(f"--set {err}" if err.field == "params" else str(err)) from None
    except ValidationError as err:
        raise ValueError(f"--set: {checks.validation_message(err).removeprefix('params: ')}") from None
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
