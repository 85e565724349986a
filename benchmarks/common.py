"""What the benchmarks (and the studies) share: where the development data is, peak memory, and
running one measurement in a fresh subprocess (so that its peak memory and warm caches are its own).

A benchmark module calls :func:`run_isolated` with its own module name and arguments; the child is the
same module run with ``--one``, and prints its result as one JSON line, last on stdout.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the development data (real traces, published measurement tables), never copied into the repository:
#: ``$SCHEDLAB_DATA``, else the ``shared/data`` folder beside the checkout; every script that reads it also
#: takes a flag for another place
DATA = Path(os.environ.get("SCHEDLAB_DATA") or ROOT.parent / "shared" / "data")
DEFAULT_TRACE = DATA / "traces" / "philly" / "philly_jobs_pollux.csv"


def peak_mb() -> float:
    """This process's peak resident memory so far (max RSS, MB; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def require_trace(path: str | Path) -> None:
    if not Path(path).exists():
        sys.exit(f"trace not found: {path} (pass --trace)")


def run_isolated(module: str, args: list[str]) -> dict:
    """Run ``python -m MODULE --one ARGS`` in a fresh interpreter; return the JSON object it printed last."""
    out = subprocess.run([sys.executable, "-m", module, "--one", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"{module} --one {' '.join(args)} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
