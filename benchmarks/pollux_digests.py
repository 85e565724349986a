"""Did a pollux speed change alter any result? Job tables of pollux replays, compared by hash, with
their wall and CPU times (the speed figure: run ``--record`` on the old code and ``--check`` on the
new one at the same moment, and compare CPU seconds).

Set-ups: the Pollux study's workload-6 at load 1.0 (``pollux_study.py``'s cluster) and the first
``--hours`` of Lyra Table 5's Philly window (day 40; Basic annotation, seed 0) on ``lyra-sim``, as
``conf/experiments/lyra-scaling.yaml`` runs it. ``--record DIR`` writes ``DIR/pollux_digests.json``;
``--check DIR`` replays again and exits 1 on any difference.

    python benchmarks/pollux_digests.py --record /tmp/before [--hours 12 48]
    python benchmarks/pollux_digests.py --check /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from common import DEFAULT_TRACE, require_trace
from pollux_study import CLUSTER, DEFAULT_DATA
from result_digests import table_digest, write_digests

LYRA_WINDOW_START_S = 3_456_000.0  # lyra-scaling.yaml's window (the busiest 15 days of Philly)


def study_spec(data: Path, workload: int):
    """A study workload on the study's cluster, read on the file's clock (the format's default)."""
    from schedlab.sched.replay import ReplaySpec

    return ReplaySpec(trace=str(data / "workloads" / f"workload-{workload}.csv"), format="pollux", cluster=CLUSTER,
                      policies=["pollux"], goodput_root=str(data))


def lyra_table(trace: str, hours: float):
    from schedlab.sched.models.annotate import lyra_scenario
    from schedlab.sched.traces import LoadOptions, load_trace

    options = LoadOptions(start=LYRA_WINDOW_START_S, end=LYRA_WINDOW_START_S + hours * 3600, on_oversize="drop",
                          max_gpus=672)
    return lyra_scenario(load_trace(trace, fmt="philly", options=options)[0], "basic", seed=0)


def run_all(data: Path, trace: str, hours: list[float]) -> dict[str, dict]:
    from schedlab.sched.replay import ReplaySpec, prepare, run

    lyra = ReplaySpec(cluster="lyra-sim", policies=["pollux"])
    cases = [("workload-6", lambda: run(study_spec(data, 6))[0])]
    cases += [(f"lyra-{h:g}h", lambda h=h: run(lyra, prepare(lyra, lyra_table(trace, h)))[0]) for h in hours]
    found = {}
    for name, replay_case in cases:
        wall, cpu = time.perf_counter(), time.process_time()
        result = replay_case()
        found[name] = {"table": table_digest(result.jobs), "jobs": len(result.jobs),
                       "rounds": result.summary["pollux_rounds"], "wall_s": round(time.perf_counter() - wall, 2),
                       "cpu_s": round(time.process_time() - cpu, 2)}
        print(f"{name}: {found[name]}", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="DIR")
    mode.add_argument("--check", metavar="DIR")
    parser.add_argument("--data", default=os.environ.get("SCHEDLAB_POLLUX_DATA") or str(DEFAULT_DATA))
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--hours", type=float, nargs="+", default=[12.0, 48.0])
    args = parser.parse_args()
    require_trace(args.trace)
    if not Path(args.data).is_dir():
        sys.exit(f"Pollux data not found: {args.data} (pass --data)")
    os.environ["SCHEDLAB_POLLUX_DATA"] = args.data
    path = Path(args.record or args.check) / "pollux_digests.json"
    if args.check and not path.exists():
        sys.exit(f"nothing recorded at {path}")
    found = run_all(Path(args.data), args.trace, args.hours)
    if args.record:
        write_digests(path, found)
        return
    recorded = json.loads(path.read_text())
    differ = [k for k, v in found.items() if k in recorded and recorded[k]["table"] != v["table"]]
    for k in found:
        if k in recorded:
            print(f"{k}: cpu {recorded[k]['cpu_s']} s recorded, {found[k]['cpu_s']} s now"
                  f" ({'DIFFERS' if k in differ else 'identical'})")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
