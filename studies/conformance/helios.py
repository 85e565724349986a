"""Conformance with the Helios simulator (github.com/S-Lab-System-Group/HeliosArtifact, folder
``framework/QSSF Service``; Hu et al., SC'21), job for job, on a trace nobody tuned either side to.

The simulator steps time by one second, one virtual cluster (VC) at a time, on 8-GPU nodes. Its
policies are ``fifo``, ``sjf`` (the queue sorted by duration; the first job that cannot be placed ends
the pass), ``srtf`` (preemptive: every second all jobs, waiting and running, sorted by remaining time
and admitted while their GPU count fits in the VC's; a running job left out is checkpointed, and its
remaining time grows by a restore overhead of 7 s at 1 GPU, 30 s up to 8, 60 s above) and ``qssf``
(blocking, by an estimator's priority x GPUs). Its placers: ``consolidate`` (the default: a job of at
most 8 GPUs on the fullest node that holds it, a larger one on whole free nodes, else it waits:
schedlab's ``strict-best-fit``), ``random`` and ``consolidateFirst``.

The cases (:data:`CASES`), each one of the simulator's runs (recorded by ``helios_record``, which
also says what it changes in a temporary copy of the simulator) against a schedlab replay:

- ``fifo`` and ``sjf``: as published, against ``fifo`` and ``sjf`` ``blocking: true``.
- ``srtf-fixed``: the simulator's ``srtf`` with its late end fixed and no restore overhead, against
  ``srtf`` with ``ties: helios`` (its order among equal remaining times) and ``preemption_overhead_s: 0``.
- ``srtf-late``: no restore overhead, the late end kept: the simulator holds every job's GPUs one
  second past its duration (it checks a running job's remaining time before taking off the second
  just run), which schedlab reproduces with every duration one second longer (``late_end_s``).
- ``srtf``: as published, against ``srtf`` with the late end and the restore overhead by GPU count
  (``preemption_overhead_s: "1:7,8:30,inf:60"``). Not exact (:data:`BARS`): the simulator adds the
  overhead to a job's remaining time when it preempts it, so a waiting job is ranked with it and a
  job preempted again before it has paid it carries the rest; schedlab charges it on restart.
- ``qssf``: ``qssf`` with an oracle estimator (each job's priority its duration, where the simulator
  reads LightGBM predictions; QSSF multiplies it by the GPU count) against ``ssf`` ``blocking: true``.
- ``fifo-consolidate-first``: ``fifo`` under ``consolidateFirst`` (which crashes as published; the
  recorder fixes the call), against ``fifo`` under ``fewest-servers``: both place a job whenever
  enough GPUs are free, so the schedule is the same whichever servers they pick.

A case whose schedlab option is not in this checkout (:attr:`Case.needs`) is reported as pending.

The trace: ``n`` consecutive jobs of one Microsoft ITP cluster (ElasticFlow's raw traces, in the
development data's ``traces/itp``; never stored here) from a seeded start row, written in the columns
of the simulator's ``cluster_log.csv`` (schedlab reads them with its ``helios`` loader) on one VC.
The simulator's per-job results are fixtures (``tests/fixtures/conformance/helios-*``, with
``manifest-helios.json``).

    python -m schedlab.studies.conformance.helios [--case fifo ...] [--source DIR] [--json]
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from schedlab.benchmarks.common import DATA
from schedlab.studies.conformance.common import FIXTURES, HELIOS_COLUMNS, helios_log, joined, parse_args

ITP = DATA / "traces" / "itp"

GPUS_PER_NODE = 8  # the simulator's consolidate placer supports no other
VC = "vcITP"
ITP_COLUMNS = ["job_id", "submission_time", "duration", "num_gpu"]
PEER_COLUMNS = ["job_id", "submit_time", "start_time", "end_time", "preemptions"]
#: the simulator's restore overhead by GPU count (``policies/policy.py`` ``ckpt_overhead``)
HELIOS_RESTORE = "1:7,8:30,inf:60"


@dataclass(frozen=True)
class Trace:
    """``jobs`` consecutive jobs of ITP ``cluster`` from the row ``random.Random(seed)`` draws, on one
    VC of ``nodes`` x 8 GPUs."""

    cluster: str
    jobs: int
    seed: int
    nodes: int


#: the 1,000 jobs: 1.9 days of cluster04's submissions, asking 447 GPUs on average over that window,
#: on 32 x 8 = 256 GPUs (a backlog: FIFO waits 4 h on average)
TRACES = {"itp-1000": Trace("cluster04", 1000, 2, 32)}


@dataclass(frozen=True)
class Case:
    """One of the simulator's runs against one schedlab replay."""

    peer_policy: str  # the simulator's scheduler
    peer_placer: str  # its placer
    peer_changes: tuple[str, ...]  # what the recorder changes in its copy (``helios_record.CHANGES``)
    policy: str
    params: dict = field(default_factory=dict)
    placement: str = "strict-best-fit"
    overhead: float | str = 0.0  # preemption_overhead_s
    late_end_s: int = 0  # added to every duration: the simulator's srtf ends each job one second late
    needs: str | None = None  # the schedlab option this case needs, while a checkout may lack it


CASES = {
    "fifo": Case("fifo", "consolidate", (), "fifo"),
    "sjf": Case("sjf", "consolidate", (), "sjf", {"blocking": True}),
    "srtf-fixed": Case("srtf", "consolidate", ("late_end", "no_restore"), "srtf", {"ties": "helios"}),
    "srtf-late": Case("srtf", "consolidate", ("no_restore",), "srtf", {"ties": "helios"}, late_end_s=1),
    "srtf": Case("srtf", "consolidate", (), "srtf", {"ties": "helios"}, overhead=HELIOS_RESTORE, late_end_s=1,
                 needs="preemption_overhead_s by GPU count"),
    "qssf": Case("qssf", "consolidate", (), "ssf", {"blocking": True}, needs="ssf blocking"),
    "fifo-consolidate-first": Case("fifo", "consolidateFirst", ("consolidate_first",), "fifo",
                                   placement="fewest-servers"),
}

#: per case: the share of jobs whose start and end agree to the second, at least; |average JCT ours /
#: peer - 1|, at most. ``srtf`` (the restore overhead's accounting, above): 958 of 1,000 jobs identical,
#: 967 within 1 s, the average JCT -0.0015 %, when measured with the GPU-count overhead table
BARS = {case: (1.0, 0.0) for case in CASES} | {"srtf": (0.95, 0.001)}


def itp_trace(trace: Trace, source: Path = ITP) -> pd.DataFrame:
    """The trace's jobs in the simulator's ``cluster_log.csv`` columns.

    Jobs of zero duration are dropped first (the simulator's fifo, sjf and qssf would never release
    one: its end equals its start, and the release check runs from the next second). ``job_id`` is
    the job's 1-based data row in the ITP file, zero-padded to six digits so that jobs submitted in
    the same second sort alike everywhere (file order; schedlab's loader breaks ties by id text);
    ``submit_time`` a datetime from :data:`~schedlab.studies.conformance.common.HELIOS_START` (whole seconds after the window's first job);
    every job one user and name, no CPUs (the simulator's runs read neither)."""
    path = Path(source) / f"{trace.cluster}.csv"
    if not path.is_file():
        raise FileNotFoundError(f"ITP trace not found: {path}")
    df = pd.read_csv(path)
    missing = [c for c in ITP_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; an ITP trace has {ITP_COLUMNS}")
    df["row"] = range(1, len(df) + 1)
    df = df[df["duration"] > 0].sort_values("submission_time", kind="stable").reset_index(drop=True)
    if len(df) <= trace.jobs:
        raise ValueError(f"{path}: {len(df)} jobs of positive duration, the trace needs more than {trace.jobs}")
    start = random.Random(trace.seed).randrange(len(df) - trace.jobs)
    w = df.iloc[start : start + trace.jobs]
    out = helios_log(w["row"], w["num_gpu"], w["submission_time"], w["duration"], VC, "itp")
    if int(out["gpu_num"].max()) > trace.nodes * GPUS_PER_NODE:
        raise ValueError(f"{path}: a job of {out['gpu_num'].max()} GPUs does not fit {trace.nodes} nodes")
    return out[HELIOS_COLUMNS]


def write_trace(df: pd.DataFrame, path: Path) -> Path:
    df.to_csv(path, index=False, date_format="%Y-%m-%d %H:%M:%S")
    return path


def replay_spec(case: str, nodes: int):
    """schedlab's side of ``case`` as a replay spec, or the reason it is pending: the text of the
    validation error when the case :attr:`~Case.needs` an option this checkout lacks."""
    from pydantic import ValidationError

    from schedlab.sched.replay import ReplaySpec

    c = CASES[case]
    try:
        return ReplaySpec(cluster=f"{nodes}x{GPUS_PER_NODE}", policies=[{"name": c.policy, "params": c.params}],
                          placement=c.placement, preemption_overhead_s=c.overhead)
    except ValidationError as error:
        if c.needs is None:
            raise
        return f"needs {c.needs} (this checkout: {error.errors()[0]['msg']})"


def run_ours(trace_csv: Path, case: str, nodes: int) -> pd.DataFrame:
    """schedlab on the simulator-format trace, in :data:`PEER_COLUMNS` (``job_id`` an int, times in
    seconds from the first submission). Raises LookupError when the case is pending."""
    from schedlab.sched.replay import prepare, run
    from schedlab.sched.traces import load_trace

    spec = replay_spec(case, nodes)
    if isinstance(spec, str):
        raise LookupError(f"{case}: {spec}")
    table, _ = load_trace(trace_csv, "helios")
    table["duration"] += CASES[case].late_end_s
    [result] = run(spec, prepare(spec, table))
    jobs = result.jobs
    origin = jobs["submit_time"].min()
    return pd.DataFrame({
        "job_id": jobs["job_id"].astype(int).to_numpy(),
        "submit_time": (jobs["submit_time"] - origin).to_numpy(),
        "start_time": (jobs["start_time"] - origin).to_numpy(),
        "end_time": (jobs["end_time"] - origin).to_numpy(),
        "preemptions": jobs["preemptions"].astype(int).to_numpy(),
    })


def fixture_path(trace: str, case: str) -> Path:
    return FIXTURES / f"helios-{trace}-{case}.csv"


def load_expected(trace: str, case: str) -> pd.DataFrame:
    """The simulator's recorded per-job times (:data:`PEER_COLUMNS`, seconds from the first submission)."""
    return pd.read_csv(fixture_path(trace, case))


def compare(ours: pd.DataFrame, peer: pd.DataFrame) -> dict:
    """Job for job: how many start and end at the same second, the end differences, and the averages."""
    both = joined(ours, peer)
    if not (both["submit_time"] == both["submit_time_peer"]).all():
        raise ValueError("submit times differ: not the same trace")
    end = (both["end_time"] - both["end_time_peer"]).abs()
    same = (both["start_time"] == both["start_time_peer"]) & (end == 0)
    jct, jct_peer = both["end_time"] - both["submit_time"], both["end_time_peer"] - both["submit_time"]
    return {
        "jobs": len(both),
        "identical": int(same.sum()),
        "within_1s": int((end <= 1).sum()),
        "max_abs_end_diff_s": float(end.max()),
        "mean_abs_end_diff_s": float(end.mean()),
        "avg_jct_s": float(jct.mean()),
        "avg_jct_s_peer": float(jct_peer.mean()),
        "avg_jct_rel": float(jct.mean() / jct_peer.mean() - 1),
        "makespan_s": float(both["end_time"].max()),
        "makespan_s_peer": float(both["end_time_peer"].max()),
        "preemptions": int(both["preemptions"].sum()),
        "preemptions_peer": int(both["preemptions_peer"].sum()),
    }


def main() -> None:
    args = parse_args(__doc__, TRACES, CASES, ITP, "the folder of the ITP traces (clusterNN.csv)")
    if not args.json:
        print(f"{'trace':9s} {'case':23s} {'jobs':>5s} {'same':>5s} {'<=1 s':>5s} {'max |d|':>8s} {'mean |d|':>8s}"
              f" {'avg JCT':>9s} {'peer':>9s} {'rel':>8s} {'preempt':>7s} {'peer':>5s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.trace:
            trace = TRACES[name]
            path = write_trace(itp_trace(trace, Path(args.source)), Path(tmp) / f"{name}.csv")
            for case in args.case:
                if not fixture_path(name, case).exists():
                    print(f"{name:9s} {case:23s} (no recorded peer output)")
                    continue
                started = time.perf_counter()
                try:
                    r = compare(run_ours(path, case, trace.nodes), load_expected(name, case))
                except LookupError as pending:
                    print(f"{name:9s} {case:23s} pending: {pending}")
                    continue
                r.update(trace=name, case=case, seconds=round(time.perf_counter() - started, 1))
                if args.json:
                    print(json.dumps(r))
                    continue
                print(f"{name:9s} {case:23s} {r['jobs']:5d} {r['identical']:5d} {r['within_1s']:5d}"
                      f" {r['max_abs_end_diff_s']:8.0f} {r['mean_abs_end_diff_s']:8.1f} {r['avg_jct_s']:9.0f}"
                      f" {r['avg_jct_s_peer']:9.0f} {100 * r['avg_jct_rel']:+7.2f}% {r['preemptions']:7d}"
                      f" {r['preemptions_peer']:5d}", flush=True)


if __name__ == "__main__":
    main()
