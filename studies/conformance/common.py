"""What the conformance comparisons share: the Philly CSV they derive traces from, the recorded peer
outputs (``tests/fixtures/conformance/``), and the comparison of a replay with a peer, job for job."""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from schedlab.benchmarks.common import DATA, ROOT

PHILLY = DATA / "traces" / "philly" / "philly_jobs_pollux.csv"
FIXTURES = ROOT / "tests" / "fixtures" / "conformance"


@functools.lru_cache(maxsize=2)
def philly_rows(source: str) -> pd.DataFrame:
    """The Philly CSV in submit order (stable), with each job's 1-based data row and whole-second submit time."""
    df = pd.read_csv(source, usecols=["timestamp", "duration", "num_gpus"])
    df["row"] = range(1, len(df) + 1)
    df["t"] = (pd.to_datetime(df["timestamp"]) - pd.Timestamp("2017-01-01")).dt.total_seconds().astype("int64")
    return df.sort_values("t", kind="stable").reset_index(drop=True)


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


def joined(ours: pd.DataFrame, peer: pd.DataFrame) -> pd.DataFrame:
    """``ours`` and ``peer`` side by side, job for job (the peer's columns suffixed ``_peer``); a
    :class:`ValueError` when their job ids differ."""
    both = ours.merge(peer, on="job_id", suffixes=("", "_peer"), validate="one_to_one")
    if len(both) != len(ours) or len(both) != len(peer):
        raise ValueError(f"job ids differ: ours {len(ours)}, peer {len(peer)}, common {len(both)}")
    return both


def compare(ours: pd.DataFrame, peer: pd.DataFrame) -> dict:
    """Average JCT, makespan, average wait and per-job JCT agreement of ``ours`` with ``peer``."""
    both = joined(ours, peer)
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


def print_comparisons(args: argparse.Namespace, width: int, replay: Callable[[str, str, Path], pd.DataFrame],
                      preemptions: bool = False) -> None:
    """Every (trace, case) of ``args`` that has a recorded peer output: ``replay(trace, case, folder)``
    (schedlab's per-job table, ``folder`` a scratch folder for trace files) compared with the peer's, as a
    table row (``width``: of the trace and case columns; ``preemptions``: both sides' counts too) or, with
    ``--json``, one JSON object."""
    if not args.json:
        print(f"{'trace':{width}s} {'case':{width}s} {'avg JCT ours':>12s} {'peer':>10s} {'rel':>7s} {'makespan':>9s}"
              f" {'peer':>9s} {'wait':>9s} {'peer':>9s} {'<=1 s':>6s} {'max |d|':>8s}"
              + (f" {'preempt':>8s} {'peer':>6s}" if preemptions else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for trace in args.trace:
            for case in args.case:
                if not fixture_path(trace, case).exists():
                    print(f"{trace:{width}s} {case:{width}s} (no recorded peer output)")
                    continue
                started = time.perf_counter()
                r = compare(replay(trace, case, Path(tmp)), load_expected(trace, case))
                r.update(trace=trace, case=case, seconds=time.perf_counter() - started)
                if args.json:
                    print(json.dumps(r))
                    continue
                extra = f" {r['preemptions']:8d} {r['preemptions_peer']:6d}" if preemptions else ""
                print(row(r, width) + extra, flush=True)


def parse_args(doc: str, traces: dict, cases: dict, source: Path = PHILLY,
               what: str = "the Philly CSV (philly_jobs_pollux.csv)") -> argparse.Namespace:
    """The comparison scripts' options: traces, cases, the ``--source`` data (``what``; checked to exist),
    JSON output."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", nargs="+", default=list(traces), choices=list(traces))
    parser.add_argument("--case", nargs="+", default=list(cases), choices=list(cases))
    parser.add_argument("--source", default=str(source), help=what)
    parser.add_argument("--json", action="store_true", help="print one JSON object per comparison")
    args = parser.parse_args()
    if not Path(args.source).exists():
        sys.exit(f"not found: {args.source}, {what} (pass --source)")
    return args


#: the columns of a Helios-style ``cluster_log.csv`` (the Helios and Lucid simulators read these first)
HELIOS_COLUMNS = ["job_id", "user", "vc", "jobname", "gpu_num", "cpu_num", "state", "submit_time", "duration"]
#: both simulators' September window opens here
HELIOS_START = pd.Timestamp("2020-09-01 00:00:00")


def helios_log(rows: pd.Series, gpus: pd.Series, seconds: pd.Series, durations: pd.Series, vc: str,
               jobname: str) -> pd.DataFrame:
    """A window of trace rows in the Helios simulator's ``cluster_log.csv`` columns (as the Lucid simulator
    reads them too): ids from the source rows, one user, one VC, submit times from :data:`HELIOS_START`
    on (``seconds`` from the source's clock), whole-second durations."""
    return pd.DataFrame({
        "job_id": [f"{r:06d}" for r in rows],
        "user": "u0",
        "vc": vc,
        "jobname": jobname,
        "gpu_num": gpus.astype(int).to_numpy(),
        "cpu_num": 0,
        "state": "COMPLETED",
        "submit_time": HELIOS_START + pd.to_timedelta(seconds - seconds.iloc[0], unit="s").to_numpy(),
        "duration": durations.astype(int).to_numpy(),
    })


