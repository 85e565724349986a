"""What the replay benchmarks share: the default trace, peak memory, and running one measurement in a
fresh subprocess (so that its peak memory and warm caches are its own).

A benchmark script calls :func:`run_isolated` with its own path and arguments; the child is the same
script run with ``--one``, and prints its result as one JSON line, last on stdout.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "philly" / "philly_jobs_pollux.csv"


def peak_mb() -> float:
    """This process's peak resident memory so far (max RSS, MB; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def require_trace(path: str | Path) -> None:
    if not Path(path).exists():
        sys.exit(f"trace not found: {path} (pass --trace)")


def run_isolated(script: str | Path, args: list[str]) -> dict:
    """Run ``script --one ARGS`` in a fresh interpreter; return the JSON object it printed last."""
    out = subprocess.run([sys.executable, str(script), "--one", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"{Path(script).name} --one {' '.join(args)} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
