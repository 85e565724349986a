"""The testbed's options, parsed and validated in one place: :class:`TestbedSpec`. The command line
(:func:`add_arguments`, :func:`from_args`) only translates flags into it and re-words its errors with
the flags' names; a YAML or a Prefect flow would build the same object."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from schedlab import checks
from schedlab.sched.replay import PolicyRun
from schedlab.sched.strict import UserModel

#: the mini trace's workloads on a CPU (tiny models, tens of ms per iteration on one core) with a
#: catalog batch each; on a GPU the full models at the same batches
DEFAULT_KINDS = ("cifar10:32", "imagenet:32", "deepspeech2:20", "bert:8")
#: how the flags name the spec's fields (for error messages)
FLAGS = {"trace": "--trace", "generate": "--generate", "kinds": "--workloads", "device": "--device",
         "devices": "--devices", "cpu_sets": "--cpu-sets", "gpus": "--gpus", "policies": "--policy", "out": "--out",
         "models": "--models", "profiles": "--profiles", "size": "--size", "budget_s": "--budget-s",
         "seed": "--seed", "load": "--load", "min_job_s": "--min-job-s", "max_job_s": "--max-job-s",
         "poll_s": "--poll-s", "progress_s": "--progress-s", "overhead_samples": "--overhead-samples",
         "profile_iters": "--profile-iters", "profile_seconds": "--profile-seconds", "tolerance_s": "--tolerance-s",
         "placement": "--placement", "dask_address": "--dask-address"}


class TestbedSpec(UserModel):
    """One testbed session: a trace (a file, or a generated mini trace), the devices, the policies, and
    where everything goes. Plain, frozen data; every field validated on construction."""

    __test__ = False  # not a pytest class
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    trace: str | None = None  # a canonical trace with model, batch_size, iterations
    generate: int | None = Field(default=None, ge=1, le=200)  # or: a mini trace of this many jobs
    kinds: tuple[str, ...] = DEFAULT_KINDS  # the mini trace's WORKLOAD:BATCH
    device: Literal["cpu", "cuda"] = "cpu"
    devices: int | None = Field(default=None, ge=1)  # cpu: split the usable cores into this many sets
    cpu_sets: str | None = None  # cpu: explicit core sets, e.g. "0;1"
    gpus: tuple[str, ...] | None = None  # cuda: GPU indices or UUIDs (default: all visible)
    #: several nodes: the Dask scheduler whose workers lend their devices (``remote.py``)
    dask_address: str | None = None
    policies: tuple[PolicyRun, ...] = Field(min_length=1)
    out: Path
    models: Path | None = None  # reuse a node-models folder (node.json, iteration-time.json, xi-table.csv)
    profiles: Path | None = None  # the node's profile store (default: OUT/profiles)
    size: Literal["tiny", "full"] | None = None  # default: tiny on cpu, full on cuda
    budget_s: float = Field(default=900.0, gt=0)  # wall seconds per policy run (and the mini trace's bound)
    seed: int = Field(default=0, ge=0, lt=2**63)
    load: float = Field(default=1.0, gt=0)
    min_job_s: float = Field(default=10.0, gt=0)
    max_job_s: float = Field(default=60.0, gt=0)
    poll_s: float = Field(default=0.1, gt=0, le=5)
    progress_s: float = Field(default=0.5, gt=0, le=60)
    overhead_samples: int = Field(default=3, ge=1, le=50)
    profile_iters: int = Field(default=20, ge=3, le=10_000)
    #: each profiled configuration's window lasts at least this long: with 1 s (about 30 iterations of
    #: imagenet at batch 32 on one core) two profiles of one node differed by 8 % (34.3 vs 31.6 ms)
    #: while its testbed runs took 31-32 ms in both; a decision of the replay can turn on that
    profile_seconds: float = Field(default=2.0, gt=0, le=600)
    tolerance_s: float = Field(default=2.0, gt=0)
    placement: str = "fewest-servers"

    _policy_names = field_validator("policies", mode="before")(lambda cls, value: PolicyRun.many(value))

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from schedlab.profiling.workloads import WORKLOADS

        for kind in value:
            workload, _, batch = kind.partition(":")
            if workload not in WORKLOADS:
                raise ValueError(f"{kind!r}: unknown workload {workload!r}{checks.did_you_mean(workload, WORKLOADS)};"
                                 f" known: {', '.join(WORKLOADS)}")
            if not batch.isdigit() or int(batch) < 1:
                raise ValueError(f"{kind!r}: expected WORKLOAD:BATCH with a per-GPU batch >= 1")
        return value

    @field_validator("cpu_sets")
    @classmethod
    def _cpu_sets(cls, value: str | None) -> str | None:
        if value is not None:
            from schedlab.profiling.testbed.devices import parse_core_sets

            parse_core_sets(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TestbedSpec:
        if (self.trace is None) == (self.generate is None):
            raise ValueError("give a trace file (--trace) or a number of jobs to generate (--generate), not both")
        if self.trace is not None and not Path(self.trace).is_file():
            raise ValueError(f"--trace {self.trace}: no such file")
        if self.device == "cuda" and (self.devices is not None or self.cpu_sets is not None):
            raise ValueError("--devices and --cpu-sets are CPU devices; on cuda use --gpus")
        if self.device == "cpu" and self.gpus is not None:
            raise ValueError("--gpus names CUDA devices; on cpu use --devices or --cpu-sets")
        if self.devices is not None and self.cpu_sets is not None:
            raise ValueError("--devices and --cpu-sets: give one")
        if self.dask_address is not None:
            if ":" not in self.dask_address:
                raise ValueError(f"--dask-address {self.dask_address!r}: expected a scheduler address such as"
                                 " tcp://HOST:8786")
            given = [FLAGS[f] for f in ("devices", "cpu_sets", "gpus") if getattr(self, f) is not None]
            if given:
                raise ValueError(f"--dask-address: the nodes' workers lend the devices; {', '.join(given)} names this"
                                 " machine's")
            if self.models is None:
                raise ValueError("--dask-address: give the nodes' models with --models (a run on one node profiles"
                                 " them into OUT/node; the nodes must be alike)")
            if self.mps_shares():
                raise ValueError("--dask-address: MPS sharing runs only on this machine's GPUs (its MPS daemon);"
                                 " set the policy's mode to timeslice")
        if self.min_job_s > self.max_job_s:
            raise ValueError(f"--min-job-s {self.min_job_s:g} is above --max-job-s {self.max_job_s:g}")
        problem = checks.dir_problem(self.out)
        if problem:
            raise ValueError(f"--out {self.out}: {problem}")
        labels = [p.label for p in self.policies]
        if len(set(labels)) != len(labels):
            raise ValueError(f"--policy: {sorted({x for x in labels if labels.count(x) > 1})} given twice")
        for policy in self.policies:
            cls = policy.policy_class()
            if cls.capabilities:
                raise ValueError(f"--policy {policy.label}: needs engine capabilities the live backend lacks"
                                 " (per-worker calibration)")
        if self.device == "cpu" and self.mps_shares():
            raise ValueError("--policy: MPS sharing needs CUDA devices; on cpu set the policy's mode to timeslice"
                             " (e.g. --set castor.mode=timeslice)")
        if self.models is not None:
            from schedlab.profiling.testbed.node import NodeModels

            NodeModels.load(self.models)
        return self

    # ---- derived --------------------------------------------------------------------------------
    @property
    def workload_size(self) -> str:
        return self.size or ("tiny" if self.device == "cpu" else "full")

    @property
    def profile_dir(self) -> Path:
        return self.profiles if self.profiles is not None else self.out / "profiles"

    def kind_pairs(self) -> list[tuple[str, int]]:
        return [(k.partition(":")[0], int(k.partition(":")[2])) for k in self.kinds]

    def make_devices(self) -> list:
        """The devices (``devices.py``): CPU core sets (default: two) or CUDA GPUs (default: all visible)."""
        from schedlab.profiling.testbed import devices as D

        if self.device == "cpu":
            return D.cpu_devices(D.parse_core_sets(self.cpu_sets) if self.cpu_sets else (self.devices or 2))
        if self.gpus is not None:
            return D.cuda_devices(list(self.gpus))
        from schedlab.profiling.device import resolve, visible_gpus

        resolve("cuda")  # a RuntimeError when torch sees no GPU
        import torch

        return D.cuda_devices(visible_gpus()[: torch.cuda.device_count()])

    def mps_shares(self) -> list[tuple[float, float]]:
        """The MPS splits the policies share GPUs at (what the profile must measure on a GPU)."""
        return list(dict.fromkeys(s for s in map(mps_split, self.policies) if s is not None))


def mps_split(policy: PolicyRun) -> tuple[float, float] | None:
    """The (new job, partner) MPS shares ``policy`` co-locates jobs at; None when it does not use MPS."""
    params = policy.policy_class().Params.model_validate(policy.params)
    return tuple(float(s) for s in params.mps_shares) if getattr(params, "mode", None) == "mps" else None


# ---- the command line ---------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The testbed's flags (``python -m schedlab.profiling.testbed``; later ``schedlab testbed``)."""
    what = parser.add_argument_group("what to run")
    source = what.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="a canonical trace (CSV or Parquet) with model, batch_size, iterations")
    source.add_argument("--generate", type=checks.count, metavar="N",
                        help="generate a mini trace of N jobs (Castor §9.1-style, scaled-down Philly) into OUT/trace.csv")
    what.add_argument("--policy", nargs="+", required=True, metavar="POLICY",
                      help="policies to run, each on the testbed and in the simulator (e.g. fifo sjf-bsbf)")
    what.add_argument("--set", action="append", default=[], metavar="POLICY.PARAM=VALUE",
                      help="a policy parameter, e.g. tiresias.queue_thresholds=[20] (repeatable; VALUE is YAML)")
    what.add_argument("--workloads", nargs="+", metavar="WORKLOAD:BATCH", default=None,
                      help=f"--generate's workloads and per-GPU batches (default {' '.join(DEFAULT_KINDS)})")
    what.add_argument("--seed", type=checks.seed, default=0, help="mini trace and placement seed (default 0)")
    what.add_argument("--load", type=checks.number(float, gt=0), default=1.0, help="mini trace load (default 1.0)")
    what.add_argument("--min-job-s", type=checks.number(float, gt=0), default=10.0,
                      help="mini trace: shortest job, seconds alone (default 10)")
    what.add_argument("--max-job-s", type=checks.number(float, gt=0), default=60.0,
                      help="mini trace: longest job, seconds alone (default 60)")
    where = parser.add_argument_group("devices")
    where.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="device kind (default cpu)")
    where.add_argument("--devices", type=checks.count, default=None,
                       help="cpu: split the usable cores into this many equal sets (default 2)")
    where.add_argument("--cpu-sets", default=None, metavar="SETS", help="cpu: the core sets, e.g. '0;1' or '0-1;2-3'")
    where.add_argument("--gpus", default=None, help="cuda: GPU indices or UUIDs, e.g. 0,1 (default: all visible)")
    where.add_argument("--dask-address", default=None, metavar="ADDR",
                       help="run on several nodes: the Dask scheduler whose workers lend their devices (each started"
                       " with --resources TESTBED_CPU=N or GPU=N; needs --models; docs/how-to/testbed.md)")
    where.add_argument("--size", choices=["tiny", "full"], default=None,
                       help="workload size (default tiny on cpu, full on cuda)")
    out = parser.add_argument_group("output and models")
    out.add_argument("--out", required=True, type=Path, help="output folder")
    out.add_argument("--models", type=Path, default=None,
                     help="reuse the node's models from an earlier run (OUT/node of it) instead of profiling")
    out.add_argument("--profiles", type=Path, default=None, help="the node's profile store (default OUT/profiles)")
    run = parser.add_argument_group("the run")
    run.add_argument("--budget-s", type=checks.number(float, gt=0), default=900.0,
                     help="wall seconds per policy run; unfinished jobs are then killed (default 900)")
    run.add_argument("--poll-s", type=checks.number(float, gt=0, le=5), default=0.1,
                     help="how often the testbed looks at its processes (default 0.1 s)")
    run.add_argument("--progress-s", type=checks.number(float, gt=0, le=60), default=0.5,
                     help="how often a training process reports its progress (default 0.5 s)")
    run.add_argument("--overhead-samples", type=checks.number(int, ge=1, le=50), default=3,
                     help="start-up/restart measurements on the node (default 3)")
    run.add_argument("--profile-iters", type=checks.number(int, ge=3, le=10_000), default=20,
                     help="measured iterations per profiled configuration (default 20)")
    run.add_argument("--profile-seconds", type=checks.number(float, gt=0, le=600), default=2.0,
                     help="each profiled configuration is measured at least this long, a multi-device one 4x"
                     " (default 2 s)")
    run.add_argument("--tolerance-s", type=checks.number(float, gt=0), default=2.0,
                     help="Lyra's test: activities further apart than this differ (default 2 s)")
    run.add_argument("--placement", default="fewest-servers", help="placement strategy (default fewest-servers)")


def from_args(args: argparse.Namespace) -> TestbedSpec:
    """The spec of parsed flags; ValueError naming the flag when something is wrong."""
    from schedlab.sched.spec.fields import set_params

    names = list(dict.fromkeys(args.policy))
    try:  # --set keyed by each policy as given; PolicyRun resolves and validates the spec
        params = set_params(args.set or [], {n: n for n in names})
    except ValueError as err:
        raise ValueError(f"--set {err}") from None
    raw = {"trace": args.trace, "generate": args.generate, "device": args.device, "devices": args.devices,
           "cpu_sets": args.cpu_sets, "gpus": tuple(g.strip() for g in args.gpus.split(",") if g.strip())
           if args.gpus else None, "policies": [{"name": n, "params": params[n]} for n in names], "out": args.out,
           "models": args.models, "profiles": args.profiles, "size": args.size, "budget_s": args.budget_s,
           "seed": args.seed, "load": args.load, "min_job_s": args.min_job_s, "max_job_s": args.max_job_s,
           "poll_s": args.poll_s, "progress_s": args.progress_s, "overhead_samples": args.overhead_samples,
           "profile_iters": args.profile_iters, "profile_seconds": args.profile_seconds,
           "tolerance_s": args.tolerance_s, "placement": args.placement, "dask_address": args.dask_address}
    if args.workloads is not None:
        raw["kinds"] = tuple(args.workloads)
    try:
        return TestbedSpec.model_validate({k: v for k, v in raw.items() if v is not None})
    except ValidationError as err:
        raise ValueError(checks.validation_message(err, FLAGS)) from None


def environment_note() -> str:
    """Why a run on a busy machine is noisy, for the terminal: the load now."""
    from schedlab.profiling.testbed.node import load_average

    load = load_average()
    return f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores"
