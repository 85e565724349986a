"""NVML collector for nodes without dcgm-exporter (Castor §6.1 indicators via NVML).

On any GPU: PCIe throughput (PCITX/PCIRX) and NVLink data counters (NVLTX/NVLRX), plus
``nvml_gpu_util``/``nvml_mem_util`` extras.  On Hopper or newer, GPM gives the DCGM
profiling indicators themselves; GPM reports percent 0-100 and MiB/s, DCGM ratios 0-1
and bytes/s, so GPM values are normalised to DCGM units.  Without a GPU (or without
``nvidia-ml-py``) ``probe()`` says why and ``NvmlCollector`` raises ``NvmlUnavailable``.
"""
from __future__ import annotations

import time
from typing import Any, Iterable, Optional

from .collectors import DEFAULT_INTERVAL_S, Collector
from .indicators import GPU_INDICATORS, Sample, mean_of

MIB = 1024 * 1024
_ALL_LINKS = 0xFFFFFFFF  # scopeId for the all-links NVLink throughput fields
#: Castor indicator -> (pynvml GPM metric constant name, scale to DCGM units)
GPM_METRICS: dict[str, tuple[str, float]] = {
    "SMACT": ("NVML_GPM_METRIC_SM_UTIL", 0.01),
    "SMOCC": ("NVML_GPM_METRIC_SM_OCCUPANCY", 0.01),
    "TENSO": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 0.01),
    "DRAMA": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 0.01),
    "FP32A": ("NVML_GPM_METRIC_FP32_UTIL", 0.01),
    "FP16A": ("NVML_GPM_METRIC_FP16_UTIL", 0.01),
    "GRACT": ("NVML_GPM_METRIC_GRAPHICS_UTIL", 0.01),
    "PCITX": ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", MIB),
    "PCIRX": ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", MIB),
    "NVLTX": ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", MIB),
    "NVLRX": ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", MIB),
}
EXTRAS = ("nvml_gpu_util", "nvml_mem_util", "nvml_sm_clock_mhz")


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here (no library, no driver, no GPU)."""


def _load() -> Any:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError as exc:
        raise NvmlUnavailable(f"NVML not available: nvidia-ml-py is not installed ({exc})") from exc
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        raise NvmlUnavailable(f"NVML not available: {type(exc).__name__}: {exc}") from exc
    return pynvml


def probe() -> tuple[bool, str]:
    """(available, reason).  Never raises."""
    try:
        nv = _load()
    except NvmlUnavailable as exc:
        return False, str(exc)
    try:
        n = nv.nvmlDeviceGetCount()
        return (n > 0), (f"{n} GPU(s), driver {nv.nvmlSystemGetDriverVersion()}" if n else "NVML not available: no GPU")
    finally:
        nv.nvmlShutdown()


def _str(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


class NvmlCollector(Collector):
    """Samples the Castor GPU indicators through NVML (GPM where supported)."""

    name = "nvml"
    indicators = GPU_INDICATORS + EXTRAS

    def __init__(self, gpus: Iterable[str] = ("0",), interval_s: float = DEFAULT_INTERVAL_S) -> None:
        super().__init__(interval_s)
        self.nv = _load()
        nv = self.nv
        self.handles = []
        for g in gpus:
            g = str(g)
            h = nv.nvmlDeviceGetHandleByUUID(g) if g.upper().startswith("GPU-") else nv.nvmlDeviceGetHandleByIndex(int(g))
            self.handles.append(h)
        self.driver = _str(nv.nvmlSystemGetDriverVersion())
        self.models = [_str(nv.nvmlDeviceGetName(h)) for h in self.handles]
        self.uuids = [_str(nv.nvmlDeviceGetUUID(h)) for h in self.handles]
        self.gpm = [self._gpm_supported(h) for h in self.handles]
        self.source = "nvml-gpm" if all(self.gpm) else "nvml"
        self._gpm_prev: list[Any] = [nv.nvmlGpmSampleAlloc() if s else None for s in self.gpm]
        self._gpm_cur: list[Any] = [nv.nvmlGpmSampleAlloc() if s else None for s in self.gpm]
        self._have_prev = [False] * len(self.handles)
        self._nvl_last: list[Optional[tuple[float, int, int]]] = [None] * len(self.handles)

    def _gpm_supported(self, h: Any) -> bool:
        try:
            return bool(self.nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
        except Exception:
            return False

    def _gpm(self, i: int) -> Sample:
        nv, h = self.nv, self.handles[i]
        nv.nvmlGpmSampleGet(h, self._gpm_cur[i])
        if not self._have_prev[i]:
            self._have_prev[i] = True
            self._gpm_prev[i], self._gpm_cur[i] = self._gpm_cur[i], self._gpm_prev[i]
            return {}
        req = nv.c_nvmlGpmMetricsGet_t()
        req.version = nv.NVML_GPM_METRICS_GET_VERSION
        wanted = [(k, getattr(nv, name, None), scale) for k, (name, scale) in GPM_METRICS.items()]
        wanted = [w for w in wanted if w[1] is not None]
        req.numMetrics = len(wanted)
        req.sample1, req.sample2 = self._gpm_prev[i], self._gpm_cur[i]
        for j, (_, mid, _) in enumerate(wanted):
            req.metrics[j].metricId = mid
        nv.nvmlGpmMetricsGet(req)
        self._gpm_prev[i], self._gpm_cur[i] = self._gpm_cur[i], self._gpm_prev[i]
        out: Sample = {}
        for j, (k, _, scale) in enumerate(wanted):
            m = req.metrics[j]
            out[k] = m.value * scale if m.nvmlReturn == nv.NVML_SUCCESS else None
        return out

    def _basic(self, i: int) -> Sample:
        nv, h = self.nv, self.handles[i]
        out: Sample = {}
        try:
            u = nv.nvmlDeviceGetUtilizationRates(h)
            out["nvml_gpu_util"], out["nvml_mem_util"] = u.gpu / 100.0, u.memory / 100.0
        except nv.NVMLError:
            out["nvml_gpu_util"] = out["nvml_mem_util"] = None
        try:  # the SM clock: a light job alone may run at a lower clock than beside a heavy one (DVFS)
            out["nvml_sm_clock_mhz"] = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        except nv.NVMLError:
            out["nvml_sm_clock_mhz"] = None
        for k, ctr in (("PCITX", nv.NVML_PCIE_UTIL_TX_BYTES), ("PCIRX", nv.NVML_PCIE_UTIL_RX_BYTES)):
            try:
                out[k] = nv.nvmlDeviceGetPcieThroughput(h, ctr) * 1024.0  # KB/s -> B/s
            except nv.NVMLError:
                out[k] = None
        try:
            fv = nv.nvmlDeviceGetFieldValues(h, [(nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, _ALL_LINKS),
                                                 (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, _ALL_LINKS)])
            if fv[0].nvmlReturn == nv.NVML_SUCCESS and fv[1].nvmlReturn == nv.NVML_SUCCESS:
                now, tx, rx = time.monotonic(), fv[0].value.ullVal, fv[1].value.ullVal
                last, self._nvl_last[i] = self._nvl_last[i], (now, tx, rx)
                if last is not None and now > last[0]:
                    out["NVLTX"] = (tx - last[1]) * 1024.0 / (now - last[0])  # KiB counters -> B/s
                    out["NVLRX"] = (rx - last[2]) * 1024.0 / (now - last[0])
        except Exception:  # NVMLError, or a binding older than the field-value tuple form: no NVLink rates
            pass
        return out

    def sample(self) -> Sample:
        per_gpu = []
        for i in range(len(self.handles)):
            s = self._basic(i)
            if self.gpm[i]:
                try:
                    s.update({k: v for k, v in self._gpm(i).items()})
                except Exception as exc:  # GPM refused this time: the basic readings still count
                    if len(self.errors) < 20:
                        self.errors.append(f"GPM: {type(exc).__name__}: {exc}")
            per_gpu.append(s)
        return {k: mean_of(s.get(k) for s in per_gpu) for k in self.indicators}

    def close(self) -> None:
        for buf in self._gpm_prev + self._gpm_cur:
            if buf is not None:
                try:
                    self.nv.nvmlGpmSampleFree(buf)
                except Exception:
                    pass
        self._gpm_prev, self._gpm_cur = [], []
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass
