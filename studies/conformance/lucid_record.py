"""Record Lucid's simulator's per-job results as conformance fixtures (``tests/fixtures/conformance/lucid-*``).

Not run in CI: it needs the authors' code. The simulator is github.com/S-Lab-System-Group/Lucid, folder
``simulation/``, at commit ``PEER_COMMIT``; check it out anywhere outside this repository and pass
``--peer`` (its ``data/Venus/cluster_full_log.csv`` may be missing: it is not used). Nothing of it is
copied here: its ``simulator.py`` needs the Venus trace (absent from the repository snapshot) and its
trained estimators, so a driver (``DRIVER``, ours) imports its ``job``, ``cluster``, ``updater`` and
``policy`` modules from a temporary copy of ``simulation/`` (with ``FIXES`` applied) and runs one VC,
as its ``utils.simulate_vc`` does (``python driver.py TRACE POLICY OUT NODES``), with

- the trace rows as its ``utils.trace_process`` leaves them (submit times in seconds from the first
  job, ``remain`` = duration, the bookkeeping columns it adds), one VC of the trace's nodes x 8 GPUs, its
  ``consolidate`` placer (the default ``--placer``) and ``--num_gpus_per_node=8``;
- for ``lucid``: an oracle estimator (each job's estimate = its duration, where Lucid reads its
  GA2M estimates ``estimator/ebm/*.csv``), ``obtain_cluster_prediction`` skipped and ``check_pas``
  always 1 (no Prescient Adaptive Sharing: it needs the Venus throughput forecast aligned to the Venus
  trace and the profiler's scaling log), no profiler run (``--sweep`` runs none either), and its own
  ``data/colocate_info.csv`` (``ColocateUpdater``) and ``analyzer/single_data.csv`` (sharing labels).

``FIXES`` fix two peer bugs (below). Per (trace, case) it writes ``<trace>-<case>.csv`` with the
simulator's ``job_id, jct_s`` (its log's ``end_time - submit_time``) and records the run in
``manifest-lucid.json`` (commit, driver, fixes, trace definitions, the simulator's summary figures).

    python -m schedlab.studies.conformance.lucid_record --peer /tmp/lucid-peer [--python python3] [--trace ...] [--case ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from schedlab.studies.conformance.common import FIXTURES, PHILLY
from schedlab.studies.conformance.lucid import CASES, GPUS_PER_NODE, TRACES, VC, WORKLOADS, lucid_trace, write_trace

PEER_REPO = "github.com/S-Lab-System-Group/Lucid"
PEER_COMMIT = "63685a3ab7d15d8e940bb47ef98b6d5cca472b13"  # "Fix typo", the repository's head when recorded

#: (file, old text, new text, why): each must match exactly once, applied to a temporary copy
FIXES = [
    ("policy/lucid.py",
     '            for job in run_ls:\n                if job["remain"] <= 0:\n',
     '            for job in run_ls:\n                job["remain"] -= job["rate"]\n'
     '                if job["remain"] <= 0:\n',
     "lucid checks a job's remaining work before taking off the second just run, so every job holds its"
     " GPUs one second past its duration (its fifo and sjf end jobs at start + duration): take it off first"),
    ("policy/lucid.py",
     '                    self.run_list.remove(job)\n'
     '                    # if self.estimator.name != "LGBEstimator" and self.estimator.name != "PhillyEstimator":\n'
     '                    #     self.estimator.update_train_data(job)\n'
     '                else:\n                    job["remain"] -= job["rate"]\n',
     '                    self.run_list.remove(job)\n',
     "the same fix: the decrement moved above the check"),
    ("cluster.py",
     "            if v == gpu_list and k != job:\n",
     '            if v == gpu_list and k != job["job_id"]:\n',
     "check_colocate_jobs compares a job id with the job itself (always unequal), so when the first-placed"
     " job of a pair ends first it finds itself as its partner: the other job stays marked co-located (at"
     " its co-located speed, and never a packing target) until it ends"),
]

#: written into (the copy of) the peer's ``simulation/`` folder, whose modules it imports as its
#: neighbours, and run there: argv = trace CSV, policy, output CSV, nodes
DRIVER = r'''
import logging, sys, tempfile, types
import pandas as pd
from job import Job, Trace
from cluster import VC
from updater import ColocateUpdater
from policy import FirstInFirstOut, ShortestJobFirst, Lucid

trace_csv, policy, out_csv, nodes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
df = pd.read_csv(trace_csv, parse_dates=["submit_time"])
df = df.sort_values("submit_time", kind="stable")
df["submit_time"] = ((df["submit_time"] - df["submit_time"].iloc[0]).dt.total_seconds()).astype(int)
df["remain"] = df["duration"]
df[["start_time", "end_time"]] = sys.maxsize
df[["ckpt_times", "queue", "jct"]] = 0
df["status"] = None
trace = Trace()
for _, row in df.iterrows():
    trace.append_job(Job(row))
trace.sort_jobs("submit_time")
vc = VC(df["vc"].iloc[0], nodes, 8, 96)
log = logging.getLogger("lucid-conformance")
log.setLevel(logging.WARNING)

class OracleNoPasLucid(Lucid):
    def obtain_cluster_prediction(self):
        pass

    def check_pas(self):
        return 1

with tempfile.TemporaryDirectory() as log_dir:
    if policy == "lucid":
        estimate = types.SimpleNamespace(data=df[["job_id"]].assign(priority=df["duration"]), cluster_name="oracle")
        updater = ColocateUpdater(pd.read_csv("data/colocate_info.csv"))
        sim = OracleNoPasLucid(trace, vc, "consolidate", log_dir, log, 0, estimate, updater)
    else:
        sim = {"fifo": FirstInFirstOut, "sjf": ShortestJobFirst}[policy](trace, vc, "consolidate", log_dir, log, 0)
    sim.simulate()
    result = pd.DataFrame(sim.trace.job_list)
result["jct_s"] = result["end_time"] - result["submit_time"]
result[["job_id", "submit_time", "start_time", "end_time", "duration", "jct_s"]].to_csv(out_csv, index=False)
'''


def prepare(peer: Path, into: Path) -> Path:
    """A copy of ``peer/simulation`` in ``into`` with ``FIXES`` applied."""
    simulation = into / "simulation"
    shutil.copytree(peer / "simulation", simulation, ignore=shutil.ignore_patterns("*.ipynb", "cluster_*log.csv"))
    for name, old, new, _ in FIXES:
        path = simulation / name
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"{name}: the fix does not apply (expected one {old!r}); is the peer at {PEER_COMMIT}?")
        path.write_text(text.replace(old, new))
    return simulation


def run_peer(simulation: Path, trace: Path, policy: str, nodes: int, python: str, out: Path) -> pd.DataFrame:
    driver = simulation / "schedlab_driver.py"
    driver.write_text(DRIVER)
    argv = [python, str(driver), str(trace), policy, str(out), str(nodes)]
    done = subprocess.run(argv, cwd=simulation, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the simulator failed ({' '.join(argv)}):\n{done.stderr[-3000:]}")
    return pd.read_csv(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", required=True, help="a checkout of the Lucid repository")
    parser.add_argument("--python", default=sys.executable, help="a Python 3 with pandas and numpy")
    parser.add_argument("--trace", nargs="+", default=list(TRACES), choices=list(TRACES))
    parser.add_argument("--case", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--source", default=str(PHILLY))
    args = parser.parse_args()
    if not (Path(args.peer) / "simulation" / "policy" / "lucid.py").is_file():
        sys.exit(f"{args.peer}: not a Lucid checkout (no simulation/policy/lucid.py)")
    head = subprocess.run(["git", "-C", args.peer, "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = head.stdout.strip() if head.returncode == 0 else None
    if commit is not None and not commit.startswith(PEER_COMMIT):
        print(f"warning: the peer is at {commit}, the driver was written for {PEER_COMMIT}", file=sys.stderr)
    manifest_path = FIXTURES / "manifest-lucid.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"runs": {}}
    manifest.update({
        "peer": {"repo": PEER_REPO, "commit": PEER_COMMIT, "folder": "simulation", "placer": "consolidate",
                 "vc": {"name": VC, "nodes": "per trace", "gpus_per_node": GPUS_PER_NODE, "cpus_per_node": 96},
                 "driver": "schedlab.studies.conformance.lucid_record.DRIVER (oracle estimates, no PAS, no profiler)",
                 "workloads": {name: dict(zip(["model", "dataset", "batchsize", "amp", "gmem"], peer))
                               for name, (peer, _, _) in WORKLOADS.items()},
                 "fixes": [{"file": f, "old": o, "new": n, "why": w} for f, o, n, w in FIXES]},
        "traces": {name: {"jobs": n, "seed": seed, "max_gpus": g, "nodes": nodes,
                          "made_by": "schedlab.studies.conformance.lucid.lucid_trace",
                          "source": "philly_jobs_pollux.csv (Pollux OSDI'21 artifact)"}
                   for name, (n, seed, g, nodes) in TRACES.items()},
        "cases": {name: {"schedlab": {"policy": p, "params": prm, "placement": "strict-best-fit",
                                      "workload": WORKLOADS[w][1], "interference": WORKLOADS[w][2]},
                         "peer_policy": s, "workload": w}
                  for name, (p, prm, s, w) in CASES.items()},
    })
    with tempfile.TemporaryDirectory() as tmp:
        simulation = prepare(Path(args.peer), Path(tmp))
        for trace in args.trace:
            n, seed, max_gpus, nodes = TRACES[trace]
            for case in args.case:
                workload = CASES[case][3]
                trace_df = lucid_trace(n, seed, max_gpus, workload, Path(args.source))
                path = write_trace(trace_df, Path(tmp) / f"{trace}-{workload}.csv")
                started = time.perf_counter()
                out = Path(tmp) / f"{trace}-{case}-out.csv"
                jobs = run_peer(simulation, path, CASES[case][2], nodes, args.python, out)
                seconds = time.perf_counter() - started
                if len(jobs) != n or (jobs["end_time"] >= 2**62).any():
                    raise SystemExit(f"{trace} {case}: the simulator did not finish all {n} jobs")
                rows = jobs[["job_id", "jct_s"]].astype(int).sort_values("job_id")
                rows.to_csv(FIXTURES / f"{trace}-{case}.csv", index=False)
                manifest["runs"][f"{trace}-{case}"] = {
                    "policy": CASES[case][2], "seconds": round(seconds, 1), "jobs": len(jobs),
                    "avg_jct_s": float(jobs["jct_s"].mean()),
                    "makespan_s": float(jobs["end_time"].max() - jobs["submit_time"].min()),
                    "avg_wait_s": float((jobs["start_time"] - jobs["submit_time"]).mean()),
                }
                print(f"{trace} {case}: {len(jobs)} jobs, avg JCT {jobs['jct_s'].mean():.1f} s, {seconds:.0f} s",
                      flush=True)
                manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
