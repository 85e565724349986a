"""NVIDIA MPS control for spatially shared pairs (Castor §8: MPS with an active-thread
percentage per job).  The daemon gets private pipe and log directories, is started with
``nvidia-cuda-mps-control -d`` and is always stopped with ``echo quit | …`` -- also on
error, and a daemon left by a killed sweep in the same directories is quit first.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence

CONTROL = "nvidia-cuda-mps-control"


class MpsError(RuntimeError):
    """MPS could not be started (no binary, no GPU, daemon failed)."""


class MpsDaemon:
    """Context manager owning one MPS control daemon."""

    def __init__(self, root: str | os.PathLike[str], gpus: Sequence[str] = ("0",), binary: Optional[str] = None) -> None:
        self.root = Path(root)
        self.pipe_dir, self.log_dir = self.root / "pipe", self.root / "log"
        self.gpus = [str(g) for g in gpus]
        self.binary = binary or shutil.which(CONTROL)
        self.started = False

    def env(self, active_thread_percentage: Optional[float] = None) -> dict[str, str]:
        """Environment for the daemon (no percentage) or for one client."""
        e = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(self.pipe_dir),
                 CUDA_MPS_LOG_DIRECTORY=str(self.log_dir), CUDA_VISIBLE_DEVICES=",".join(self.gpus))
        if active_thread_percentage is not None:
            e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(int(round(active_thread_percentage)))
        return e

    def _control(self, command: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        assert self.binary
        return subprocess.run([self.binary], input=command + "\n", env=self.env(), text=True,
                              capture_output=True, timeout=timeout_s, check=False)

    def _running(self) -> bool:
        """A control daemon answers on our pipe directory (the client fails otherwise)."""
        if not (self.pipe_dir / "control").exists():
            return False
        try:
            return self._control("get_server_list", 5.0).returncode == 0
        except subprocess.TimeoutExpired:
            return True

    def start(self) -> "MpsDaemon":
        if not self.binary:
            raise MpsError(f"{CONTROL} not found on PATH: MPS mode needs the NVIDIA driver's MPS binaries")
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self._running():  # left behind by a killed sweep: quit it first
            self.stop()
        p = subprocess.run([self.binary, "-d"], env=self.env(), capture_output=True, text=True, timeout=30, check=False)
        if p.returncode != 0:
            raise MpsError(f"{CONTROL} -d failed ({p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
        self.started = True
        deadline = time.time() + 10
        while not self._running():
            if time.time() > deadline:
                self.stop()
                raise MpsError(f"MPS daemon did not create its control pipe; see {self.log_dir}/control.log")
            time.sleep(0.1)
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """``echo quit | nvidia-cuda-mps-control``, then wait for the pipe to go."""
        if not self.binary:
            return
        try:
            self._control("quit", timeout_s)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.time() + timeout_s
        while self._running() and time.time() < deadline:
            time.sleep(0.2)
        self.started = False

    def __enter__(self) -> "MpsDaemon":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
