"""``python -m schedlab.profiling.guard CMD …``: exec CMD so that it is SIGKILLed when
the sweep process dies (Linux ``PR_SET_PDEATHSIG``, kept across exec), so a killed
sweep leaves no runner behind."""
from __future__ import annotations

import ctypes
import os
import signal
import sys


def main() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() == 1:  # parent already gone
        sys.exit(1)
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
