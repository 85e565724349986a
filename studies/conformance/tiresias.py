"""Conformance: schedlab's baselines against their authors' own simulators, job for job.

The Tiresias simulator (github.com/SymbioticLab/Tiresias, ``simulator/``; Gavel's simulator is in
``gavel.py``, Lucid's in ``lucid.py``, all three compared by ``common.compare``): its ``dlas-gpu``
(Tiresias, two queues split at 3,600 GPU-s), ``dlas-gpu-8`` (the same with promote knob 8), ``shortest`` (SRTF) and ``fifo``, with
its ``count`` placement (GPUs are counted, not placed; schedlab's ``fewest-servers``) and, in the
``-yarn`` cases, its ``yarn`` placement (a job on one server, or on whole servers plus one for the
rest; schedlab's ``strict-consolidated``), no restart cost, against schedlab's ``tiresias``
(``semantics: code``), ``srtf`` and ``fifo`` on the same traces, in the simulator's own CSV format, on
32 servers x 4 GPUs (its ``n32g4.csv``).

The traces are Philly-derived and made here, not stored: ``philly_trace(n, seed)`` takes ``n``
consecutive jobs (in submit order) of the Philly trace in the development data's ``traces/philly`` (the
Pollux artifact's ``philly_jobs_pollux.csv``) from a start row drawn with ``random.Random(seed)``.
The simulator's recorded per-job JCTs are fixtures (``tests/fixtures/conformance/``, made by
``python -m schedlab.studies.conformance.tiresias_record``, which runs the simulator); this module and
``tests/test_conformance.py`` replay schedlab and compare: average JCT, makespan, average wait
(JCT - duration: neither side has a restart cost), and every job's JCT.

    python -m schedlab.studies.conformance.tiresias [--trace philly-500 ...] [--case tiresias ...]
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

import pandas as pd

from schedlab.studies.conformance.common import PHILLY, parse_args, per_job, philly_rows, print_comparisons

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
    df = philly_rows(str(source))
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


def main() -> None:
    args = parse_args(__doc__, TRACES, CASES)

    def replay(trace: str, case: str, folder: Path) -> pd.DataFrame:
        path = folder / f"{trace}.csv"
        if not path.exists():  # one file per trace, for all its cases
            write_trace(philly_trace(*TRACES[trace], Path(args.source)), path)
        return run_ours(path, case)

    print_comparisons(args, 12, replay, preemptions=True)


if __name__ == "__main__":
    main()
