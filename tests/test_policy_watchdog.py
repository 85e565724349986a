"""``check-policy`` against policies that never return or end the process (``sched/watchdog.py``): each case
runs in a child process the check stops at the deadline, and a policy that raises ``SystemExit``,
``KeyboardInterrupt`` or ``GeneratorExit`` or ends its process has crashed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from helpers import cli_env, policy_source, run_cli
from test_policy_check import _Fifo as CorrectFifo
from schedlab.sched.core.job import Job
from schedlab.sched.policies.base import Policy
from schedlab.sched.policy_check import CheckOptions, check_policy
from schedlab.sched.watchdog import Died, Overran, Returned, Watchdog


class _Fifo(CorrectFifo):
    """The correct FIFO of ``test_policy_check``, counting its ``schedule`` calls."""

    name = "watchdog-fifo"

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.calls = 0

    def schedule(self, engine: Any) -> None:
        self.calls += 1
        super().schedule(engine)


class Loops(_Fifo):
    """``schedule`` never returns after its third call."""

    name = "watchdog-loops"

    def schedule(self, engine: Any) -> None:
        super().schedule(engine)
        while self.calls > 3:
            pass


class SwallowsEverything(_Fifo):
    """Sleeps for ever on its second call and swallows whatever is raised to stop it."""

    name = "watchdog-swallows"

    def schedule(self, engine: Any) -> None:
        super().schedule(engine)
        while self.calls > 1:
            try:
                time.sleep(3600)
            except BaseException:  # noqa: BLE001, S110 - the point of the test
                pass


class Raises(_Fifo):
    """Raises ``Params.what`` (by name) from ``schedule``."""

    name = "watchdog-raises"
    exits = {"SystemExit": lambda: sys.exit(0), "KeyboardInterrupt": KeyboardInterrupt,
             "GeneratorExit": GeneratorExit}
    what = "SystemExit"

    def schedule(self, engine: Any) -> None:
        raise self.exits[self.what]()


class RaisesInterrupt(Raises):
    name = "watchdog-raises-interrupt"
    what = "KeyboardInterrupt"


class RaisesGeneratorExit(Raises):
    name = "watchdog-raises-generator-exit"
    what = "GeneratorExit"


class EndsProcess(_Fifo):
    """Ends the process from its second ``schedule`` call (``os._exit``: nothing Python can catch)."""

    name = "watchdog-ends-process"

    def schedule(self, engine: Any) -> None:
        super().schedule(engine)
        if self.calls > 1:
            os._exit(0)


class Segfaults(_Fifo):
    """Its process is killed by SIGSEGV in ``on_arrival``."""

    name = "watchdog-segfaults"

    def on_arrival(self, engine: Any, job: Job) -> None:
        os.kill(os.getpid(), signal.SIGSEGV)


def spec(cls: type[Policy]) -> str:
    return f"{cls.__module__}:{cls.__name__}"


@pytest.mark.slow
def test_a_call_that_never_returns_fails_the_time_rule_with_a_minimal_case() -> None:
    options = CheckOptions(examples=20, deadline_s=0.2)
    report = check_policy(spec(Loops), options)
    assert [v.rule for v in report.violations] == ["time"], report.text()
    found = report.violations[0]
    assert found.message.startswith("schedule did not return within the deadline 0.2 s: stopped after")
    assert found.case.jobs == 3  # the fourth schedule call: three jobs on one GPU end one by one
    assert report.slowest_call == "schedule" and options.deadline_s < report.slowest_s < options.deadline_s + 5
    assert "FAIL  time" in report.text() and "minimal case: 3 job(s)" in report.text()


@pytest.mark.slow
def test_a_call_that_swallows_every_interruption_is_stopped_too() -> None:
    report = check_policy(spec(SwallowsEverything), CheckOptions(examples=10, deadline_s=0.2))
    assert [v.rule for v in report.violations] == ["time"], report.text()
    assert report.violations[0].case.jobs == 1


@pytest.mark.parametrize("cls, raised", [(Raises, "SystemExit(0)"), (RaisesInterrupt, "KeyboardInterrupt()"),
                                         (RaisesGeneratorExit, "GeneratorExit()")])
def test_exits_raised_by_the_policy_are_its_crash(cls: type[Policy], raised: str) -> None:
    report = check_policy(spec(cls), CheckOptions(examples=10))
    assert [v.rule for v in report.violations] == ["crash"], report.text()
    assert report.violations[0].message.startswith(f"{raised} (raised at {__file__}:")
    assert report.violations[0].case.jobs == 1


@pytest.mark.parametrize("cls, how, case_jobs", [(EndsProcess, "exited with status 0 in schedule", 1),
                                                  (Segfaults, "was killed by SIGSEGV in on_arrival", 1)])
def test_a_policy_that_ends_its_process_has_crashed(cls: type[Policy], how: str, case_jobs: int) -> None:
    report = check_policy(spec(cls), CheckOptions(examples=10))
    assert [v.rule for v in report.violations] == ["crash"], report.text()
    assert f"the process running the policy {how} (t=" in report.violations[0].message
    assert report.violations[0].case.jobs == case_jobs


def test_shrinking_is_cut_after_so_many_stopped_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    from schedlab.sched import policy_check

    monkeypatch.setattr(policy_check, "MAX_STOPPED", 2)
    report = check_policy(spec(Loops), CheckOptions(examples=20, deadline_s=0.1))
    assert [v.rule for v in report.violations] == ["time"]
    assert report.note.startswith("shrinking stopped after 2 policy calls were stopped at the deadline")
    assert "smallest case:" in report.text() and "note: shrinking stopped" in report.text()


# ---- the watchdog itself ----------------------------------------------------------------------


def _echo(item: Any, beat: Any) -> Any:
    if item == "raise":
        raise LookupError("raised by the target")
    if item == "loop":
        beat.enter("on_timer", 42.0)
        while True:
            pass
    if item == "slow":
        time.sleep(3600)
    if item == "exit":
        os._exit(3)
    return item * 2


def test_the_watchdog_returns_stops_and_replaces_its_child() -> None:
    with Watchdog(_echo, call_deadline_s=0.2, item_limit_s=1.0) as dog:
        assert dog.call(21) == Returned(42)
        stopped = dog.call("loop")
        assert isinstance(stopped, Overran) and (stopped.call, stopped.limit_s, stopped.now) == ("on_timer", 0.2, 42.0)
        assert dog.call(2) == Returned(4) and dog.restarts == 1  # a fresh child
        whole = dog.call("slow")
        assert isinstance(whole, Overran) and whole.call is None and whole.limit_s == 1.0
        assert dog.call("exit") == Died("exited with status 3", None, 0.0)
        with pytest.raises(LookupError, match="raised by the target"):
            dog.call("raise")
        assert dog.call(1) == Returned(2) and dog.stopped == 2 and dog.restarts == 3


def test_a_ctrl_c_lost_in_a_gc_callback_still_interrupts_the_wait() -> None:
    """Python raises a Ctrl-C's KeyboardInterrupt wherever the main thread is; inside a gc callback
    (Hypothesis installs one) it is printed as "Exception ignored" and lost. The wait still ends."""
    from schedlab.sched.watchdog import _ctrl_c_kept

    with Watchdog(_echo, call_deadline_s=60.0) as dog, _ctrl_c_kept():
        try:
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # the Ctrl-C ...
        except KeyboardInterrupt:
            pass  # ... lost, as in a gc callback
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            dog.call("loop")
        assert time.monotonic() - started < 5
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ---- the command --------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_check_policy_reports_a_looping_and_an_exiting_policy(tmp_path) -> None:
    (tmp_path / "loops.py").write_text(policy_source("Loops"))
    (tmp_path / "sysexit.py").write_text(policy_source("SysExit"))
    env = cli_env(tmp_path / "home")
    looped = run_cli(["check-policy", "loops.py:Loops", "--deadline-s", "0.2", "--examples", "20"], env, tmp_path,
                     timeout=240)
    assert looped.returncode == 1, looped.stderr
    assert "FAIL  time" in looped.stdout and "schedule did not return within the deadline 0.2 s" in looped.stdout
    assert "reproduce: schedlab replay --trace time.csv --cluster 1x1 --policy" in looped.stdout
    exited = run_cli(["check-policy", "sysexit.py:SysExit", "--examples", "10"], env, tmp_path, timeout=240)
    assert exited.returncode == 1, exited.stderr
    assert "FAIL  crash" in exited.stdout and "crash: SystemExit(0) (raised at" in exited.stdout


@pytest.mark.slow
def test_ctrl_c_ends_the_check_and_its_child(tmp_path) -> None:
    (tmp_path / "loops.py").write_text(policy_source("Loops"))
    process = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "check-policy", "loops.py:Loops",
                                "--deadline-s", "600"], env=cli_env(tmp_path / "home"), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        children = _started_children(process.pid, 120)
        time.sleep(1.0)  # the child is in its loop
        os.killpg(process.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the process group
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, err
    assert "crash" not in out  # the user's interrupt is not the policy's
    time.sleep(0.5)
    assert not [pid for pid in children if os.path.exists(f"/proc/{pid}")]


def _started_children(pid: int, timeout: float) -> list[int]:
    """The fork server's children below ``pid`` once there are some (at most ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not _watchdog_children(pid):
        time.sleep(0.1)
    children = _watchdog_children(pid)
    assert children, f"no child of pid {pid}'s fork server started in {timeout:.0f} s"
    return children


def _watchdog_children(pid: int) -> list[int]:
    """The processes the fork server below ``pid`` forked (the check's children)."""
    table = {}
    for entry in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{entry}/stat").read() if entry.isdigit() else ""
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace") if stat else ""
        except OSError:
            continue
        if stat:
            table[int(entry)] = (int(stat[stat.rindex(")") + 2:].split()[1]), cmdline)
    servers = {p for p, (parent, cmd) in table.items() if parent == pid and "forkserver" in cmd}
    return [p for p, (parent, _) in table.items() if parent in servers]


@pytest.mark.slow
def test_a_child_ends_when_the_process_that_started_it_is_killed(tmp_path) -> None:
    """A Dask worker stopped mid-replay (an interrupted experiment): its replay's child, forked by the fork
    server, ends too, not orphaned with its server (each child holds the server's liveness pipe)."""
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent("""\
        import sys, time
        from schedlab.sched.watchdog import Watchdog

        def forever(item, beat):
            while True:
                time.sleep(0.05)

        if __name__ == "__main__":
            dog = Watchdog(forever, item_limit_s=600.0)
            dog.__enter__()
            dog.call(None)
        """))
    caller = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, start_new_session=True)
    try:
        children = _started_children(caller.pid, 60)
        caller.kill()  # as the nanny kills a worker busy in a replay
        caller.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(pid) for pid in children):
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in children)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(caller.pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Running (a zombie has ended: its parent, the fork server, may not have reaped it yet)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
