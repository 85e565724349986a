"""The folder a ``schedlab replay`` writes (``--out``): checked and locked before the replay starts.

- A path that is a file, or a folder that cannot be created or written, fails before any work.
- One writer at a time: the replay holds ``.schedlab-replay.lock`` (its pid and host, for the message)
  under an exclusive ``flock``. Stale rule: the kernel drops the lock when its holder exits, crashed or
  not, so a lock file left by a dead process is taken over; a live holder makes a second replay exit.
- A folder that already holds results (anything beside the lock and the ``.schedlab-replay`` marker)
  is refused unless ``overwrite``; then its earlier contents are removed first, so that two runs never
  mix. Only a folder marked as a replay's (or holding a ``comparison.csv``/``summary.json`` of an
  older version) is ever emptied.
- Without ``--out``, every replay gets a fresh folder ``$SCHEDLAB_HOME/replays/<UTC time>[-N]``.
- A folder created for a replay that wrote nothing (it failed, or was interrupted) is removed again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

LOCK = ".schedlab-replay.lock"
MARKER = ".schedlab-replay"
_LEGACY_RESULTS = ("comparison.csv", "summary.json")


class OutputError(ValueError):
    """An unusable ``--out``: the message names the folder and what to do."""


def os_reason(err: OSError) -> str:
    """What went wrong, in words (``No space left on device``), also for errors that carry only a
    message with the errno in it (pyarrow's)."""
    return os.strerror(err.errno) if err.errno else (err.strerror or str(err))


@dataclass
class OutputLock:
    """The held lock of one output folder; :meth:`release` when the replay is over."""

    out: Path
    fd: int
    created: bool = False  # the folder did not exist before: removed again if nothing was written

    def release(self) -> None:
        if self.fd < 0:
            return
        (self.out / LOCK).unlink(missing_ok=True)  # still holding the lock: nobody can be mid-acquire on it
        if self.created and {p.name for p in self.out.iterdir()} <= {MARKER}:
            with contextlib.suppress(OSError):
                (self.out / MARKER).unlink(missing_ok=True)
                self.out.rmdir()
        os.close(self.fd)
        self.fd = -1


def fresh_folder(root: Path) -> Path:
    """A new, empty folder ``root/<UTC time>[-N]`` (created here, so two replays never share one)."""
    base = root / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for n in range(1000):
        candidate = base if n == 0 else base.with_name(f"{base.name}-{n}")
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            continue
        except OSError as err:
            raise OutputError(f"{root}: cannot create a replay folder there ({err.strerror})") from None
    raise OutputError(f"{root}: no free folder name for {base.name}")


def claim(out: Path, *, overwrite: bool = False, option: str = "--out", created: bool = False) -> OutputLock:
    """Create and lock ``out`` for one replay (see the module docstring); raises :class:`OutputError`.
    A folder created here (or passed as ``created``) is removed again on release if nothing was written."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{option} {out}: is a file, not a folder")
    created = created or not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"{option} {out}: cannot create the folder ({err.strerror})") from None
    lock = _acquire(out, option)
    lock.created = created
    try:
        _clear(out, overwrite, option)
        (out / MARKER).write_text(json.dumps(_me()) + "\n")
    except OSError as err:
        lock.release()
        raise OutputError(f"{option} {out}: not writable ({err.strerror})") from None
    except BaseException:
        lock.release()
        raise
    return lock


def _me() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                       time.gmtime())}


def _acquire(out: Path, option: str) -> OutputLock:
    path = out / LOCK
    for _ in range(10):
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as err:
            raise OutputError(f"{option} {out}: not writable ({err.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise OutputError(f"{option} {out}: another replay ({holder}) is writing there; wait for it to end"
                              " or choose another folder") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the holder released (and removed) it between our open and our flock: retry
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(_me()) + "\n").encode())
        return OutputLock(out, fd)
    raise OutputError(f"{option} {out}: could not take the lock {path}")


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.read(fd, 4096) or b"{}")
        return f"pid {info['pid']} on {info['host']}, since {info['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not written its pid yet"


def _clear(out: Path, overwrite: bool, option: str) -> None:
    earlier = sorted(p.name for p in out.iterdir() if p.name not in (LOCK, MARKER))
    if not earlier:
        return
    shown = ", ".join(earlier[:5]) + (", …" if len(earlier) > 5 else "")
    if not overwrite:
        raise OutputError(f"{option} {out}: already holds results ({shown}); pass --overwrite to replace them,"
                          " or choose another folder")
    if not (out / MARKER).exists() and not any((out / name).exists() for name in _LEGACY_RESULTS):
        raise OutputError(f"{option} {out}: holds files that are not a replay's results ({shown});"
                          " --overwrite only empties a replay's folder: choose another folder")
    for name in earlier:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
