#!/usr/bin/env bash
# Rehearse the GPU node's one call on this CPU machine (docs/how-to/gpu-node.md):
# a venv holding only packages the node's image has (no pydantic, xgboost, prefect, mlflow or dask),
# profiling/gpu_run.sh --device cpu twice (the second resumes from the first's pack), and the node's
# limits on what comes back (at most 8 files, 16 MiB each) checked. No extra files travel: the run
# path needs no wheels.
#   profiling/rehearse.sh [BUDGET_S]          # default 120 s a call
# REHEARSAL_PYTHON picks the interpreter for the venv (default python3). The node has Python 3.12;
# this machine's CPU build of torch (2.13.0) is a Python 3.11 wheel, so the default venv is 3.11.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
budget=${1:-120}
venv=${REHEARSAL_VENV:-${TMPDIR:-/tmp}/schedlab-node-venv}
if [ ! -x "$venv/bin/python" ]; then
  "${REHEARSAL_PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check torch==2.13.0 numpy pandas pyarrow pyyaml tqdm psutil \
    prometheus-client nvidia-ml-py scipy scikit-learn
fi
for absent in pydantic xgboost prefect mlflow dask; do
  if "$venv/bin/python" -c "import $absent" 2>/dev/null; then
    echo "rehearse: $venv has $absent, which the node's image lacks" >&2
    exit 1
  fi
done
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
