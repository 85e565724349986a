"""Speed and memory benchmarks: each module measures and prints its figures (no timed tests).

Run one as ``python -m schedlab.benchmarks.NAME [--help]``; the list, with what each measures, is in
``docs/contributing.md``. A benchmark that replays runs each measurement in a fresh interpreter
(:func:`schedlab.benchmarks.common.run_isolated`) so that its peak memory is its own.
"""
