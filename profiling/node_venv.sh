#!/usr/bin/env bash
# A venv of the GPU node image's packages only, for rehearsals on the CPU (profiling/rehearse.sh,
# profiling/testbed/rehearse.sh): made when absent, checked to lack the packages the image lacks.
#   venv=$(profiling/node_venv.sh [ABSENT …])     # default ABSENT: pydantic xgboost prefect mlflow dask
# REHEARSAL_VENV names it (default /tmp/schedlab-node-venv); REHEARSAL_PYTHON picks its interpreter (default
# python3). The node has Python 3.12; this machine's CPU build of torch (2.13.0) is a Python 3.11 wheel.
set -euo pipefail
venv=${REHEARSAL_VENV:-${TMPDIR:-/tmp}/schedlab-node-venv}
if [ ! -x "$venv/bin/python" ]; then
  "${REHEARSAL_PYTHON:-python3}" -m venv "$venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check torch==2.13.0 numpy pandas pyarrow pyyaml tqdm psutil \
    prometheus-client nvidia-ml-py scipy scikit-learn >&2
fi
for absent in "${@:-pydantic xgboost prefect mlflow dask}"; do
  for module in $absent; do
    if "$venv/bin/python" -c "import $module" 2>/dev/null; then
      echo "rehearse: $venv has $module, which the node's image lacks" >&2
      exit 1
    fi
  done
done
echo "$venv"
