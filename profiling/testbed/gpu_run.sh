#!/usr/bin/env bash
# The testbed on a lent GPU node in one call (docs/how-to/testbed.md, "On a GPU"):
#   profiling/testbed/gpu_run.sh OUT [--wheels DIR] [--device cuda|cpu] [--jobs 8] [--min-job-s 5]
#                                    [--max-job-s 20] [--budget-s 150] [testbed options …]
# Profiles what a generated mini trace needs (unless OUT/run/node/node.json exists from an earlier call:
# then it reuses it), runs the trace under fifo, sjf-bsbf and castor (MPS, the new job capped at 50 %,
# its partner uncapped as MPS leaves a running client; ξ predicted by the node's own table), replays
# each with the node's models and compares; packs OUT into at most five files (the node returns eight):
# testbed.tar.gz (every comparison, job table, activity log and the node's models; no checkpoints),
# profiles.parquet (the node's profile store), summary.json, run.log.
# The node's image has no pydantic or sortedcontainers (the engine and the policies need them): --wheels
# names a folder of their cp312 wheels, installed into a temporary folder (nothing else is installed):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d .testbed-wheels pydantic pydantic-core annotated-types typing-inspection typing-extensions sortedcontainers
# PYTHON picks the interpreter (default python3). Rehearse on the CPU: profiling/testbed/rehearse.sh.
set -uo pipefail
out=${1:?usage: profiling/testbed/gpu_run.sh OUT [--wheels DIR] [--device cuda|cpu] [options]}
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${PYTHON:-python3}
wheels="" device=cuda jobs=8 min_s=5 max_s=20 budget=150 extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --wheels) wheels=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --min-job-s) min_s=$2; shift 2 ;;
    --max-job-s) max_s=$2; shift 2 ;;
    --budget-s) budget=$2; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
mkdir -p "$out"
pkg=$(mktemp -d "${TMPDIR:-/tmp}/schedlab-testbed.XXXXXX")
trap 'rm -rf "$pkg"' EXIT
ln -s "$root" "$pkg/schedlab"
if [ -n "$wheels" ]; then
  "$python" -m pip install -q --no-index --no-deps --disable-pip-version-check --target "$pkg/site" "$wheels"/*.whl \
    || { echo "gpu_run: could not install the wheels in $wheels" >&2; exit 2; }
fi
export PYTHONPATH="$pkg:$pkg/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export DO_NOT_TRACK=true MLFLOW_DISABLE_TELEMETRY=true
if [ "$device" = cuda ]; then
  policies=(--policy fifo sjf-bsbf castor --set castor.predictor=null --set "castor.mps_shares=[50,100]")
else  # a rehearsal: no MPS on a CPU, castor time-sliced
  policies=(--policy fifo sjf-bsbf castor --set castor.predictor=null --set castor.mode=timeslice)
fi
source=(--generate "$jobs")
if [ -f "$out/run/node/node.json" ]; then  # an earlier call profiled: reuse its models and its trace
  source=(--trace "$out/run/trace.csv" --models "$out/run/node")
fi
{
  echo "gpu_run: $(date -Is) on $(hostname); device $device; $(cat /proc/loadavg)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || true
  "$python" -m schedlab.profiling.testbed "${source[@]}" --device "$device" "${policies[@]}" --out "$out/run" \
    --min-job-s "$min_s" --max-job-s "$max_s" --budget-s "$budget" "${extra[@]}"
} 2>&1 | tee -a "$out/run.log"
status=${PIPESTATUS[0]}
"$python" - "$out" <<'PY' 2>&1 | tee -a "$out/run.log"
import json, sys, tarfile
from pathlib import Path
out = Path(sys.argv[1])
run = out / "run"
if (run / "profiles" / "records").is_dir():
    from schedlab.profiling.store import ProfileStore
    ProfileStore(run / "profiles").pack(out / "profiles.parquet")
with tarfile.open(out / "testbed.tar.gz", "w:gz") as tar:
    tar.add(run, arcname="run", filter=lambda m: None if m.name.endswith("ckpt.pt") or "/profiles" in m.name else m)
summary = run / "summary.json"
if summary.exists():
    (out / "summary.json").write_text(summary.read_text())
sizes = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
print(f"gpu_run: packed {sizes}")
PY
exit "$status"
