"""Record the Helios simulator's per-job results as conformance fixtures
(``tests/fixtures/conformance/helios-*``, ``manifest-helios.json``).

Not run in CI: it needs the authors' code, github.com/S-Lab-System-Group/HeliosArtifact at
``PEER_COMMIT``, folder ``framework/QSSF Service``: pass ``--peer`` a checkout of that repository or its
git directory (a bare clone or mirror: the simulator's Python files are read from ``HEAD`` with git).
Nothing of it is copied here. Its ``simulator.py`` needs the Helios traces (not in the repository) and a
pickled VC table, so a driver of ours (``DRIVER``, written into a temporary copy of the folder) builds
one VC of the trace's nodes x 8 GPUs with its ``cluster.VC`` and runs its ``utils.simulate_vc`` (what
``simulator.py`` runs per VC) on the trace rows as its ``utils.trace_process`` leaves them (submit
times in seconds from the first job, ``remain`` = duration, its bookkeeping columns; sorted stably
where it sorts with pandas' default). For ``qssf`` the driver writes the prediction file its
``LGBEstimator`` reads (``estimators/<experiment>_lgb.csv``) with each job's true duration: an oracle.

``CHANGES`` are edits of the temporary copy that some cases ask for (``Case.peer_changes``): two fixes
of located bugs and one analysis switch. The recorder also runs ``consolidateFirst`` as published and
records how it fails. Per case it writes ``helios-<trace>-<case>.csv`` (``job_id, submit_time,
start_time, end_time, preemptions``: the simulator's log, ``preemptions`` its ``ckpt_times``).

    python -m schedlab.studies.conformance.helios_record --peer /work/.mirror/…/repo [--case ...]
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

from schedlab.studies.conformance.helios import (CASES, FIXTURES, GPUS_PER_NODE, ITP, PEER_COLUMNS, TRACES,
                                                 fixture_path, itp_trace, write_trace)

PEER_REPO = "github.com/S-Lab-System-Group/HeliosArtifact"
PEER_COMMIT = "bdaae109c21f8038a2331e6a23a582d5ae78ab5b"  # "Release full dataset & update scripts", its head
FOLDER = "framework/QSSF Service"

#: name -> (file, old text, new text, why): each must match exactly once in the copy
CHANGES = {
    "late_end": [
        ("policies/srtf.py",
         "            for job in run_ls:\n                if job['remain'] == 0:\n",
         "            for job in run_ls:\n                job['remain'] -= 1\n                if job['remain'] == 0:\n",
         "fix: srtf checks a running job's remaining time before taking off the second just run"
         " (policies/srtf.py:18, the decrement at :25), so every job ends, and frees its GPUs, one second"
         " after its remaining time reached 0: take the second off first"),
        ("policies/srtf.py",
         "                    self.run_list.remove(job)\n                else:\n                    job['remain'] -= 1\n",
         "                    self.run_list.remove(job)\n",
         "the same fix: the decrement moved above the check"),
    ],
    "no_restore": [
        ("policies/policy.py",
         "    def ckpt_overhead(self, job):\n",
         "    def ckpt_overhead(self, job):\n        return 0\n",
         "analysis: no restore overhead (policies/policy.py:45-52 adds 7 s at 1 GPU, 30 s up to 8, 60 s"
         " above to a preempted job's remaining time)"),
    ],
    "consolidate_first": [
        ("policies/placer/consolidateFirst.py",
         "self.consolidateSelect(job_gpu_num)",
         "self.consolidateFirstSelect(job_gpu_num)",
         "fix: ConsolidateFirstPlacement.place (policies/placer/consolidateFirst.py:79) calls"
         " self.consolidateSelect, a method of ConsolidatePlacement it does not have (its own is"
         " consolidateFirstSelect): every placement raises AttributeError"),
    ],
}

#: written into the simulator's copy and run there (its folder is then first on the import path):
#: argv = trace CSV, scheduler, placer, nodes, output CSV
DRIVER = r'''
import logging, sys, tempfile, types
import pandas as pd
import utils
from cluster import VC
from estimators import LGBEstimator

trace_csv, policy, placer, nodes, out_csv = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
columns = ["job_id", "user", "vc", "jobname", "gpu_num", "cpu_num", "state", "submit_time", "duration"]
df = pd.read_csv(trace_csv, parse_dates=["submit_time"], usecols=columns)
# as utils.trace_process leaves the rows (its VC and date-window filters keep every job of these traces)
df = df[df["gpu_num"] > 0]
df["submit_time"] = (df["submit_time"] - df["submit_time"].iloc[0]).dt.total_seconds().astype(int)
df["remain"] = df["duration"]
df[["start_time", "end_time"]] = sys.maxsize
df[["ckpt_times", "queue", "jct"]] = 0
df["status"] = None
df = df.sort_values("submit_time", kind="stable").reset_index(drop=True)
vc = VC(df["vc"].iloc[0], nodes, 8, 96)
extra = ()
if policy == "qssf":  # an oracle where LGBEstimator reads its predictions: each job's true duration
    df[["job_id"]].assign(priority=df["duration"]).to_csv("estimators/oracle_lgb.csv", index=False)
    extra = (LGBEstimator(types.SimpleNamespace(experiment_name="oracle")),)
log = logging.getLogger("helios-conformance")
log.setLevel(logging.WARNING)
with tempfile.TemporaryDirectory() as log_dir:
    utils.simulate_vc(utils.trace_parser(df), vc, placer, log_dir, policy, log, 0, *extra)
    result = pd.read_csv(f"{log_dir}/{vc.vc_name}/{policy}_{placer}_{vc.vc_name}_log.csv")
result = result.rename(columns={"ckpt_times": "preemptions"})
result[["job_id", "submit_time", "start_time", "end_time", "preemptions"]].to_csv(out_csv, index=False)
'''


def peer_commit(peer: Path) -> str | None:
    """The commit of a checkout or git directory (None when git cannot tell)."""
    for argv in (["git", "-C", str(peer), "rev-parse", "HEAD"], ["git", f"--git-dir={peer}", "rev-parse", "HEAD"]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return done.stdout.strip()
    return None


def copy_simulator(peer: Path, into: Path, changes: tuple[str, ...]) -> Path:
    """The simulator's Python files in ``into`` (from a checkout, or from a git directory's ``HEAD``),
    with ``changes`` applied."""
    simulation = into / "simulator"
    if (peer / FOLDER / "simulator.py").is_file():
        shutil.copytree(peer / FOLDER, simulation, ignore=lambda folder, names: [
            n for n in names if not n.endswith(".py") and not (Path(folder) / n).is_dir()])
    else:
        listed = subprocess.run(["git", f"--git-dir={peer}", "ls-tree", "-r", "--name-only", "HEAD", "--", FOLDER],
                                capture_output=True, text=True, check=False)
        names = [n for n in listed.stdout.splitlines() if n.endswith(".py")]
        if listed.returncode != 0 or f"{FOLDER}/simulator.py" not in names:
            raise SystemExit(f"{peer}: neither a checkout nor a git directory of {PEER_REPO} ({FOLDER}/simulator.py)")
        for name in names:
            text = subprocess.run(["git", f"--git-dir={peer}", "show", f"HEAD:{name}"], capture_output=True,
                                  check=True).stdout
            target = simulation / Path(name).relative_to(FOLDER)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text)
    (simulation / "estimators").mkdir(exist_ok=True)
    for change in changes:
        for name, old, new, _ in CHANGES[change]:
            path = simulation / name
            text = path.read_text()
            if text.count(old) != 1:
                raise SystemExit(f"{name}: change {change!r} does not apply (expected one {old!r}); is the peer at"
                                 f" {PEER_COMMIT}?")
            path.write_text(text.replace(old, new))
    return simulation


def run_peer(simulation: Path, trace_csv: Path, policy: str, placer: str, nodes: int, python: str,
             out: Path) -> subprocess.CompletedProcess:
    driver = simulation / "conformance_driver.py"
    driver.write_text(DRIVER)
    argv = [python, driver.name, str(trace_csv), policy, placer, str(nodes), str(out)]
    return subprocess.run(argv, cwd=simulation, capture_output=True, text=True, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", required=True, type=Path, help="a checkout or git directory of HeliosArtifact")
    parser.add_argument("--python", default=sys.executable, help="a Python 3 with pandas")
    parser.add_argument("--trace", nargs="+", default=list(TRACES), choices=list(TRACES))
    parser.add_argument("--case", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--source", default=str(ITP), help="the folder of the ITP traces (clusterNN.csv)")
    args = parser.parse_args()
    commit = peer_commit(args.peer)
    if commit != PEER_COMMIT:
        print(f"warning: the peer is at {commit}, the changes were written for {PEER_COMMIT}", file=sys.stderr)
    manifest_path = FIXTURES / "manifest-helios.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"runs": {}}
    manifest.update({
        "peer": {"repo": PEER_REPO, "commit": commit, "folder": FOLDER,
                 "vc": {"nodes": "per trace", "gpus_per_node": GPUS_PER_NODE, "cpus_per_node": 96},
                 "driver": "studies/conformance/helios_record.py DRIVER (utils.simulate_vc on one VC)",
                 "changes": {name: [{"file": f, "old": o, "new": n, "why": w} for f, o, n, w in edits]
                             for name, edits in CHANGES.items()}},
        "traces": {name: {"itp_cluster": t.cluster, "jobs": t.jobs, "seed": t.seed, "nodes": t.nodes,
                          "made_by": "studies/conformance/helios.py itp_trace",
                          "source": "ITP raw traces (ElasticFlow, ASPLOS'23)"}
                   for name, t in TRACES.items()},
        "cases": {name: {"peer": {"scheduler": c.peer_policy, "placer": c.peer_placer, "changes": list(c.peer_changes)},
                         "schedlab": {"policy": c.policy, "params": c.params, "placement": c.placement,
                                      "preemption_overhead_s": c.overhead, "late_end_s": c.late_end_s}}
                  for name, c in CASES.items()},
    })
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.trace:
            trace = TRACES[name]
            path = write_trace(itp_trace(trace, Path(args.source)), Path(tmp) / f"{name}.csv")
            published = copy_simulator(args.peer, Path(tmp) / "published", ())
            crash = run_peer(published, path, "fifo", "consolidateFirst", trace.nodes, args.python, Path(tmp) / "x.csv")
            if crash.returncode == 0:
                raise SystemExit("consolidateFirst as published ran: is the peer at the recorded commit?")
            manifest["published_consolidate_first"] = crash.stderr.strip().splitlines()[-1]
            for case in args.case:
                c = CASES[case]
                simulation = copy_simulator(args.peer, Path(tmp) / case, c.peer_changes)
                out = Path(tmp) / f"{name}-{case}.csv"
                started = time.perf_counter()
                done = run_peer(simulation, path, c.peer_policy, c.peer_placer, trace.nodes, args.python, out)
                seconds = time.perf_counter() - started
                if done.returncode != 0:
                    raise SystemExit(f"{case}: the simulator failed:\n{done.stderr[-3000:]}")
                jobs = pd.read_csv(out)
                if len(jobs) != trace.jobs or (jobs["end_time"] >= 2**62).any():
                    raise SystemExit(f"{name} {case}: the simulator did not finish all {trace.jobs} jobs")
                jobs = jobs[PEER_COLUMNS].astype(int).sort_values("job_id")
                jobs.to_csv(fixture_path(name, case), index=False)
                jct = jobs["end_time"] - jobs["submit_time"]
                manifest["runs"][f"{name}-{case}"] = {
                    "seconds": round(seconds, 1), "jobs": len(jobs), "avg_jct_s": float(jct.mean()),
                    "makespan_s": int(jobs["end_time"].max()),
                    "avg_wait_s": float((jobs["start_time"] - jobs["submit_time"]).mean()),
                    "preemptions": int(jobs["preemptions"].sum()),
                }
                print(f"{name} {case}: {len(jobs)} jobs, avg JCT {jct.mean():.1f} s, {seconds:.0f} s", flush=True)
                manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
