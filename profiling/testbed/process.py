"""The processes of one start of one testbed job, and what they report (``training.py``).

One process per device, in one process group (a killed job leaves nothing behind), each under
``profiling/guard.py`` (killed with the testbed; pinned to its CPU device's cores). A job on several
devices is a DDP group the launcher sets up itself (``MASTER_ADDR/PORT``, ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``), as torchrun would, without torchrun's agent in between.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from schedlab.profiling.testbed.devices import Device, process_env

STOP_TIMEOUT_S = 120.0  # a preempted job must reach its next iteration boundary and checkpoint within this


class JobFailed(RuntimeError):
    """A training process ended with an error (the message names the job and quotes its log)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class JobStart:
    """One start of a job as the live engine drives it: :class:`JobProcess` on this machine,
    ``remote.RemoteJob`` on nodes. Waiting for its end and naming its failure are shared."""

    job_id: str
    attempt: int
    _latest: dict[str, Any] | None = None

    def launch(self) -> float:
        """Start every rank; the launch time (epoch s)."""
        raise NotImplementedError

    def poll(self) -> int | None:
        """None while any rank runs; else the first non-zero exit code (0 when all succeeded)."""
        raise NotImplementedError

    def samples(self) -> list[dict[str, Any]]:
        """The progress lines rank 0 wrote since the last call."""
        raise NotImplementedError

    @property
    def latest(self) -> dict[str, Any] | None:
        """The last progress line :meth:`samples` returned."""
        return self._latest

    def _took(self, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``lines``, the latest of them kept for :attr:`latest`."""
        if lines:
            self._latest = lines[-1]
        return lines

    def result(self) -> dict[str, Any] | None:
        """Rank 0's result once written (``training.py``)."""
        raise NotImplementedError

    def request_stop(self) -> None:
        """Ask the job to stop at its next iteration boundary, with a checkpoint."""
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def log_tail(self) -> str:
        raise NotImplementedError

    def _exit(self, codes: list[int | None]) -> int | None:
        """None while any rank runs; else the first non-zero exit code (0 when all succeeded). A failed
        rank ends the others, which would wait for it for ever."""
        if any(c is None for c in codes):
            if any(c not in (None, 0) for c in codes):
                self.kill()
                return next(c for c in codes if c not in (None, 0))
            return None
        return next((c for c in codes if c != 0), 0)

    def wait(self, timeout_s: float = STOP_TIMEOUT_S, poll_s: float = 0.01) -> int:
        """Wait for every rank to exit (killing them after ``timeout_s``); the exit code as :meth:`poll`."""
        deadline = time.monotonic() + timeout_s
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                self.kill()
                raise JobFailed(f"job {self.job_id}: its processes did not stop within {timeout_s:g} s;"
                                f" killed. {self.log_tail()}")
            time.sleep(poll_s)
        return code

    def failure(self, code: int) -> JobFailed:
        return JobFailed(f"job {self.job_id} (start {self.attempt}) exited with code {code}. {self.log_tail()}")


class JobProcess(JobStart):
    """Start ``attempt`` of a job: its ``spec`` (``training.py``) on ``devices``, reporting into ``folder``.

    On one node ``devices`` are all of the job's and their ranks 0, 1, …; a node's share of a job spanning
    nodes gives ``ranks`` (the global rank of each of its devices), the group's ``world`` size and its
    ``master`` (address and port of rank 0's node)."""

    def __init__(self, job_id: str, folder: Path, attempt: int, spec: dict[str, Any], devices: Sequence[Device],
                 env: Mapping[str, str] | None = None, python: str = sys.executable, *,
                 ranks: Sequence[int] | None = None, world: int | None = None,
                 master: tuple[str, int] | None = None) -> None:
        self.job_id, self.folder, self.attempt, self.spec = job_id, Path(folder), attempt, spec
        self.devices, self.python = list(devices), python
        self.ranks = list(range(len(self.devices)) if ranks is None else ranks)
        if len(self.ranks) != len(self.devices):
            raise ValueError(f"job {job_id}: {len(self.ranks)} ranks for {len(self.devices)} devices")
        self.world = len(self.devices) if world is None else world
        self.master = master
        self.env = dict(os.environ if env is None else env)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.launched_at = 0.0
        self._offset = 0
        self._partial = b""

    @property
    def progress_path(self) -> Path:
        return self.folder / f"progress-{self.attempt}.jsonl"

    @property
    def log_path(self) -> Path:
        return self.folder / f"log-{self.attempt}.txt"

    def launch(self) -> float:
        """Start every rank; returns the launch time (epoch s). A job's first start begins from an empty
        folder: one left by an earlier run into the same place would hand it that run's checkpoint and
        results."""
        if self.attempt == 0 and self.folder.exists():
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        world = self.world
        address, port = self.master or ("127.0.0.1", free_port() if world > 1 else 0)
        self.launched_at = time.time()
        log = open(self.log_path, "ab")
        try:
            for local, (rank, device) in enumerate(zip(self.ranks, self.devices)):
                env = process_env(self.devices, local, self.env)
                env.update(RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE=str(world),
                           MASTER_ADDR=address, MASTER_PORT=str(port), PYTHONUNBUFFERED="1")
                pin = ["--cpus", ",".join(map(str, device.cores))] if device.kind == "cpu" else []
                cmd = [self.python, "-m", "schedlab.profiling.guard", *pin, self.python, "-m",
                       "schedlab.profiling.testbed.training", "--spec", json.dumps(self.spec),
                       "--dir", str(self.folder), "--attempt", str(self.attempt)]
                group = self.procs[0].pid if self.procs else 0  # the first rank here leads a new process group
                self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                   process_group=group))
        except BaseException:
            self.kill()
            raise
        finally:
            log.close()
        return self.launched_at

    def poll(self) -> int | None:
        return self._exit([p.poll() for p in self.procs])

    def samples(self) -> list[dict[str, Any]]:
        """The progress lines written since the last call (complete lines only)."""
        try:
            with open(self.progress_path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        return self._took([json.loads(line) for line in lines if line.strip()])

    def result(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.folder / f"result-{self.attempt}.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def request_stop(self) -> None:
        (self.folder / f"stop-{self.attempt}").touch()

    def kill(self) -> None:
        if self.procs:
            try:
                os.killpg(self.procs[0].pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            for p in self.procs:
                p.wait()

    def log_tail(self, chars: int = 1500) -> str:
        try:
            text = self.log_path.read_text(errors="replace")[-chars:].strip()
        except FileNotFoundError:
            return "(no log)"
        return f"log {self.log_path}: …{text}" if text else f"log {self.log_path} is empty"
