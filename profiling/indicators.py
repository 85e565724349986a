"""The Castor hardware indicators (Castor §6.1, Table 2) and their DCGM field names.

DCGM ratios are 0-1, byte rates are bytes/s.  CPU is a 0-1 fraction of all cores,
NETTX/NETRX are host network bytes/s (Table 2 counts bits over IB; we keep bytes).
"""
from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

#: Castor indicator -> DCGM field (dcgm-exporter metric family name).
DCGM_FIELDS: dict[str, str] = {
    "SMACT": "DCGM_FI_PROF_SM_ACTIVE",
    "SMOCC": "DCGM_FI_PROF_SM_OCCUPANCY",
    "TENSO": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DRAMA": "DCGM_FI_PROF_DRAM_ACTIVE",
    "FP32A": "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "FP16A": "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "PCITX": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "PCIRX": "DCGM_FI_PROF_PCIE_RX_BYTES",
    "GRACT": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "NVLTX": "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "NVLRX": "DCGM_FI_PROF_NVLINK_RX_BYTES",
}
GPU_INDICATORS: tuple[str, ...] = tuple(DCGM_FIELDS)
HOST_INDICATORS: tuple[str, ...] = ("CPU", "NETTX", "NETRX")
ALL_INDICATORS: tuple[str, ...] = GPU_INDICATORS + HOST_INDICATORS

Sample = dict[str, Optional[float]]


def is_missing(v: Optional[float]) -> bool:
    """True for None and NaN: a missing indicator is never 0."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean_of(values: Iterable[Optional[float]]) -> Optional[float]:
    """Mean of the present values, None when all are missing."""
    xs = [float(v) for v in values if not is_missing(v)]
    return sum(xs) / len(xs) if xs else None
