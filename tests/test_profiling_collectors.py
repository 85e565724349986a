"""Collector windowing, the host collector, the NVML "not available" path, MPS set-up."""
from __future__ import annotations

import time

import pytest
from schedlab.profiling import nvml
from schedlab.profiling.collectors import MIN_INTERVAL_S, Collector, HostCollector
from schedlab.profiling.indicators import percentile
from schedlab.profiling.mps import MpsDaemon, MpsError


class Counting(Collector):
    """A real collector whose reading is the sample number (NaN every third)."""

    name = "counting"
    indicators = ("X",)

    def __init__(self, interval_s: float) -> None:
        super().__init__(interval_s)
        self.n = 0

    def sample(self) -> dict[str, float | None]:
        self.n += 1
        return {"X": float("nan") if self.n % 3 == 0 else float(self.n)}


def test_interval_minimum() -> None:
    with pytest.raises(ValueError):
        Counting(MIN_INTERVAL_S / 2)
    Counting(MIN_INTERVAL_S)


def test_window_uses_overlapping_samples_and_skips_nan() -> None:
    c = Counting(1.0)
    c.times = [10.0, 11.0, 12.0, 13.0, 14.0]
    c.samples = [{"X": 1.0}, {"X": 2.0}, {"X": float("nan")}, {"X": 4.0}, {"X": 5.0}]
    # window [11.2, 12.5] overlaps coverage (11,12] and (12,13]
    assert c.window(11.2, 12.5) == c.samples[2:4]
    assert c.summary(11.2, 12.5)["X"] == (4.0, 4.0)
    m, p = c.summary(9.5, 14.0)["X"]
    assert m == pytest.approx(3.0) and p == pytest.approx(percentile([1, 2, 4, 5], 95))
    assert c.summary(20, 21)["X"] == (None, None)


def test_stop_takes_a_final_sample_covering_short_windows() -> None:
    c = Counting(0.5).start()
    t0 = time.time()
    time.sleep(0.05)
    t1 = time.time()
    c.stop()
    assert len(c.samples) == 2 and c.summary(t0, t1)["X"][0] is not None


def test_host_collector() -> None:
    with HostCollector(0.1) as h:
        time.sleep(0.35)
    s = h.summary(h.times[0], h.times[-1])
    assert 0.0 <= s["CPU"][0] <= 1.0
    assert s["NETTX"][0] is not None and s["NETTX"][0] >= 0


def test_percentile_matches_numpy() -> None:
    np = pytest.importorskip("numpy")
    xs = [3.0, 1.0, 7.0, 2.5, 9.0, 4.0]
    assert percentile(xs, 95) == pytest.approx(float(np.percentile(xs, 95)))


def test_nvml_not_available_without_gpu() -> None:
    ok, reason = nvml.probe()
    if ok:
        pytest.skip(f"NVML present here: {reason}")
    assert "not available" in reason
    with pytest.raises(nvml.NvmlUnavailable, match="not available"):
        nvml.NvmlCollector(["0"], interval_s=0.1)


def test_gpm_metric_ids_exist_in_pynvml() -> None:
    pynvml = pytest.importorskip("pynvml")
    for name, scale in nvml.GPM_METRICS.values():
        assert isinstance(getattr(pynvml, name), int), name
        assert scale in (0.01, 1024 * 1024)
    assert hasattr(pynvml, "nvmlGpmMetricsGet") and hasattr(pynvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX")


def test_mps_env_and_missing_binary(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = MpsDaemon(tmp_path, gpus=["1"], binary=None)
    d.binary = None
    e = d.env(30)
    assert e["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "pipe")
    assert e["CUDA_MPS_LOG_DIRECTORY"] == str(tmp_path / "log")
    assert e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30" and e["CUDA_VISIBLE_DEVICES"] == "1"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in d.env()
    with pytest.raises(MpsError, match="not found"):
        with d:
            pass
