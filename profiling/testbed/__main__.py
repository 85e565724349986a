"""``python -m schedlab.profiling.testbed``: the testbed as a plain module (no Prefect, no MLflow)."""

from __future__ import annotations

import argparse
import sys

from schedlab.profiling.testbed import add_arguments, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m schedlab.profiling.testbed",
                                     description="Run policies on real devices and compare with the simulator.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
