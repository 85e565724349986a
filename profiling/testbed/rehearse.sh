#!/usr/bin/env bash
# Rehearse the GPU node's testbed call on this CPU machine (docs/how-to/testbed.md, "On a GPU"): a venv holding
# only packages the node's image has, the wheels the testbed carries (pydantic and sortedcontainers, for
# this venv's Python), profiling/testbed/gpu_run.sh --device cpu, and the node's limits on what comes back
# (at most 8 files of at most 16 MiB) and the outputs checked (three policies compared, logs complete).
#   profiling/testbed/rehearse.sh [JOBS]          # default 4 jobs of 3-6 s
# The venv: profiling/node_venv.sh (REHEARSAL_VENV, REHEARSAL_PYTHON), shared with profiling/rehearse.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
jobs=${1:-4}
venv=$("$root/profiling/node_venv.sh" pydantic sortedcontainers xgboost prefect mlflow dask)
work=$(mktemp -d "${TMPDIR:-/tmp}/schedlab-testbed-rehearsal.XXXXXX")
version=$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
"$venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version "$version" \
  --platform manylinux2014_x86_64 -d "$work/wheels" pydantic pydantic-core annotated-types typing-inspection \
  typing-extensions sortedcontainers
echo "rehearse: wheels $(du -sh "$work/wheels" | cut -f1) in $work/wheels"
PYTHON="$venv/bin/python" "$root/profiling/testbed/gpu_run.sh" "$work/out" --wheels "$work/wheels" --device cpu \
  --jobs "$jobs" --min-job-s 3 --max-job-s 6 --budget-s 300 --profile-iters 5 --overhead-samples 1
"$venv/bin/python" - "$work/out" <<'PY'
import json, sys, tarfile
from pathlib import Path
out = Path(sys.argv[1])
files = [p for p in out.iterdir() if p.is_file()]
sizes = {p.name: p.stat().st_size for p in files}
assert len(files) <= 8 and max(sizes.values()) <= 16 * 2**20, f"over the node's limits: {sizes}"
summary = json.loads((out / "summary.json").read_text())
assert sorted(summary["policies"]) == ["castor", "fifo", "sjf-bsbf"], sorted(summary["policies"])
with tarfile.open(out / "testbed.tar.gz") as tar:
    names = tar.getnames()
for policy in ("fifo", "sjf-bsbf", "castor"):
    for part in ("comparison.json", "testbed/activity.jsonl", "testbed/jobs.parquet", "replay/jobs.parquet"):
        assert f"run/{policy}/{part}" in names, f"run/{policy}/{part} not packed"
    real = summary["policies"][policy]["real"]
    assert real["finished"] == real["jobs"], f"{policy}: {real}"
print(f"rehearsal passed: {len(files)} files {sizes}; {out}")
PY
