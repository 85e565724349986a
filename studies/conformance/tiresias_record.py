"""Record the Tiresias simulator's per-job results as conformance fixtures (``tests/fixtures/conformance``).

Not run in CI: it needs the authors' simulator and Python 2.7. The simulator is
github.com/SymbioticLab/Tiresias, folder ``simulator/``, at commit ``PEER_COMMIT``; check it out
anywhere outside this repository (e.g. ``git clone https://github.com/SymbioticLab/Tiresias
/tmp/tiresias-peer``) and pass ``--peer``. Nothing of it is copied here: each run works on a
temporary copy of ``simulator/`` to which this script applies

- the queue set-up its README asks users to edit in ``jobs.py`` (``num_queue``, ``queue_limit``):
  two queues split at 3,600 GPU-seconds, the README's example 1;
- ``FIXES``, four one-line fixes of bugs in the simulator (below), each checked to apply exactly once;

and runs ``python2.7 run_sim.py --cluster_spec=<32 x 4 GPUs> --scheme=<count | yarn> --trace_file=<trace>
--schedule=<dlas-gpu | dlas-gpu-8 | shortest | fifo> --log_path=<tmp>`` (its ``n32g4.csv`` cluster; the
``count`` placement counts GPUs, as schedlab's ``fewest-servers`` does in effect; ``yarn`` places a job
on one node, or on whole nodes plus one for the rest, as ``strict-consolidated`` does). Its
``lp.py`` imports ``cplex`` at module level though only ``--scheme=balance`` uses it: a stub package
``cplex`` is put on its ``PYTHONPATH`` from a temporary folder. ``--py2-path`` must give numpy for
Python 2 (``pip install --target DIR numpy==1.16.6``).

Per (trace, case) it writes ``<trace>-<case>.csv`` with the simulator's ``job_id, jct_s, preempt``
(from its ``job.csv``: JCT, preemptions) and updates ``manifest.json`` (commit, flags, fixes, trace
definitions, the simulator's summary figures and run time). Traces are made by
``tiresias.philly_trace`` from the Philly CSV, never stored.

    python -m schedlab.studies.conformance.tiresias_record --peer /tmp/tiresias-peer --py2-path /tmp/py2site \\
        [--python /root/.pyenv/versions/2.7.18/bin/python] [--trace philly-500 ...] [--case tiresias ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from schedlab.studies.conformance.common import FIXTURES, PHILLY
from schedlab.studies.conformance.tiresias import CASES, PLACEMENTS, TRACES, philly_trace, write_trace

PEER_REPO = "github.com/SymbioticLab/Tiresias"
PEER_COMMIT = "959f9b08f44fa1b4f2b3aed79b01e4d439264a94"
CLUSTER_SPEC = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,32,4,40,256\n"  # n32g4.csv

#: (file, the function the line is in, old text, new text, why). Each must match exactly once there.
FIXES = [
    ("run_sim.py", "def dlas_sim_jobs",
     "jump_time = int(math.ceil((JOBS.queue_limit[qid] - rjob['executed_time'])/rjob['num_gpu']) + event_time)",
     "jump_time = int(math.ceil((JOBS.queue_limit[qid] - rjob['executed_time'] * rjob['num_gpu'])"
     " / float(rjob['num_gpu'])) + event_time)",
     "dlas-gpu demotes a multi-GPU job late: its next demotion event subtracts run seconds from a GPU-second"
     " threshold (and divides as integers); the job is demoted only at a later event"),
    ("run_sim.py", "def dlas_sim_jobs",
     "            event['end_jobs'] = end_events[0]['end_jobs']\n",
     "            event = dict(start_event, end_jobs=end_events[0]['end_jobs'])\n",
     "dlas: when a completion falls on an arrival's instant, the completing jobs are written into the arrival"
     " event itself; if a demotion or promotion comes first, the arrival keeps that stale list, and a job"
     " preempted meanwhile 'completes' at the arrival without having run its remaining time"),
    ("run_sim.py", "def main",
     "        job_dist_data = parse_job_dist()\n",
     "        job_dist_data = JOBS.job_dist_data = parse_job_dist()\n",
     "gittins reads JOBS.job_dist_data (get_gittins_index), which main never sets for --schedule=gittins"),
    ("cluster.py", "def empty_infra",
     "node.init_node(self.num_gpu_p_node, self.num_cpu_p_node)",
     "node.init_node(self.num_gpu_p_node, self.num_cpu_p_node, self.mem_p_node)",
     "empty_infra never resets node memory (init_node skips mem=0), so under --scheme=yarn the preemptive"
     " schedules re-place jobs on nodes whose memory is never given back, and jobs are silently lost"),
]
CPLEX_STUB = {
    "cplex/__init__.py": "",
    "cplex/exceptions.py": "class CplexError(Exception):\n    pass\n",
    "cplex/six/__init__.py": "",
    "cplex/six/moves.py": "range = xrange  # noqa: F821 (Python 2)\n",
}


def prepare(peer: Path, thresholds: list[int], into: Path) -> Path:
    """A patched copy of ``peer/simulator`` in ``into``."""
    sim = into / "simulator"
    shutil.copytree(peer / "simulator", sim)
    jobs = sim / "jobs.py"
    text = jobs.read_text()
    setup = (("        self.num_queue = 3\n", f"        self.num_queue = {len(thresholds) + 1}\n"),
             ("        self.queue_limit = [3250, 7200, 18000]\n", f"        self.queue_limit = {thresholds}\n"))
    for old, new in setup:
        if text.count(old) != 1:
            raise SystemExit(f"jobs.py: expected one {old.strip()!r}; is the simulator at {PEER_COMMIT}?")
        text = text.replace(old, new)
    jobs.write_text(text)
    for name, function, old, new, _ in FIXES:
        path = sim / name
        text = path.read_text()
        at = text.index(function)
        end = text.find("\ndef ", at + 1)
        end = len(text) if end < 0 else end
        if text[at:end].count(old) != 1:
            raise SystemExit(f"{name} {function}: the fix does not apply (expected one {old!r})")
        text = text[:at] + text[at:end].replace(old, new) + text[end:]
        path.write_text(text)
    (sim / "n32g4-conformance.csv").write_text(CLUSTER_SPEC)
    stub = into / "stub"
    for rel, body in CPLEX_STUB.items():
        (stub / rel).parent.mkdir(parents=True, exist_ok=True)
        (stub / rel).write_text(body)
    return sim


def run_peer(sim: Path, trace: Path, schedule: str, scheme: str, python: str,
             py2_path: str) -> tuple[pd.DataFrame, list[str]]:
    log = sim.parent / f"log-{schedule}-{trace.stem}"
    argv = [python, "run_sim.py", "--cluster_spec=n32g4-conformance.csv", f"--scheme={scheme}",
            f"--trace_file={trace}", f"--schedule={schedule}", f"--log_path={log}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([py2_path, str(sim.parent / "stub")]))
    out = subprocess.run(argv, cwd=sim, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"the simulator failed ({' '.join(argv)}):\n{out.stderr[-3000:]}")
    jobs = pd.read_csv(log / "job.csv")
    shown = [f"--trace_file=<{trace.name}>" if a.startswith("--trace_file=") else
             "--log_path=<tmp>" if a.startswith("--log_path=") else a for a in argv[1:]]
    return jobs, shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", required=True, help="a checkout of the Tiresias repository")
    parser.add_argument("--python", default="python2.7")
    parser.add_argument("--py2-path", required=True, help="a folder with numpy for Python 2.7")
    parser.add_argument("--trace", nargs="+", default=list(TRACES), choices=list(TRACES))
    parser.add_argument("--case", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--source", default=str(PHILLY))
    args = parser.parse_args()
    head = subprocess.run(["git", "-C", args.peer, "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = head.stdout.strip() if head.returncode == 0 else None
    if commit not in (None, PEER_COMMIT):
        print(f"warning: the peer is at {commit}, the fixes were written for {PEER_COMMIT}", file=sys.stderr)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    manifest_path = FIXTURES / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"runs": {}}
    manifest.update({
        "peer": {"repo": PEER_REPO, "commit": PEER_COMMIT, "folder": "simulator", "python": "2.7.18, numpy 1.16.6",
                 "cluster_spec": CLUSTER_SPEC.strip(), "queue_setup": "jobs.py num_queue/queue_limit as in CASES",
                 "fixes": [{"file": f, "in": fn, "old": o, "new": n, "why": w} for f, fn, o, n, w in FIXES]},
        "traces": {name: {"jobs": n, "seed": seed, "made_by": "schedlab.studies.conformance.tiresias.philly_trace",
                          "source": "philly_jobs_pollux.csv (Pollux OSDI'21 artifact)"}
                   for name, (n, seed) in TRACES.items()},
        "cases": {name: {"schedlab": {"policy": p, "params": prm, "placement": PLACEMENTS[scheme]},
                         "peer_schedule": s, "peer_scheme": scheme, "thresholds": t}
                  for name, (p, prm, s, t, scheme) in CASES.items()},
    })
    with tempfile.TemporaryDirectory() as tmp:
        for trace in args.trace:
            n, seed = TRACES[trace]
            path = write_trace(philly_trace(n, seed, Path(args.source)), Path(tmp) / f"{trace}.csv")
            for case in args.case:
                _, _, schedule, thresholds, scheme = CASES[case]
                work = Path(tmp) / f"{trace}-{case}"
                work.mkdir()
                sim = prepare(Path(args.peer), thresholds, work)
                started = time.perf_counter()
                jobs, argv = run_peer(sim, path, schedule, scheme, args.python, args.py2_path)
                seconds = time.perf_counter() - started
                if len(jobs) != n:
                    raise SystemExit(f"{trace} {case}: the simulator finished {len(jobs)} of {n} jobs")
                rows = pd.DataFrame({"job_id": jobs["job_id"].astype(int), "jct_s": jobs["JCT"].astype(int),
                                     "preempt": jobs["preempt"].astype(int)}).sort_values("job_id")
                rows.to_csv(FIXTURES / f"{trace}-{case}.csv", index=False)
                end = jobs["end_time"].astype(float)
                manifest["runs"][f"{trace}-{case}"] = {
                    "argv": argv, "seconds": round(seconds, 1), "jobs": len(jobs),
                    "avg_jct_s": float(jobs["JCT"].mean()),
                    "makespan_s": float(end.max() - jobs["submit_time"].min()),
                    "avg_wait_s": float((jobs["JCT"] - jobs["duration"]).mean()),
                    "preemptions": int(jobs["preempt"].sum()),
                }
                print(f"{trace} {case}: {len(jobs)} jobs, avg JCT {jobs['JCT'].mean():.1f} s, {seconds:.0f} s",
                      flush=True)
                manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
