"""Conformance: schedlab's ``gavel`` against Gavel's own simulator, job for job.

Gavel (github.com/stanford-futuredata/gavel, ``scheduler/``) simulates its policies in 360 s rounds.
Its ``max_min_fairness`` (LAS with equal weights, one V100 type, no space sharing) on its shipped
96-job trace ``traces/physical_cluster/max_min_fairness.trace``, 16 V100s, is recorded per job in
``tests/fixtures/conformance/gavel-<trace>-<policy>.csv`` by ``gavel_record.py`` (the
trace's facts, each job's solo V100 duration and the simulator's JCT). This script replays the same
jobs through schedlab's ``gavel`` (16 GPUs, no restart cost: Gavel's simulator charges none, and no
pairs: ``space_sharing`` off, as the unpacked policy) and compares average JCT, makespan, average
wait and every job's JCT with ``common.compare``.

Cases (``CASES``): ``gavel``, schedlab's defaults; ``gavel-interval``, the re-solve interval counted
from time 0 (``resolve_after_start: false``, schedlab's earlier rule); ``gavel-ecos-ties``, the LP's
equal jobs kept bit-equal as ECOS, Gavel's solver, returns them (``refine_tolerance: 0``,
``allocation_decimals: 9``); and the same against the simulator run with fractional steps (analysis
only: it removes the whole-step rounds, the one difference schedlab does not model). See docs/explanation/fidelity.md,
"How close each baseline is to its authors' code".

    python -m schedlab.studies.conformance.gavel [--case gavel ...] [--jobs]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from schedlab.studies.conformance.common import FIXTURES, compare

MANIFEST = FIXTURES / "gavel-manifest.json"
CLUSTER = "16x1"  # the simulator's -c 16:0:0 with its default one GPU per server
TRACE, PEER_POLICY = "max_min_fairness", "max_min_fairness"  # its 96-job trace and its unpacked LAS
PEER_FLAGS = ["-c", "16:0:0", "--seed", "0", "--solver", "ECOS"]
#: the simulator as shipped, and (analysis only) with fractional steps: each round then runs exactly
#: 360 s of every job instead of its whole steps, int(throughput x 360) (see conformance_gavel_record)
VARIANTS = ("whole-steps", "fractional-steps")
_BASE = {"objective": "max_min_fairness", "space_sharing": False}
_ECOS_TIES = dict(_BASE, refine_tolerance=0.0, allocation_decimals=9)

#: name -> (the simulator's variant, schedlab's gavel parameters, least share of jobs within 1 s)
CASES = {
    "gavel": ("whole-steps", dict(_BASE), 0.0),
    "gavel-interval": ("whole-steps", dict(_BASE, resolve_after_start=False), 0.0),
    "gavel-ecos-ties": ("whole-steps", _ECOS_TIES, 0.0),
    "gavel-ecos-ties-fractional": ("fractional-steps", _ECOS_TIES, 0.9),
}
#: the conformance bar: |avg JCT ours / peer - 1| at most
AVG_JCT_BAR = 0.01


def fixture_path(variant: str) -> Path:
    return FIXTURES / f"gavel-{TRACE}-{variant}.csv"


def load_expected(case: str) -> pd.DataFrame:
    """The simulator's recorded jobs: ``job_id, job_type, scale_factor, total_steps, arrival_time,
    duration_s, jct_s``."""
    return pd.read_csv(fixture_path(CASES[case][0]))


def job_table(peer: pd.DataFrame) -> pd.DataFrame:
    """The recorded jobs as schedlab's canonical table. Ids are zero-padded so that jobs arriving
    together keep Gavel's order (its job ids, in file order)."""
    return pd.DataFrame({"job_id": [f"{i:03d}" for i in peer["job_id"]], "submit_time": peer["arrival_time"],
                         "num_gpus": peer["scale_factor"], "duration": peer["duration_s"]})


def run_ours(case: str, peer: pd.DataFrame | None = None) -> pd.DataFrame:
    """schedlab's ``gavel`` on the case's jobs: ``job_id`` (int), ``submit_time``, ``jct_s``, ``duration``,
    ``preemptions``."""
    from schedlab.sched.replay import ReplaySpec, prepare, run

    peer = load_expected(case) if peer is None else peer
    spec = ReplaySpec(cluster=CLUSTER, policies=[{"name": "gavel", "params": CASES[case][1] or {}}],
                      preemption_overhead_s=0.0)
    [result] = run(spec, prepare(spec, job_table(peer)))
    jobs = result.jobs
    return pd.DataFrame({"job_id": jobs["job_id"].astype(int).to_numpy(), "submit_time": jobs["submit_time"].to_numpy(),
                         "jct_s": jobs["jct_s"].to_numpy(), "duration": jobs["duration"].to_numpy(),
                         "preemptions": jobs["preemptions"].to_numpy()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--jobs", action="store_true", help="also print every job's JCT, ours and the simulator's")
    parser.add_argument("--json", action="store_true", help="print one JSON object per case")
    args = parser.parse_args()
    for case in args.case:
        peer = load_expected(case)
        ours = run_ours(case, peer)
        r = compare(ours, peer)
        r["case"] = case
        if args.json:
            print(json.dumps(r))
        else:
            print(f"{case:26s} avg JCT {r['avg_jct_s']:.0f} s, simulator {r['avg_jct_s_peer']:.0f} s"
                  f" ({100 * r['avg_jct_rel']:+.2f}%); makespan {r['makespan_s']:.0f} / {r['makespan_s_peer']:.0f} s;"
                  f" wait {r['avg_wait_s']:.0f} / {r['avg_wait_s_peer']:.0f} s; jobs within 1 s"
                  f" {100 * r['within_1s']:.0f}%; max |d| {r['max_abs_diff_s']:.0f} s")
        if args.jobs:
            both = ours.merge(peer, on="job_id", suffixes=("", "_peer"))
            both["diff_s"] = both["jct_s"] - both["jct_s_peer"]
            print(both[["job_id", "arrival_time", "scale_factor", "duration", "jct_s_peer", "jct_s", "diff_s"]]
                  .to_string(index=False, float_format=lambda x: f"{x:.2f}"))


if __name__ == "__main__":
    main()
