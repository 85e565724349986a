"""Device selection, iteration timing and environment facts for a profile record
(Castor §7: per-configuration performance data)."""
from __future__ import annotations

import os
import platform
import resource
import socket
import time
from typing import Any, Optional

import torch


def resolve(device: str = "auto") -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, not {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda requested but torch sees no CUDA device")
    return device


class IterTimer:
    """Per-iteration times: CUDA events on a GPU (read after one final sync), wall
    clock (``perf_counter``) on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._events: list[tuple[Any, Any]] = []
        self._wall: list[float] = []
        self._t0 = 0.0
        self._cur: Any = None

    def start(self) -> None:
        if self.cuda:
            self._cur = torch.cuda.Event(enable_timing=True)
            self._cur.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((self._cur, end))
        else:
            self._wall.append(time.perf_counter() - self._t0)

    def times_s(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1000.0 for a, b in self._events]
        return list(self._wall)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> tuple[int, str]:
    """(bytes, source): CUDA allocator peak on a GPU, process max RSS on the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda_max_allocated"
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "max_rss"


def env_info(device: torch.device) -> dict[str, Optional[str]]:
    """Host, GPU model/UUID, driver, torch and CUDA versions."""
    info: dict[str, Optional[str]] = {
        "host": socket.gethostname(), "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda, "gpu_model": None, "gpu_uuid": None, "driver_version": None,
        "cpu_model": platform.processor() or platform.machine(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu_model"] = props.name
        uuid = getattr(props, "uuid", None)
        info["gpu_uuid"] = None if uuid is None else ("GPU-" + str(uuid) if not str(uuid).startswith("GPU-") else str(uuid))
        try:
            import pynvml

            pynvml.nvmlInit()
            v = pynvml.nvmlSystemGetDriverVersion()
            info["driver_version"] = v.decode() if isinstance(v, bytes) else str(v)
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return info


def visible_gpus() -> list[str]:
    """The GPU indices this process was given (CUDA_VISIBLE_DEVICES), default ["0"]."""
    v = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [x for x in v.split(",") if x] or ["0"]
