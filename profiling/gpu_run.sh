#!/usr/bin/env bash
# The whole GPU-node measurement in one call (docs/how-to/gpu-node.md; profiling/gpu_run.py):
#   profiling/gpu_run.sh OUT_DIR [--budget-s 540] [--resume PREVIOUS/profiles.parquet] [--device cpu --size tiny]
# Needs only what the node's image has (python3 with torch, numpy, pandas, pyarrow, pyyaml, tqdm, psutil,
# nvidia-ml-py): the repository root goes on the import path as the package `schedlab`, nothing is
# installed.  PYTHON picks the interpreter (default python3).  Writes OUT_DIR/{facts.json,summary.json,
# profiles.parquet,run.log}.
set -uo pipefail
out=${1:?usage: profiling/gpu_run.sh OUT_DIR [gpu_run options]}
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
pkg=$(mktemp -d "${TMPDIR:-/tmp}/schedlab-pkg.XXXXXX")
ln -s "$root" "$pkg/schedlab"
export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export DO_NOT_TRACK=true MLFLOW_DISABLE_TELEMETRY=true PREFECT_SERVER_ANALYTICS_ENABLED=false
"${PYTHON:-python3}" -m schedlab.profiling.gpu_run --out "$out" "$@" 2>&1 | tee "$out/run.log"
status=${PIPESTATUS[0]}
rm -rf "$pkg"
exit "$status"
