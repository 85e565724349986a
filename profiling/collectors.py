"""Background indicator sampling (Castor §6.1, §7): a thread per collector takes one
sample every ``interval_s`` (default 1 s, minimum 100 ms); the steady-state window of a
run is summarised as mean and p95 per indicator.

A sample taken at ``t[i]`` covers ``(t[i-1], t[i]]`` (rates and utilisations are
averages since the previous read), so a window ``[t0, t1]`` uses every sample whose
coverage overlaps it; ``stop()`` takes a last sample, so short windows are covered.
"""
from __future__ import annotations

import threading
import time
from typing import Optional, Sequence

from .indicators import HOST_INDICATORS, Sample, is_missing, percentile

DEFAULT_INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.1


class Collector:
    """Base class: subclasses implement ``sample()`` returning indicator -> value."""

    name = "base"
    indicators: tuple[str, ...] = ()

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        if interval_s < MIN_INTERVAL_S:
            raise ValueError(f"sampling interval {interval_s}s is below the {MIN_INTERVAL_S}s minimum")
        self.interval_s = float(interval_s)
        self.times: list[float] = []
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    # -- to implement -------------------------------------------------------
    def sample(self) -> Sample:
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (NVML handles, sessions)."""

    # -- machinery ----------------------------------------------------------
    def _take(self) -> None:
        t = time.time()
        try:
            s = self.sample()
        except Exception as exc:  # a failed read is a missing sample, not a crash
            s = {k: None for k in self.indicators}
            if len(self.errors) < 20:
                self.errors.append(f"{type(exc).__name__}: {exc}")
        with self._lock:
            self.times.append(t)
            self.samples.append(s)

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            self._take()
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def start(self) -> "Collector":
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"collector-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None
            self._take()
        self.close()

    def __enter__(self) -> "Collector":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def window(self, t0: float, t1: float) -> list[Sample]:
        """Samples whose coverage interval overlaps ``[t0, t1]``."""
        with self._lock:
            times, samples = list(self.times), list(self.samples)
        out = []
        for i, (t, s) in enumerate(zip(times, samples)):
            prev = times[i - 1] if i else t - self.interval_s
            if t > t0 and prev < t1:
                out.append(s)
        return out

    def summary(self, t0: float, t1: float) -> dict[str, tuple[Optional[float], Optional[float]]]:
        """indicator -> (mean, p95) over the window; (None, None) when missing."""
        win = self.window(t0, t1)
        out: dict[str, tuple[Optional[float], Optional[float]]] = {}
        for k in self.indicators:
            xs = [float(s[k]) for s in win if not is_missing(s.get(k))]  # type: ignore[arg-type]
            out[k] = (sum(xs) / len(xs), percentile(xs, 95)) if xs else (None, None)
        return out


class HostCollector(Collector):
    """CPU utilisation (0-1 of all cores) and network bytes/s, via psutil (Table 2)."""

    name = "host"
    indicators = HOST_INDICATORS

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, exclude_nics: Sequence[str] = ("lo",)) -> None:
        super().__init__(interval_s)
        import psutil

        self._psutil = psutil
        self._exclude = set(exclude_nics)
        psutil.cpu_percent(interval=None)
        self._last = (time.monotonic(), self._net())

    def _net(self) -> tuple[int, int]:
        tx = rx = 0
        for nic, c in self._psutil.net_io_counters(pernic=True).items():
            if nic not in self._exclude:
                tx += c.bytes_sent
                rx += c.bytes_recv
        return tx, rx

    def sample(self) -> Sample:
        now, (tx, rx) = time.monotonic(), self._net()
        t_prev, (tx0, rx0) = self._last
        self._last = (now, (tx, rx))
        dt = now - t_prev
        cpu = self._psutil.cpu_percent(interval=None) / 100.0
        if dt <= 0:
            return {"CPU": cpu, "NETTX": None, "NETRX": None}
        return {"CPU": cpu, "NETTX": (tx - tx0) / dt, "NETRX": (rx - rx0) / dt}
