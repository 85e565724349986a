"""Policy code run in a child process that the caller can stop: a Python thread cannot be killed, and a
policy call that never returns (a loop, a sleep, an ``except BaseException`` that swallows every
attempt to interrupt it) or that ends the process (``os._exit``, a crash of native code) would take
the caller with it.

A :class:`Watchdog` keeps one child process (forked from a fork server that has imported what the
child needs, never from the caller: see :func:`_context`) and hands it items one at a time, each with the
caller's environment variables and working folder of the moment; the child
applies ``target(item, beat)`` and sends back what it returns. ``beat`` (a :class:`Heartbeat` in
shared memory) is where the child says when the policy call it is in started; the caller polls it
while it waits and kills the child once a call has run past ``call_deadline_s``, or the whole item past
``item_limit_s``. A killed or dead child is replaced by a fresh fork before the next item.

The child finds the policy by its spec (a registered name, ``file.py:Class``, ``module:Class``): a class
registered only in the caller's memory is unknown there. Cost on the normal path
(``python -m schedlab.benchmarks.check_policy_watchdog``): the fork server's start once per process, a fork per child,
then per item a pipe round trip and pickling the item and its answer; per policy call, two writes to
shared memory.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: the policy calls a heartbeat can name (its slot 2 is an index into this tuple)
CALLS = ("on_arrival", "on_finish", "on_timer", "on_epoch", "schedule", "choose_reclaim", "on_reclaimed")
_INDEX = {call: float(i) for i, call in enumerate(CALLS)}


class Heartbeat:
    """Five doubles in shared memory: when the current policy call started (``time.monotonic()``; 0: none
    in progress), the engine's clock then, which call (an index into :data:`CALLS`), and the replay's
    progress (jobs done, jobs)."""

    __slots__ = ("_slots",)

    def __init__(self, context: Any) -> None:
        self._slots = context.RawArray("d", 5)

    def enter(self, call: str, now: float) -> None:
        slots = self._slots
        slots[1], slots[2] = now, _INDEX.get(call, -1.0)
        slots[0] = time.monotonic()

    def leave(self) -> None:
        self._slots[0] = 0.0

    def progress(self, done: int, total: int) -> None:
        """The replay's progress (the engine's ``progress(done, total)``), read by the caller."""
        self._slots[3], self._slots[4] = done, total

    def jobs(self) -> tuple[int, int]:
        return int(self._slots[3]), int(self._slots[4])

    def current(self) -> tuple[float, float, str]:
        """(seconds since the call in progress started, or 0.0 for none; engine time; the call)."""
        started, now, which = self._slots[0], self._slots[1], int(self._slots[2])
        call = CALLS[which] if 0 <= which < len(CALLS) else "a policy call"
        return (time.monotonic() - started if started else 0.0), now, call


@dataclass(frozen=True)
class Returned:
    value: Any


@dataclass(frozen=True)
class Overran:
    """Stopped at a limit: a call past ``call_deadline_s`` (``seconds`` since it started), or the whole item
    past ``item_limit_s`` (``seconds`` since it was handed over). ``call`` is the policy call in progress
    then (None: none), running for ``call_s``, at engine time ``now``."""

    call: str | None
    seconds: float
    limit_s: float
    now: float
    call_s: float = 0.0


@dataclass(frozen=True)
class Died:
    """The child ended without answering: ``how`` (``exited with status 0``, ``killed by SIGSEGV``),
    inside ``call`` (None: outside any policy call) at engine time ``now``."""

    how: str
    call: str | None
    now: float


Outcome = Returned | Overran | Died


class Watchdog:
    """``target(item, beat)`` applied in a child process, one item at a time, with the limits enforced
    from outside (use as a context manager: the child is stopped on exit).

    ``tick_s``: how often the caller looks at the heartbeat while it waits (default: a fifth of the
    smallest limit, at most 50 ms): a call is stopped at most ``tick_s`` after its deadline. The child
    ignores SIGINT (the terminal's Ctrl-C is the caller's to handle), so a ``KeyboardInterrupt`` in the
    child is always the policy's own."""

    def __init__(self, target: Callable[[Any, Heartbeat], Any], *, call_deadline_s: float | None = None,
                 item_limit_s: float | None = None, tick_s: float | None = None,
                 preload: tuple[str, ...] = ()) -> None:
        self.target, self.call_deadline_s, self.item_limit_s = target, call_deadline_s, item_limit_s
        limits = [x for x in (call_deadline_s, item_limit_s) if x is not None]
        self.tick_s = tick_s if tick_s is not None else min([0.05, *(x / 5 for x in limits)])
        self._context = _context(preload)
        self._process: Any = None
        self._conn: Any = None
        self._beat: Heartbeat | None = None
        self.restarts = 0  # children started after the first (each after a kill or a death)
        self.stopped = 0  # items stopped at a limit

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(kill=kind is not None)

    def close(self, kill: bool = False) -> None:
        """Stop the child: asked to end (it does between items), or killed at once with ``kill`` (the
        caller interrupted while the child may be in a policy's loop)."""
        if self._process is not None:
            if not kill:
                try:
                    self._conn.send(None)  # a clean end: the child returns from its loop
                    self._process.join(timeout=1.0)
                except (OSError, ValueError):
                    pass
            self._stop()

    def _start(self) -> None:
        if self._beat is not None:
            self.restarts += 1
        self._beat = Heartbeat(self._context)
        ours, theirs = self._context.Pipe()
        process = self._context.Process(target=_serve, args=(self.target, theirs, self._beat),
                                        name="schedlab-watchdog", daemon=True)
        # a Dask worker is a daemonic process, which multiprocessing forbids children (it would not wait
        # for them at exit): this child needs no waiting for (it dies with the fork server: _serve) and is
        # stopped by close() or a kill
        config = multiprocessing.current_process()._config
        daemonic = config.pop("daemon", None)
        try:
            process.start()
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
            if daemonic is not None:
                config["daemon"] = daemonic
        self._process, self._conn = process, ours

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process.is_alive():
            process.kill()
        process.join()
        self._conn.close()

    def call(self, item: Any, on_progress: Callable[[int, int], None] | None = None) -> Outcome:
        with _ctrl_c_kept():
            return self._call(item, on_progress)

    def _call(self, item: Any, on_progress: Callable[[int, int], None] | None) -> Outcome:
        """``target(item, beat)`` in the child: what it returned, or how it overran or died. An error
        ``target`` raises in the child is re-raised here (``target`` should turn the policy's errors into
        values: what reaches here is a bug of the caller's). ``on_progress(done, total)`` is called here
        when the child's :meth:`Heartbeat.progress` changes."""
        if self._process is None or not self._process.is_alive():
            if self._process is not None:
                self._stop()
            self._start()
        assert self._beat is not None
        self._beat.progress(0, 0)
        self._conn.send((item, dict(os.environ), os.getcwd()))  # as the caller is now, not the fork server
        started, reported = time.monotonic(), (0, 0)
        while True:
            if _CTRL_C.is_set():  # its KeyboardInterrupt was lost (raised inside a gc callback)
                raise KeyboardInterrupt
            if self._conn.poll(self.tick_s):
                try:
                    kind, value = self._conn.recv()
                except (EOFError, OSError):
                    return self._died()
                if kind == "raised":
                    raise value
                return Returned(value)
            if not self._process.is_alive():
                if self._conn.poll(0):  # it answered, then ended
                    continue
                return self._died()
            if on_progress is not None and self._beat.jobs() != reported:
                reported = self._beat.jobs()
                on_progress(*reported)
            running, now, name = self._beat.current()
            if self.call_deadline_s is not None and running > self.call_deadline_s:
                self._stop()
                self.stopped += 1
                return Overran(name, running, self.call_deadline_s, now, call_s=running)
            elapsed = time.monotonic() - started
            if self.item_limit_s is not None and elapsed > self.item_limit_s:
                self._stop()
                self.stopped += 1
                return Overran(name if running else None, elapsed, self.item_limit_s, now, running)

    def _died(self) -> Died:
        assert self._beat is not None
        running, now, name = self._beat.current()
        self._process.join(timeout=5.0)
        code = self._process.exitcode
        self._stop()
        if code is None or code >= 0:
            how = f"exited with status {code}"
        else:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        return Died(how, name if running else None, now)


def _context(preload: tuple[str, ...]) -> Any:
    """Children forked from a fork server: a process started afresh that imports ``preload`` (what the
    children need, so each starts in milliseconds) and does nothing else. Not forked from the caller: a
    caller with threads (an XGBoost model's OpenMP pool, pyarrow's allocator, a progress bar's monitor)
    would leave their locks held in the child for ever. Where there is no fork server, spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["schedlab.sched.watchdog", *preload])  # only before the server starts
    return context


def warm_up(preload: tuple[str, ...] = ()) -> None:
    """Start the fork server now (it imports ``preload``: seconds), so that the first child does not wait
    for it (a Dask worker warming up)."""
    context = _context(preload)
    if context.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def thread_lock_for_progress_bars() -> None:
    """The engine's progress bar takes tqdm's lock, by default a multiprocessing one: a semaphore that a
    child stopped mid-replay (killed at its limit, or exiting through the policy) leaks
    ("resource_tracker: … leaked semaphore objects" at exit). A thread lock is all one replay needs."""
    import threading

    from tqdm import tqdm

    if not isinstance(getattr(tqdm, "_lock", None), type(threading.RLock())):
        tqdm.set_lock(threading.RLock())


def _serve(target: Callable[[Any, Heartbeat], Any], conn: Any, beat: Heartbeat) -> None:
    """The child's loop: items in, answers out, until ``None`` or the pipe closes. It ignores SIGINT, and
    on Linux is killed when the fork server ends (which it does when its caller ends, even killed): a
    policy looping for ever never outlives the command that ran it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    _let_the_fork_server_end()
    thread_lock_for_progress_bars()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        item, environ, folder = message
        if environ != os.environ:
            os.environ.clear()
            os.environ.update(environ)
        if folder != os.getcwd():
            os.chdir(folder)
        try:
            answer = ("returned", target(item, beat))
        except BaseException as err:  # noqa: BLE001 - handed to the caller, which re-raises it
            answer = ("raised", err)
        beat.leave()
        try:
            conn.send(answer)
        except OSError:  # the caller is gone (its worker interrupted, stopped): nobody to answer
            return
        except Exception as err:  # noqa: BLE001 - an answer that cannot be pickled
            try:
                conn.send(("raised", RuntimeError(f"the watchdog's child could not send its answer: {err!r}")))
            except OSError:
                return


_CTRL_C = threading.Event()


@contextlib.contextmanager
def _ctrl_c_kept() -> Iterator[None]:
    """While the main thread waits for the child: a Ctrl-C also sets :data:`_CTRL_C`, which the wait checks
    at every tick. Python raises a Ctrl-C's KeyboardInterrupt wherever the main thread is, and one raised
    inside a gc callback (Hypothesis installs one, so ``check-policy`` has it) is printed as "Exception
    ignored" and lost: the check then waited out the policy's whole deadline. Only where Python's own
    handler is installed (a flow's handler is left alone), and only in the main thread."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def interrupted(signum: int, frame: Any) -> None:
        _CTRL_C.set()
        raise KeyboardInterrupt

    _CTRL_C.clear()
    signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _CTRL_C.clear()


def _let_the_fork_server_end() -> None:
    """Close the fork server's liveness pipe in this child. Every child of a fork server inherits the
    pipe's writing end (so that it could fork through the server too), and the server ends only when no
    process holds it: a child in a long replay kept its server alive after the Dask worker that asked for
    it was stopped (an interrupted experiment), so PR_SET_PDEATHSIG never fired and the replay ran on,
    orphaned, to its end. Without the pipe the server ends with its caller, and the child with the server.
    (``multiprocessing.forkserver`` keeps the descriptor in a private attribute: nothing when absent.)"""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None


def _die_with_parent() -> None:
    """SIGKILL this process when its parent ends (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    if os.getppid() != parent:  # it ended before the call: nothing will signal us
        os._exit(1)


__all__ = ["CALLS", "Died", "Heartbeat", "Outcome", "Overran", "Returned", "Watchdog", "warm_up"]
