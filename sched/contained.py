"""A policy's replay that cannot take its caller down: run in a :class:`~schedlab.sched.watchdog.Watchdog`'s
child process, stopped at a time limit, its failure a value the caller reports.

A policy may raise anything (``SystemExit`` from ``sys.exit``, ``KeyboardInterrupt``, ``GeneratorExit``
included), loop for ever in one call, or end its process (``os._exit``, a crash of native code). In the
caller's own process the first three would end a command silently or as the user's Ctrl-C, kill a Dask
worker, or hold it for ever. Here each ends that policy's replay with a :class:`PolicyFailed` naming the
policy, what happened and where (the file, line and function that raised; the call in progress when the
time limit stopped it, and for how long it had run), and the caller goes on with the next.

``schedlab replay`` and the experiments' replays run so (:func:`schedlab.sched.replay.run` with
``contained``); check-policy runs its cases so with a deadline per call (``sched/policy_check.py``).
A user's Ctrl-C reaches the caller only (the child ignores SIGINT): the caller stops the child and ends
as interrupted.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedlab.sched.watchdog import Died, Heartbeat, Overran, Returned, Watchdog

if TYPE_CHECKING:
    from schedlab.sched.policies import Policy
    from schedlab.sched.replay import Prepared, ReplayResult
    from schedlab.sched.spec import PolicyRun, ReplaySpec

#: a replay's time limit unless one is given (``--time-limit``, ``time_limit_s:``): 12 x the longest
#: replay of the shipped set-ups (pollux on lyra-scaling, 23,437 jobs: 605 s wall, 604 CPU s on a shared
#: 2-core machine; ``python -m schedlab.benchmarks.shipped_replay_times``)
DEFAULT_TIME_LIMIT_S = 7200.0
#: what policy code may raise that is no ``Exception`` but is its failure all the same: it may not end or
#: interrupt the replay (a user's Ctrl-C never reaches a child: :mod:`schedlab.sched.watchdog`)
POLICY_EXITS = (SystemExit, KeyboardInterrupt, GeneratorExit)
#: what the child imports before it forks a replay's process
PRELOAD = ("schedlab.sched.replay", "schedlab.sched.contained")


class PolicyFailed(RuntimeError):
    """A policy's replay ended by the policy (it raised, ran past the time limit or ended its process):
    ``label`` the policy's, ``message`` what happened and where."""

    def __init__(self, label: str, message: str) -> None:
        super().__init__(f"policy {label} failed: {message}")
        self.label, self.message = label, message

    def __reduce__(self) -> tuple:  # picklable across Dask processes
        return (PolicyFailed, (self.label, self.message))


@dataclass(frozen=True)
class Contained:
    """How :func:`schedlab.sched.replay.run` runs each policy: in a child process stopped after
    ``time_limit_s`` seconds (None: never)."""

    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S
    limit_name: str = "--time-limit"  # how the caller's user sets the limit (messages name it)


def raised(err: BaseException) -> str:
    """What ``err`` is and where it was raised: ``KeyError: 'x' (raised at FILE:LINE, in FUNCTION)``, an
    exit as ``SystemExit(0) (raised at …)``."""
    what = repr(err) if isinstance(err, POLICY_EXITS) else f"{type(err).__name__}: {err}"
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return what
    frame = frames[-1]
    return f"{what} (raised at {frame.filename}:{frame.lineno}, in {frame.name})"


def announcing(beat: Heartbeat) -> Callable[[Policy], Policy]:
    """A ``wrap_policy`` that has each of the policy's hooks say on ``beat`` when it starts and ends (so
    the caller can tell a call that never returns from a long replay); the policy object itself is kept,
    each hook shadowed by an instance attribute that calls the class's."""
    from schedlab.sched.watchdog import CALLS

    def wrap(policy: Policy) -> Policy:
        depth = [0]  # a hook the policy calls from another hook is part of that call
        for name in CALLS:
            hook = getattr(policy, name, None)
            if hook is not None:
                setattr(policy, name, _announced(beat, name, hook, depth))
        return policy

    return wrap


def _announced(beat: Heartbeat, name: str, hook: Callable[..., Any], depth: list[int]) -> Callable[..., Any]:
    def call(engine: Any, *args: Any) -> Any:
        if depth[0]:
            return hook(engine, *args)
        depth[0] = 1
        beat.enter(name, engine.now)
        try:
            return hook(engine, *args)
        finally:
            depth[0] = 0
            beat.leave()

    return call


@dataclass(frozen=True)
class _Failure:
    message: str


def _in_child(item: tuple[ReplaySpec, Prepared, PolicyRun, bool, bool], beat: Heartbeat) -> ReplayResult | _Failure:
    """One policy's replay in the watchdog's child: its result, or what the policy raised as a failure."""
    from schedlab.sched.replay import _replay

    spec, prepared, policy, bar, report = item
    progress = True if bar else beat.progress if report else False
    try:
        return _replay(spec, prepared, policy, progress, wrap_policy=announcing(beat))
    except (Exception, *POLICY_EXITS) as err:  # noqa: BLE001 - whatever the policy (or the engine) raised
        return _Failure(raised(err))


class ContainedRunner:
    """The replays of one :func:`~schedlab.sched.replay.run`, each in the same watchdog (one child
    process, replaced after a policy killed it or was stopped). Use as a context manager."""

    def __init__(self, contained: Contained) -> None:
        self.contained = contained
        self.watchdog = Watchdog(_in_child, item_limit_s=contained.time_limit_s, preload=PRELOAD)

    def __enter__(self) -> ContainedRunner:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.watchdog.close(kill=kind is not None)

    def replay(self, spec: ReplaySpec, prepared: Prepared, policy: PolicyRun,
               progress: bool | Callable[[int, int], None]) -> ReplayResult:
        """``policy``'s replay: its result, or :class:`PolicyFailed`."""
        item = (spec, prepared, policy, progress is True, callable(progress))
        outcome = self.watchdog.call(item, on_progress=progress if callable(progress) else None)
        if isinstance(outcome, Returned):
            if isinstance(outcome.value, _Failure):
                raise PolicyFailed(policy.label, outcome.value.message)
            return outcome.value
        if isinstance(outcome, Overran):
            where = (f": {outcome.call} had been running for {outcome.call_s:.1f} s (t={outcome.now:g})"
                     if outcome.call else f" (t={outcome.now:g}, between policy calls)")
            raise PolicyFailed(policy.label, f"stopped at the time limit of {outcome.limit_s:g} s"
                                             f" ({self.contained.limit_name}){where}")
        assert isinstance(outcome, Died)
        where = f"in {outcome.call} (t={outcome.now:g})" if outcome.call else "outside any policy call"
        raise PolicyFailed(policy.label, f"the process running the replay {outcome.how} {where};"
                                         " a policy may not end the process")


__all__ = ["DEFAULT_TIME_LIMIT_S", "POLICY_EXITS", "Contained", "ContainedRunner", "PolicyFailed", "announcing",
           "raised"]
