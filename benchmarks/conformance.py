"""Conformance: schedlab's baselines against their authors' own simulators, job for job.

The Tiresias simulator (github.com/SymbioticLab/Tiresias, ``simulator/``; Gavel's simulator is in
``conformance_gavel.py``, which shares :func:`compare`): its ``dlas-gpu`` (Tiresias, two queues split
at 3,600 GPU-s), ``dlas-gpu-8`` (the same with promote knob 8), ``shortest`` (SRTF) and ``fifo``, with
its ``count`` placement (GPUs are counted, not placed; schedlab's ``fewest-servers``) and, in the
``-yarn`` cases, its ``yarn`` placement (a job on one server, or on whole servers plus one for the
rest; schedlab's ``strict-consolidated``), no restart cost, against schedlab's ``tiresias``
(``semantics: code``), ``srtf`` and ``fifo`` on the same traces, in the simulator's own CSV format, on
32 servers x 4 GPUs (its ``n32g4.csv``).

The traces are Philly-derived and made here, not stored: ``philly_trace(n, seed)`` takes ``n``
consecutive jobs (in submit order) of the Philly trace in ``/work/shared/data/traces/philly`` (the
Pollux artifact's ``philly_jobs_pollux.csv``) from a start row drawn with ``random.Random(seed)``.
The simulator's recorded per-job JCTs are fixtures (``tests/fixtures/conformance/``, made by
``benchmarks/conformance_record.py``, which runs the simulator); this script and
``tests/test_conformance.py`` replay schedlab and compare: average JCT, makespan, average wait
(JCT - duration: neither side has a restart cost), and every job's JCT.

    python benchmarks/conformance.py [--trace philly-500 ...] [--case tiresias ...]
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import random
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT.parent / "shared" / "data" / "traces" / "philly" / "philly_jobs_pollux.csv"
FIXTURES = ROOT / "tests" / "fixtures" / "conformance"
CLUSTER = "32x4"  # the simulator's n32g4.csv: 1 switch, 32 nodes, 4 GPUs each
PEER_COLUMNS = ["job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval"]

#: name -> (jobs, seed of the start row)
TRACES = {"philly-500": (500, 3), "philly-2000": (2000, 2), "philly-5000": (5000, 3)}

#: name -> (schedlab policy, its parameters, the simulator's --schedule, its queue thresholds, its --scheme)
CASES = {
    "tiresias": ("tiresias", {"queue_thresholds": [3600.0], "promote_knob": 0.0, "semantics": "code"},
                 "dlas-gpu", [3600], "count"),
    "tiresias-k8": ("tiresias", {"queue_thresholds": [3600.0], "promote_knob": 8.0, "semantics": "code"},
                    "dlas-gpu-8", [3600], "count"),
    "srtf": ("srtf", {}, "shortest", [3600], "count"),
    "fifo": ("fifo", {}, "fifo", [3600], "count"),
    "fifo-yarn": ("fifo", {}, "fifo", [3600], "yarn"),
    "tiresias-yarn": ("tiresias", {"queue_thresholds": [3600.0], "promote_knob": 0.0, "semantics": "code"},
                      "dlas-gpu", [3600], "yarn"),
    "srtf-yarn": ("srtf", {}, "shortest", [3600], "yarn"),
}
#: the simulator's --scheme -> schedlab's placement
PLACEMENTS = {"count": "fewest-servers", "yarn": "strict-consolidated"}

#: the conformance bars: |avg JCT ours / peer - 1| at most, and the share of jobs within 1 s at least.
#: The ``-yarn`` cases other than fifo have none: the simulator's dlas-gpu never consults its placement
#: scheme (it counts GPUs under yarn too), and its shortest re-places every job from an empty cluster
#: at each event (running jobs move between servers for free); see docs/explanation/fidelity.md.
BARS = {"tiresias": (0.01, 0.95), "tiresias-k8": (0.01, 0.95), "srtf": (0.01, 0.0), "fifo": (0.01, 0.0),
        "fifo-yarn": (0.01, 0.95)}


def philly_trace(n: int, seed: int, source: Path = PHILLY) -> pd.DataFrame:
    """``n`` consecutive Philly jobs from a seeded start row, in the simulator's CSV columns.

    Rows are put in submit order (stable: ties keep file order); ``job_id`` is the job's 1-based data
    row in ``source`` (as schedlab's ``philly`` loader numbers them), zero-padded to six digits so that
    ties sort alike everywhere; submit times are whole seconds from the window's first job; ``duration``
    as in the file (whole seconds); ``iterations`` repeats the duration and ``model_name`` is
    ``resnet50`` (the simulator needs both, neither changes its count placement)."""
    df = _philly(str(source))
    start = random.Random(seed).randrange(len(df) - n)
    w = df.iloc[start : start + n]
    submit = (w["t"] - w["t"].iloc[0]).to_numpy()
    out = pd.DataFrame({
        "job_id": [f"{r:06d}" for r in w["row"]],
        "num_gpu": w["num_gpus"].astype(int).to_numpy(),
        "submit_time": submit,
        "iterations": w["duration"].astype(int).to_numpy(),
        "model_name": "resnet50",
        "duration": w["duration"].astype(int).to_numpy(),
    })
    out["interval"] = pd.Series(submit).diff().shift(-1).fillna(0).astype(int).to_numpy()
    return out[PEER_COLUMNS]


@functools.lru_cache(maxsize=2)
def _philly(source: str) -> pd.DataFrame:
    """The Philly CSV in submit order (stable), with each job's 1-based data row and whole-second submit time."""
    df = pd.read_csv(source, usecols=["timestamp", "duration", "num_gpus"])
    df["row"] = range(1, len(df) + 1)
    df["t"] = (pd.to_datetime(df["timestamp"]) - pd.Timestamp("2017-01-01")).dt.total_seconds().astype("int64")
    return df.sort_values("t", kind="stable").reset_index(drop=True)


def write_trace(df: pd.DataFrame, path: Path) -> Path:
    df.to_csv(path, index=False, quoting=csv.QUOTE_MINIMAL)
    return path


def run_ours(trace_csv: Path, case: str) -> pd.DataFrame:
    """schedlab on the simulator-format trace: ``job_id`` (int), ``jct_s``, ``duration``, ``preemptions``."""
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.traces import load_trace

    policy, params, _, _, scheme = CASES[case]
    table, _ = load_trace(trace_csv, "tiresias")
    spec = ReplaySpec(cluster=CLUSTER, policies=[{"name": policy, "params": params or {}}],
                      placement=PLACEMENTS[scheme], preemption_overhead_s=0.0)
    [result] = run(spec, prepare(spec, table))
    return per_job(result.jobs)


def per_job(jobs: pd.DataFrame) -> pd.DataFrame:
    """A replay's job table in the columns :func:`compare` reads (``job_id`` as an int)."""
    return pd.DataFrame({
        "job_id": jobs["job_id"].astype(int).to_numpy(),
        "submit_time": jobs["submit_time"].to_numpy(),
        "jct_s": jobs["jct_s"].to_numpy(),
        "duration": jobs["duration"].to_numpy(),
        "preemptions": jobs["preemptions"].to_numpy(),
    })


def fixture_path(trace: str, case: str) -> Path:
    return FIXTURES / f"{trace}-{case}.csv"


def load_expected(trace: str, case: str) -> pd.DataFrame:
    """The simulator's recorded per-job figures: ``job_id``, ``jct_s``, ``preempt``."""
    return pd.read_csv(fixture_path(trace, case))


def compare(ours: pd.DataFrame, peer: pd.DataFrame) -> dict:
    """Average JCT, makespan, average wait and per-job JCT agreement of ``ours`` with ``peer``."""
    both = ours.merge(peer, on="job_id", suffixes=("", "_peer"), validate="one_to_one")
    if len(both) != len(ours) or len(both) != len(peer):
        raise ValueError(f"job ids differ: ours {len(ours)}, peer {len(peer)}, common {len(both)}")
    diff = (both["jct_s"] - both["jct_s_peer"]).abs()
    end, end_peer = both["submit_time"] + both["jct_s"], both["submit_time"] + both["jct_s_peer"]
    start = both["submit_time"].min()
    return {
        "jobs": len(both),
        "avg_jct_s": float(both["jct_s"].mean()),
        "avg_jct_s_peer": float(both["jct_s_peer"].mean()),
        "avg_jct_rel": float(both["jct_s"].mean() / both["jct_s_peer"].mean() - 1),
        "makespan_s": float(end.max() - start),
        "makespan_s_peer": float(end_peer.max() - start),
        "avg_wait_s": float((both["jct_s"] - both["duration"]).mean()),
        "avg_wait_s_peer": float((both["jct_s_peer"] - both["duration"]).mean()),
        "within_1s": float((diff <= 1.0).mean()),
        "max_abs_diff_s": float(diff.max()),
        "preemptions": int(both["preemptions"].sum()),
        "preemptions_peer": int(both["preempt"].sum()) if "preempt" in both else None,
    }


def row(r: dict, width: int) -> str:
    """One comparison as a table row: trace, case, avg JCT ours/peer/rel, makespans, waits, share within
    1 s, largest difference."""
    return (f"{r['trace']:{width}s} {r['case']:{width}s} {r['avg_jct_s']:12.0f} {r['avg_jct_s_peer']:10.0f}"
            f" {100 * r['avg_jct_rel']:+6.2f}% {r['makespan_s']:9.0f} {r['makespan_s_peer']:9.0f}"
            f" {r['avg_wait_s']:9.0f} {r['avg_wait_s_peer']:9.0f} {100 * r['within_1s']:5.1f}%"
            f" {r['max_abs_diff_s']:8.0f}")


def parse_args(doc: str, traces: dict, cases: dict) -> argparse.Namespace:
    """The comparison scripts' options: traces, cases, the Philly CSV (checked), JSON output."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", nargs="+", default=list(traces), choices=list(traces))
    parser.add_argument("--case", nargs="+", default=list(cases), choices=list(cases))
    parser.add_argument("--source", default=str(PHILLY), help="the Philly CSV (philly_jobs_pollux.csv)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per comparison")
    args = parser.parse_args()
    if not Path(args.source).exists():
        sys.exit(f"Philly trace not found: {args.source} (pass --source)")
    return args


def main() -> None:
    args = parse_args(__doc__, TRACES, CASES)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if not args.json:
            print(f"{'trace':12s} {'case':12s} {'avg JCT ours':>12s} {'peer':>10s} {'rel':>7s} {'makespan':>9s}"
                  f" {'peer':>9s} {'wait':>9s} {'peer':>9s} {'<=1 s':>6s} {'max |d|':>8s} {'preempt':>8s} {'peer':>6s}")
        for trace in args.trace:
            n, seed = TRACES[trace]
            path = write_trace(philly_trace(n, seed, Path(args.source)), Path(tmp) / f"{trace}.csv")
            for case in args.case:
                if not fixture_path(trace, case).exists():
                    print(f"{trace:12s} {case:12s} (no recorded peer output)")
                    continue
                started = time.perf_counter()
                r = compare(run_ours(path, case), load_expected(trace, case))
                r.update(trace=trace, case=case, seconds=time.perf_counter() - started)
                if args.json:
                    print(json.dumps(r))
                    continue
                print(row(r, 12) + f" {r['preemptions']:8d} {r['preemptions_peer']:6d}", flush=True)


if __name__ == "__main__":
    main()
