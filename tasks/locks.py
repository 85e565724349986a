"""Inter-process locks on this host and the liveness of a process named by ``host:pid``.

:func:`file_lock` is an exclusive ``flock`` on a file: the kernel releases it when its holder exits,
however it exits (SIGKILL included), so a crashed holder never leaves a stale lock behind. The holder
writes ``host``, ``pid`` and ``since`` into the file, for the message a waiter prints.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class LockTimeout(RuntimeError):
    """The lock stayed held by another process for longer than the caller would wait."""


def holder(path: Path) -> dict[str, Any]:
    """What the process holding ``path`` wrote there (empty when unreadable or not yet written)."""
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}


def describe(info: dict[str, Any]) -> str:
    if not info:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid')} on {info.get('host')} (since {since})"


@contextlib.contextmanager
def file_lock(path: Path, *, what: str, timeout: float | None = None,
              on_wait: Callable[[dict[str, Any]], None] | None = None, poll: float = 0.1) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created with its folder). Waits for the holder (calling
    ``on_wait(holder info)`` once); raises :class:`LockTimeout` naming ``what`` and the holder after
    ``timeout`` seconds (None: wait as long as it takes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told and on_wait is not None:
                    on_wait(holder(path))
                    told = True
                if deadline is not None and time.monotonic() > deadline:
                    raise LockTimeout(f"{what}: still locked by {describe(holder(path))} after {timeout:.0f} s"
                                      f" (lock file {path})") from None
                time.sleep(poll)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def owner_alive(owner: str | None) -> bool | None:
    """Whether the process ``host:pid`` is alive: True/False for a process of this host, None when
    it cannot be told (another host, or no owner recorded)."""
    if not owner or ":" not in owner:
        return None
    host, _, pid_text = owner.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    return pid_alive(int(pid_text))


def pid_alive(pid: int) -> bool:
    """A running (not zombie) process of this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: kill(pid, 0) found it
    return state != "Z"


def is_locked(path: Path) -> bool:
    """Whether a live process holds the :func:`file_lock` on ``path`` (False when there is no such file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False
