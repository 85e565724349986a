#!/usr/bin/env bash
# Rehearse the GPU node's one call on this CPU machine (docs/how-to/gpu-node.md):
# a venv holding only packages the node's image has (no pydantic, xgboost, prefect, mlflow or dask),
# profiling/gpu_run.sh --device cpu twice (the second resumes from the first's pack), and the node's
# limits on what comes back (at most 8 files, 16 MiB each) checked. No extra files travel: the run
# path needs no wheels.
#   profiling/rehearse.sh [BUDGET_S]          # default 120 s a call
# The venv: profiling/node_venv.sh (REHEARSAL_VENV, REHEARSAL_PYTHON).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
budget=${1:-120}
venv=$("$root/profiling/node_venv.sh")
out=$(mktemp -d "${TMPDIR:-/tmp}/schedlab-rehearsal.XXXXXX")
run() { PYTHON="$venv/bin/python" "$root/profiling/gpu_run.sh" "$out/$1" --device cpu --size tiny --threads 1 \
          --budget-s "$budget" "${@:2}"; }
run 1
run 2 --resume "$out/1/profiles.parquet"
"$venv/bin/python" - "$out" "$budget" <<'PY'
import json, sys
from pathlib import Path
out, budget = Path(sys.argv[1]), float(sys.argv[2])
for call in ("1", "2"):
    files = [p for p in (out / call).rglob("*") if p.is_file()]
    sizes = {p.name: p.stat().st_size for p in files}
    summary = json.loads((out / call / "summary.json").read_text())
    ok = len(files) <= 8 and max(sizes.values()) <= 16 * 2**20 and summary["wall_s"] < budget
    print(f"call {call}: {len(files)} files, largest {max(sizes.values())} B, wall {summary['wall_s']} s "
          f"of {budget:g}, counts {summary['counts_this_call']}: {'ok' if ok else 'OVER THE LIMITS'}")
    if not ok:
        sys.exit(1)
first = json.loads((out / "1" / "summary.json").read_text())
second = json.loads((out / "2" / "summary.json").read_text())
if second["counts_this_call"].get("skipped") != first["configurations"]:
    sys.exit(f"call 2 did not resume: skipped {second['counts_this_call'].get('skipped')}, "
             f"call 1 measured {first['configurations']}")
print(f"rehearsal passed: {out}")
PY
