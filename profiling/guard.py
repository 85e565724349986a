"""``python -m schedlab.profiling.guard [--signal TERM] [--parent PID] CMD …``: exec CMD so that it is
signalled (SIGKILL unless ``--signal`` names another) when the process that started it dies (Linux
``PR_SET_PDEATHSIG``, kept across exec), so a killed sweep leaves no runner and a killed experiment
no Prefect server behind.  CMD does not start at all if its parent is already gone: its parent is no
longer ``--parent`` (when given) or is init."""
from __future__ import annotations

import ctypes
import os
import signal
import sys


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    signum, parent = signal.SIGKILL, None
    while args and args[0] in ("--signal", "--parent"):
        option, value = args.pop(0), args.pop(0)
        if option == "--signal":
            signum = signal.Signals[f"SIG{value}"]
        else:
            parent = int(value)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signum))  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() == 1 or (parent is not None and os.getppid() != parent):  # parent already gone
        sys.exit(1)
    os.execvp(args[0], args)


if __name__ == "__main__":
    main()
