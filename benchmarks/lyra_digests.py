"""Did a Lyra speed change alter any result? Job tables of loaning (and scaling) replays, compared by hash.

The 15-day set-up of ``lyra_speed.py`` (Philly from day 40, Basic scenario, ``lyra-sim`` = 84 x 8 V100
+ 99 x 8 T4, ServeGen ``m-small`` inference load) through every loaning variant: ``lyra`` (loaning +
scaling, reclaim lyra / scf / random), loaning only (``elastic: false``), the ``last`` predictor
(7-minute ticks),
``opportunistic`` and scaling only. ``--record DIR`` writes ``DIR/digests.json`` (SHA-256 of the job
table, floats via ``repr``, of the summary without wall-clock fields, and of the utilization table);
``--check DIR`` replays again and exits 1 on any difference.

    python benchmarks/lyra_digests.py --record /tmp/before [--case lyra-loaning ...]
    python benchmarks/lyra_digests.py --check /tmp/before
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from common import DEFAULT_TRACE, require_trace
from lyra_speed import DEFAULT_INFERENCE, load_table, run_case
from result_digests import summary_digest, table_digest, write_digests

CASES = {  # name -> (lyra_speed case, params, loan option overrides)
    "lyra-loaning": ("lyra-loaning", None, {}),
    "lyra-loaning-scf": ("lyra-loaning", {"reclaim": "scf"}, {}),
    "lyra-loaning-random": ("lyra-loaning", {"reclaim": "random"}, {}),
    "lyra-loaning-only": ("lyra-loaning", {"elastic": False}, {}),
    # 7-minute ticks and the ``last`` predictor (5-minute ticks on 10-minute windows equal the oracle)
    "lyra-loaning-last-7min": ("lyra-loaning", None, {"predictor": "last", "period_s": 420.0}),
    "opportunistic": ("opportunistic", None, {}),
    "lyra-scaling": ("lyra-scaling", None, {}),
}


def timing(key: str) -> bool:
    return key.endswith(("_solve_s", "wall_s"))


def digests(result) -> dict[str, str]:
    return {"table": table_digest(result.jobs), "summary": summary_digest(result.summary, timing),
            "utilization": table_digest(result.utilization)}


def run_all(trace: str, inference: str, cases: list[str]) -> dict[str, dict]:
    table = load_table(trace)
    out = {}
    for name in cases:
        case, params, loan = CASES[name]
        result, wall, _ = run_case(table, case, inference, params, loan)
        out[name] = {**digests(result), "wall_s": round(wall, 2)}
        print(f"{name:22s} {wall:6.1f} s  table {out[name]['table'][:16]} summary {out[name]['summary'][:16]}",
              flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="DIR")
    mode.add_argument("--check", metavar="DIR")
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--inference", default=str(DEFAULT_INFERENCE))
    parser.add_argument("--case", nargs="+", choices=list(CASES), default=list(CASES))
    args = parser.parse_args()
    require_trace(args.trace)
    started = time.perf_counter()
    found = run_all(args.trace, args.inference, args.case)
    path = Path(args.record or args.check) / "digests.json"
    if args.record:
        write_digests(path, found)
        print(f"({time.perf_counter() - started:.0f} s)")
        return
    recorded = json.loads(path.read_text())
    failed = [name for name in found if name in recorded
              and any(recorded[name][k] != found[name][k] for k in ("table", "summary", "utilization"))]
    missing = [name for name in found if name not in recorded]
    for name in found:
        state = "not recorded" if name in missing else "DIFFERS" if name in failed else "identical"
        print(f"{name:22s} {state}  (wall {recorded.get(name, {}).get('wall_s', float('nan')):.1f} s before,"
              f" {found[name]['wall_s']:.1f} s now)")
    if failed:
        sys.exit(f"results differ for: {', '.join(failed)}")


if __name__ == "__main__":
    main()
