"""Conformance with Lucid's own simulator (github.com/S-Lab-System-Group/Lucid, ``simulation/``), job for
job (Lucid is Castor's and Gimbal's main baseline).

Lucid's simulator steps time by one second, one virtual cluster (VC) at a time, on 8-GPU nodes with its
``consolidate`` placement. The cases, each a policy of that simulator against schedlab's on the same
trace, in Lucid's own ``cluster_full_log.csv`` columns (schedlab reads them with its ``helios`` loader):

- ``lucid``: Lucid's ``lucid`` policy with an oracle workload estimate (priority = true duration x GPUs),
  without Prescient Adaptive Sharing (packing always allowed) and without the profiler; every job is a
  workload whose Packing Analyze label is 2 (BERT/SQuAD), so no pair qualifies and Lucid never packs,
  and schedlab's ``lucid`` under the ``analytic`` ξ scores every workload 2 as well. Compared: the queue
  order (lowest priority value first, a job that cannot start does not block), the placement, the timing.
- ``lucid-pack``: the same, but every job is a workload Lucid labels 0 whose measured pair with itself
  runs at full speed (TD3/BipedalWalker), against schedlab's ``lucid`` under ``analytic:1.0`` (score 0,
  ξ = 1): every waiting job may pack beside a running one of its GPU count (the time-aware rule
  decides), and packing costs no speed, so timings stay whole seconds; schedlab's ``lucid`` with
  ``artifact_pass: true`` (Lucid's pass: the first eligible running job in start order; the default
  takes the earliest-started head of each workload class, see docs/explanation/fidelity.md).
- ``fifo``: its ``fifo`` (strict arrival order) against schedlab's ``fifo``.
- ``sjf``: its ``sjf`` (sorted by duration, the first job that cannot start blocks the rest) against
  schedlab's ``sjf`` with ``blocking: true`` (the default lets smaller jobs pass).

Placement: the simulator's ``consolidate`` gives a job of at most 8 GPUs the fullest node that holds
it and a larger job whole free nodes (plus the most-free node for a remainder), or makes it wait:
schedlab's ``strict-best-fit``, used for every case (its default ``fewest-servers`` would spread a job
over partly free servers instead). Time: the simulator counts whole seconds; the traces have
whole-second submit times and durations.

Lucid's own Venus trace (``data/Venus/cluster_full_log.csv``) is not in its repository snapshot; the
traces are Philly-derived and made here (``lucid_trace``), never stored: ``n`` consecutive jobs of
the development data's ``traces/philly`` (up to a GPU count) from a seeded start row, on one VC of a few
8-GPU nodes (Lucid's Venus VCs have 1-32). The simulator's per-job results are fixtures
(``tests/fixtures/conformance/lucid-*``, made by ``lucid_record.py``).

    python -m schedlab.studies.conformance.lucid [--trace lucid-500 ...] [--case lucid ...]
"""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd

from schedlab.studies.conformance.common import PHILLY, helios_log, parse_args, per_job, philly_rows, print_comparisons

GPUS_PER_NODE = 8  # Lucid's placer supports no other
VC = "vcPhilly"
#: name -> (a workload of Lucid's ``analyzer/single_data.csv``: model, dataset, batch size, amp, GPU MiB;
#: schedlab's catalog workload standing for it; the ξ source that gives Lucid's pair speed and label)
WORKLOADS = {
    # label 2: no pair may pack (analytic ξ 1.5: schedlab scores every workload 2)
    "bert": (("BERT", "SQuAD", 32, 0, 20162.0), ("bert", 12.0), "analytic"),
    # label 0, and its measured pair with itself runs at full speed (``data/colocate_info.csv``: 1.000,
    # 1.000): every pair packs at ξ = 1, as under analytic:1.0 (score 0)
    "td3": (("TD3", "BipedalWalker", 32, 0, 2059.0), ("cifar10", 32.0), "analytic:1.0"),
}
LUCID_COLUMNS = ["job_id", "user", "vc", "jobname", "gpu_num", "cpu_num", "state", "submit_time", "duration",
                 "dataset", "model", "batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem"]

#: name -> (jobs, seed of the start row, largest job kept in GPUs, nodes of 8 GPUs in the VC)
TRACES = {"lucid-500": (500, 5, 8, 4), "lucid-2000": (2000, 2, 32, 56)}

#: name -> (schedlab policy, its parameters, the simulator's policy, the jobs' workload)
CASES = {
    "lucid": ("lucid", {}, "lucid", "bert"),
    "fifo": ("fifo", {}, "fifo", "bert"),
    "sjf": ("sjf", {"blocking": True}, "sjf", "bert"),
    "lucid-pack": ("lucid", {"artifact_pass": True}, "lucid", "td3"),
}

#: |avg JCT ours / peer - 1| at most, share of jobs within 1 s at least (the Tiresias conformance bars)
BARS = {"lucid": (0.01, 0.95), "fifo": (0.01, 0.95), "sjf": (0.01, 0.95), "lucid-pack": (0.01, 0.95)}


def lucid_trace(n: int, seed: int, max_gpus: int, workload: str = "bert", source: Path = PHILLY) -> pd.DataFrame:
    """``n`` consecutive Philly jobs of at most ``max_gpus`` GPUs and a positive duration from a seeded
    start row, in Lucid's trace columns.

    Other jobs are dropped first (Lucid's ``fifo``/``sjf`` never release a zero-length job); ``job_id``
    is the job's 1-based data row in ``source``, zero-padded to six digits so that jobs submitted in the
    same second sort alike everywhere (file order: schedlab's loader breaks ties by id text); submit
    times are datetimes from ``HELIOS_START`` (Lucid's Venus September window) (whole seconds after the window's first job); durations as in
    the file; every job is the ``WORKLOADS[workload]`` (the columns Lucid's profile tables are looked
    up by)."""
    df = philly_rows(str(source))
    if max_gpus < 1:
        raise ValueError(f"max_gpus must be >= 1, got {max_gpus}")
    df = df[(df["num_gpus"] <= max_gpus) & (df["duration"] > 0)].reset_index(drop=True)
    start = random.Random(seed).randrange(len(df) - n)
    w = df.iloc[start : start + n]
    model, dataset, batch, amp, gmem = WORKLOADS[workload][0]
    out = helios_log(w["row"], w["num_gpus"], w["t"], w["duration"], VC, "philly").assign(
        dataset=dataset, model=model, batchsize=batch, amp=amp, speed=0.0, gpu_util=0.0, gmem_util=0.0, gmem=gmem)
    return out[LUCID_COLUMNS]


def write_trace(df: pd.DataFrame, path: Path) -> Path:
    df.to_csv(path, index=False, date_format="%Y-%m-%d %H:%M:%S")
    return path


def run_ours(trace_csv: Path, case: str, nodes: int) -> pd.DataFrame:
    """schedlab on the Lucid-format trace on ``nodes`` x 8 GPUs under ``strict-best-fit``: ``job_id`` (int),
    ``submit_time``, ``jct_s``, ``duration``, ``preemptions``."""
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.traces import load_trace

    policy, params, _, workload = CASES[case]
    _, ours, interference = WORKLOADS[workload]
    table, _ = load_trace(trace_csv, "helios")
    table["model"], table["batch_size"] = ours  # the helios loader reads no workload columns
    spec = ReplaySpec(cluster=f"{nodes}x{GPUS_PER_NODE}", policies=[{"name": policy, "params": params or {}}],
                      placement="strict-best-fit", preemption_overhead_s=0.0, interference=interference)
    [result] = run(spec, prepare(spec, table))
    return per_job(result.jobs)


def main() -> None:
    args = parse_args(__doc__, TRACES, CASES)

    def replay(trace: str, case: str, folder: Path) -> pd.DataFrame:
        n, seed, max_gpus, nodes = TRACES[trace]
        workload = CASES[case][3]
        path = write_trace(lucid_trace(n, seed, max_gpus, workload, Path(args.source)), folder / f"{trace}-{workload}.csv")
        return run_ours(path, case, nodes)

    print_comparisons(args, 11, replay)


if __name__ == "__main__":
    main()
