"""The testbed: the shipped policies, unchanged, driving real training processes on real devices, and
the simulator's error measured against them (``docs/how-to/testbed.md``).

    python -m schedlab.profiling.testbed --generate 16 --device cpu --policy fifo sjf-bsbf --out DIR
    python -m schedlab.profiling.testbed --trace FILE --device cpu|cuda --policy P [P ...] --out DIR

Modules: ``spec`` (the options, validated once), ``devices`` (CPU core sets, GPUs; what a Dask worker
advertises), ``training`` (one job's training process), ``process`` (its launch, progress, stop),
``live`` (the live engine), ``remote`` (the same on several nodes' Dask workers), ``activity`` (activity logs; the replay's recorder), ``node`` (the node's
profile, fitted models and overheads), ``minitrace`` (Castor §9.1-style mini traces), ``compare`` (the
comparison, a pure function), ``session`` (one run of all of it).

:func:`add_arguments` and :func:`run` are the command's two ends, for ``schedlab testbed``. Importing
this package imports neither torch nor the engine.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the testbed's flags to ``parser`` (they are defined and validated in ``spec.py``)."""
    from schedlab.profiling.testbed.spec import add_arguments as add

    add(parser)


def run(args: argparse.Namespace) -> int:
    """Run a testbed session from parsed flags; the exit code (2: bad options, 1: unfinished jobs)."""
    from schedlab.profiling.testbed.session import execute
    from schedlab.profiling.testbed.spec import from_args

    try:
        spec = from_args(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return execute(spec)
