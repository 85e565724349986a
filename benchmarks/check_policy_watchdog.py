"""What running ``check-policy``'s cases in a watchdog's child costs on the normal path (no call overruns).

The same generated cases (Hypothesis, seed 0) are run three ways, each timed in CPU seconds (this process
plus its reaped children) and wall seconds, best of ``--repeat``:

- ``in-process``: :func:`~schedlab.sched.policy_check.run_case` called here (the check before the watchdog);
- ``heartbeat``: the same, each policy call also announcing itself in shared memory (the per-call cost);
- ``watchdog``: what ``check-policy`` does: one child, forked from the fork server, runs every case, each
  sent through a pipe (the fork server's start, once per command, is printed apart).

    python -m schedlab.benchmarks.check_policy_watchdog [--policy fifo tiresias castor] [--cases 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import time
from functools import partial


def cpu_s() -> float:
    """CPU seconds of this process, its reaped children and the watchdog's fork server so far (the
    children the server forks report their own: :func:`_counted`)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + _server_cpu_s() + CHILD_CPU[0]


CHILD_CPU = [0.0]  # CPU seconds the watchdog's children reported


def _server_cpu_s() -> float:
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return 0.0
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: what the fork server imports (this script too: the children find :func:`_counted` in it)
PRELOAD = ("schedlab.sched.policy_check", "__main__")


def _nothing(item, beat) -> None:
    return None


def _counted(policy: str, options, case, beat) -> tuple:
    """The watchdog's target, also reporting the CPU seconds it took in the child."""
    from schedlab.sched.policy_check import _case_in_child

    before = resource.getrusage(resource.RUSAGE_SELF)
    broken, seconds, call = _case_in_child(policy, options, case, beat)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return broken, seconds, (call, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def generated(count: int, seed: int = 0) -> list:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    from schedlab.sched.policy_check import case_strategy

    cases: list = []

    @seeded(seed)
    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case_strategy())
    def collect(case) -> None:
        cases.append(case)

    collect()
    return cases


def timed(work) -> tuple[float, float]:
    cpu, wall = cpu_s(), time.perf_counter()
    work()
    return cpu_s() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", nargs="+", default=["fifo", "tiresias", "castor"])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from schedlab.sched.policy_check import CheckOptions, Slowest, run_case
    from schedlab.sched.watchdog import Heartbeat, Watchdog

    cases = generated(args.cases)
    options = CheckOptions()
    beat = Heartbeat(multiprocessing.get_context("fork"))
    with Watchdog(_nothing, preload=PRELOAD) as dog:  # the fork server's start: once per process
        cpu, wall = timed(lambda: dog.call(None))
    print(f"fork server start and first child: {cpu:.2f} s CPU, {wall:.2f} s wall (once per check-policy command)")
    print(f"{len(cases)} generated cases (seed 0), each replayed twice; best of {args.repeat}; CPU s incl. children")
    print(f"{'policy':<10} {'in-process':>18} {'heartbeat':>18} {'watchdog':>18} {'watchdog extra':>22}")
    for policy in args.policy:
        def plain(with_beat: bool = False) -> None:
            for case in cases:
                run_case(policy, case, options, Slowest(), beat if with_beat else None)

        def watched() -> None:
            with Watchdog(partial(_counted, policy, options), call_deadline_s=options.deadline_s,
                          preload=PRELOAD) as dog:
                for case in cases:
                    outcome = dog.call(case)
                    CHILD_CPU[0] += outcome.value[2][1]

        plain()  # warm: imports, the policy's first use
        runs = {name: min((timed(work) for _ in range(args.repeat)), key=lambda t: t[0])
                for name, work in (("in", plain), ("beat", partial(plain, True)), ("dog", watched))}
        base, extra = runs["in"], runs["dog"][0] - runs["in"][0]
        cells = [f"{cpu:6.2f} cpu {wall:6.2f} wall" for cpu, wall in runs.values()]
        print(f"{policy:<10} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18}"
              f" {extra:+6.2f} s ({extra / base[0]:+.0%}, {extra / len(cases) * 1000:+.1f} ms/case)")


if __name__ == "__main__":
    main()
