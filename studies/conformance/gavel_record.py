"""Record Gavel's simulator's per-job results as conformance fixtures (``tests/fixtures/conformance``).

Not run in CI: it needs the authors' code and cvxpy with ECOS. The simulator is
github.com/stanford-futuredata/gavel, folder ``scheduler/``, at commit ``PEER_COMMIT``; check it out
anywhere outside this repository and pass ``--peer``. Nothing of it is copied here: each run works on
a temporary copy of ``scheduler/``, run twice: as shipped (``whole-steps``) and, for analysis only,
with ``EDITS["fractional-steps"]`` (each round runs exactly 360 s of every job, not its whole steps).
``scheduler.py`` imports ``matrix_completion`` (used only to
estimate throughputs, off here) and the gRPC runtime (used only on a physical cluster) at module
level: empty stand-ins for both are put on its ``PYTHONPATH`` from a temporary folder. No peer bug is
fixed (none affects this policy; its ``fifo`` over-commits GPUs, see docs/explanation/fidelity.md). It runs

    python scripts/drivers/simulate_scheduler_with_trace.py -t traces/physical_cluster/<trace>.trace
        -p <policy> -c 16:0:0 --seed 0 --solver ECOS

(16 V100s; ``--throughputs_file`` and ``--time_per_iteration`` at their defaults,
``simulation_throughputs.json`` and 360 s) and writes ``gavel-<trace>-<variant>.csv``: one row per
job with the trace's facts (``job_type``, ``scale_factor``, ``total_steps``, ``arrival_time``), the
solo duration on a V100 (``total_steps`` / the file's isolated throughput of ``(job_type,
scale_factor)``) and the simulator's JCT (``jct_s``, from its "Job N: JCT" lines), one file per variant,
and ``gavel-manifest.json`` (commit, flags, stand-ins, edits, solver versions, summary figures). ``--python`` must
have numpy and cvxpy (with ECOS) installed, e.g. a virtual environment outside this repository.

    python -m schedlab.studies.conformance.gavel_record --peer /tmp/gavel --python /tmp/gavel-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from schedlab.studies.conformance.gavel import (FIXTURES, MANIFEST, PEER_FLAGS, PEER_POLICY, TRACE, VARIANTS,
                                                fixture_path)

PEER_REPO = "github.com/stanford-futuredata/gavel"
PEER_COMMIT = "c4fa40097339e9608ab71fd64c8bdea96a5e4a4c"
#: empty stand-ins for modules imported at module level but unused in simulation
STUBS = ("matrix_completion.py", "runtime/__init__.py", "runtime/rpc/__init__.py",
         "runtime/rpc/scheduler_server.py", "runtime/rpc/scheduler_client.py")
JOB_LINE = re.compile(r"^Job (\d+): ([0-9.]+)$", re.M)
#: variant -> (file, function, old text, new text, why): edits of the temporary copy, each matching once
EDITS = {
    "whole-steps": [],
    "fractional-steps": [
        ("scheduler.py", "def _get_num_steps",
         "                num_steps = int(single_job_throughput *\n",
         "                num_steps = (single_job_throughput *\n",
         "analysis only: a pair's steps per round not truncated to whole steps"),
        ("scheduler.py", "def _get_num_steps",
         "                # NOTE: Assumes oracle throughputs for single jobs.\n                num_steps = int(",
         "                # NOTE: Assumes oracle throughputs for single jobs.\n                num_steps = (",
         "analysis only: a job's steps per round not truncated to whole steps, so every job receives exactly"
         " 360 s a round (rounds last 360 s, not the longest whole-step time, about 359.99 s)"),
    ],
}


def read_trace(path: Path, throughputs: dict) -> pd.DataFrame:
    """Gavel's tab-separated trace (``utils.parse_trace``'s ten fields) with each job's V100 duration."""
    rows = []
    for i, line in enumerate(path.read_text().splitlines()):
        f = line.split("\t")
        if len(f) != 10:
            raise SystemExit(f"{path}:{i + 1}: expected 10 tab-separated fields, got {len(f)}")
        job_type, steps, scale, arrival = f[0], int(f[5]), int(f[6]), float(f[9])
        rate = throughputs["v100"][str((job_type, scale))]["null"]
        rows.append({"job_id": i, "job_type": job_type, "scale_factor": scale, "total_steps": steps,
                     "arrival_time": arrival, "duration_s": steps / rate})
    return pd.DataFrame(rows)


def edit(sched: Path, variant: str) -> None:
    """Apply ``EDITS[variant]`` to the copy in ``sched``, each within its function, exactly once."""
    for name, function, old, new, _ in EDITS[variant]:
        path = sched / name
        text = path.read_text()
        at = text.index(function)
        end = text.find("\n    def ", at + 1)
        end = len(text) if end < 0 else end
        if text[at:end].count(old) != 1:
            raise SystemExit(f"{name} {function}: the edit does not apply (expected one {old!r})")
        path.write_text(text[:at] + text[at:end].replace(old, new) + text[end:])


def run_peer(peer: Path, variant: str, python: str, into: Path) -> tuple[dict[int, float], str, list[str]]:
    sched = into / "scheduler"
    shutil.copytree(peer / "scheduler", sched, ignore=shutil.ignore_patterns("msr", "notebooks"))
    edit(sched, variant)
    stub = into / "stub"
    for rel in STUBS:
        (stub / rel).parent.mkdir(parents=True, exist_ok=True)
        (stub / rel).write_text("")
    argv = [python, "scripts/drivers/simulate_scheduler_with_trace.py", "-t",
            f"traces/physical_cluster/{TRACE}.trace", "-p", PEER_POLICY, *PEER_FLAGS]
    out = subprocess.run(argv, cwd=sched, env=dict(os.environ, PYTHONPATH=str(stub)), capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"the simulator failed ({' '.join(argv)}):\n{out.stderr[-3000:]}")
    text = out.stdout + out.stderr
    solver = subprocess.run([python, "-c", "import cvxpy, ecos; print(cvxpy.__version__, ecos.__version__)"],
                            capture_output=True, text=True, check=True).stdout.split()
    return {int(a): float(b) for a, b in JOB_LINE.findall(text)}, f"cvxpy {solver[0]}, ecos {solver[1]}", argv[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", required=True, help="a checkout of the Gavel repository")
    parser.add_argument("--python", required=True, help="a Python 3 with numpy, cvxpy and ecos")
    args = parser.parse_args()
    peer = Path(args.peer)
    head = subprocess.run(["git", "-C", args.peer, "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = head.stdout.strip() if head.returncode == 0 else None
    if commit not in (None, PEER_COMMIT):
        print(f"warning: the peer is at {commit}, the fixtures were made at {PEER_COMMIT}", file=sys.stderr)
    throughputs = json.loads((peer / "scheduler" / "simulation_throughputs.json").read_text())
    manifest = {"peer": {"repo": PEER_REPO, "commit": PEER_COMMIT, "folder": "scheduler", "stubs": list(STUBS),
                         "fixes": [], "variants": {v: [{"file": f, "in": fn, "old": o, "new": n, "why": w}
                                                       for f, fn, o, n, w in e] for v, e in EDITS.items()}},
                "runs": {}}
    jobs = read_trace(peer / "scheduler" / "traces" / "physical_cluster" / f"{TRACE}.trace", throughputs)
    for variant in VARIANTS:
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            jct, solver, argv = run_peer(peer, variant, args.python, Path(tmp))
            seconds = time.perf_counter() - started
        if sorted(jct) != jobs["job_id"].tolist():
            raise SystemExit(f"{variant}: the simulator reported {len(jct)} of {len(jobs)} jobs")
        jobs["jct_s"] = jobs["job_id"].map(jct)
        FIXTURES.mkdir(parents=True, exist_ok=True)
        jobs.to_csv(fixture_path(variant), index=False)
        end = jobs["arrival_time"] + jobs["jct_s"]
        manifest["runs"][f"{TRACE}-{variant}"] = {
            "argv": argv, "solver": solver, "seconds": round(seconds, 1), "jobs": len(jobs),
            "avg_jct_s": float(jobs["jct_s"].mean()), "makespan_s": float(end.max() - jobs["arrival_time"].min())}
        print(f"{TRACE} {variant}: {len(jobs)} jobs, avg JCT {jobs['jct_s'].mean():.1f} s ({solver})", flush=True)
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
