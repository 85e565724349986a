"""``python -m schedlab.profiling.guard [--signal TERM] [--parent PID] [--cpus 0,1] [--rank-cpus '0;1'] CMD …``: exec CMD so
that it is signalled (SIGKILL unless ``--signal`` names another) when the process that started it dies
(Linux ``PR_SET_PDEATHSIG``, kept across exec), so a killed sweep leaves no runner and a killed experiment
no Prefect server behind.  CMD does not start at all if its parent is already gone: its parent is no
longer ``--parent`` (when given) or is init.  ``--cpus`` pins CMD (and every thread and process it
starts) to those cores (``sched_setaffinity``), before it runs a line: a CPU "device" of the testbed or
of a pinned profiling sweep.  ``--rank-cpus`` pins a rank of a multi-device job started by ``torchrun``
to its own device's cores: the ``LOCAL_RANK``-th of the ``;``-separated sets (the testbed's launcher pins
each rank so; the profiler measures the same placement)."""
from __future__ import annotations

import ctypes
import os
import signal
import sys


def parse_cpus(text: str) -> set[int]:
    """``0,1`` or ``0-3,6`` as a set of core ids; ValueError naming the text when it is not one."""
    cores: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"--cpus {text!r}: expected core ids such as 0,1 or 0-3")
        cores.update(range(int(low), int(high if dash else low) + 1))
    return cores


def rank_cpus(text: str, local_rank: str) -> set[int]:
    """The cores of rank ``local_rank`` among ``text``'s ``;``-separated core sets."""
    sets = text.split(";")
    if not local_rank.isdigit() or int(local_rank) >= len(sets):
        raise ValueError(f"--rank-cpus {text!r}: no core set for LOCAL_RANK={local_rank!r}")
    return parse_cpus(sets[int(local_rank)])


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    signum, parent, cpus = signal.SIGKILL, None, None
    while args and args[0] in ("--signal", "--parent", "--cpus", "--rank-cpus"):
        option, value = args.pop(0), args.pop(0)
        if option == "--signal":
            signum = signal.Signals[f"SIG{value}"]
        elif option == "--parent":
            parent = int(value)
        elif option == "--cpus":
            cpus = parse_cpus(value)
        else:
            cpus = rank_cpus(value, os.environ.get("LOCAL_RANK", ""))
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signum))  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() == 1 or (parent is not None and os.getppid() != parent):  # parent already gone
        sys.exit(1)
    if cpus is not None:
        os.sched_setaffinity(0, cpus)  # kept across exec, inherited by every thread and child
    os.execvp(args[0], args)


if __name__ == "__main__":
    main()
