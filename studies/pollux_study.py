"""Replay Pollux's simulator study (docs/explanation/pollux.md; Pollux OSDI'21 §5.3, Fig. 8a): tiresias
(Tiresias+TunedJobs), optimus (Optimus+Oracle) and pollux on the 8 study workloads at relative loads
0.5 / 1.0 / 1.5 / 2.0, on a Dask LocalCluster; prints average JCT per cell, the study's own figure
(its ``results-jobload/<policy>-<load>/summary.json``, rounded to 1 s) and our deviation, and the
wall time. Cells go to the workers slowest first (pollux, highest load first) and each is printed
as it completes. ``--speed`` instead times one replay of workload-6 per policy: cold (a fresh Python
process: the replay alone, and the whole process with imports, data loading and preparation) and
warm (a second replay in the same process; in learned mode it refits nothing: every history was fitted
by the first, and ``goodput_fit`` keeps a process's fits). ``--check-cli`` also replays each cell through
``schedlab replay --format pollux`` (the CLI's own code, in the worker) and reports whether its
average JCT equals the benchmark's, cell by cell.

    python -m schedlab.studies.pollux_study [--data PATH/profiles/pollux] [--workers 2]
        [--policies tiresias optimus pollux] [--workloads 1 .. 8] [--loads 0.5 1.0 1.5 2.0] [--check-cli]
        [--knowledge learned|oracle]

The study's rounds are aligned to its workload clock (t = 0 is the window's start): the ``pollux``
loader keeps the file's clock (``time_origin='file'``, its default), as every replay of the format does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from schedlab.benchmarks.common import DATA

DEFAULT_DATA = DATA / "profiles" / "pollux"
CLUSTER = "16x4:t4"  # the study's 16 g4dn.12xlarge nodes (pollux-64)
FOLDERS = {0.5: "workloads-0.5", 1.0: "workloads", 1.5: "workloads-1.5", 2.0: "workloads-2.0"}
# the study's average JCTs (s), workloads 1-8, from its published results (results-jobload/)
STUDY = {
    ("tiresias", 0.5): (1451, 2333, 1870, 1947, 1425, 1827, 3979, 1900),
    ("tiresias", 1.0): (2474, 5145, 3876, 3280, 3501, 3470, 5480, 5080),
    ("tiresias", 1.5): (5520, 6334, 6562, 5577, 6832, 5830, 5367, 7436),
    ("tiresias", 2.0): (10138, 8656, 10728, 9665, 12098, 10255, 8371, 10406),
    ("optimus", 0.5): (1310, 3125, 1987, 2174, 1325, 1958, 5314, 1971),
    ("optimus", 1.0): (4087, 6914, 3944, 5968, 5656, 5302, 7291, 6294),
    ("optimus", 1.5): (7674, 6678, 5684, 7684, 7900, 7500, 6426, 8331),
    ("optimus", 2.0): (10807, 8515, 8363, 10313, 11830, 9767, 6998, 11175),
    ("pollux", 0.5): (1060, 1826, 1311, 1498, 977, 1288, 2881, 1432),
    ("pollux", 1.0): (2089, 3323, 2188, 2721, 2674, 2446, 3616, 2952),
    ("pollux", 1.5): (3856, 3381, 3300, 3903, 4007, 3474, 3218, 4345),
    ("pollux", 2.0): (6186, 4191, 5132, 5262, 6591, 5105, 3836, 6010),
}


def workload_path(data: str | Path, workload: int, load: float) -> Path:
    """The study's workload file of a cell."""
    return Path(data) / FOLDERS[load] / f"workload-{workload}.csv"


def replay_cell(data: str, policy: str, workload: int, load: float, knowledge: str = "learned",
                check_cli: bool = False) -> dict:
    """One replay (runs on a Dask worker): the average JCT and its wall time (``knowledge`` is pollux's);
    with ``check_cli`` also the CLI's average JCT for the same cell (``cli_avg_jct_s``)."""
    os.environ["SCHEDLAB_POLLUX_DATA"] = data
    from schedlab.sched.replay import ReplaySpec, prepare, run
    from schedlab.sched.traces import LoadOptions

    params = {"knowledge": knowledge} if policy == "pollux" else {}
    spec = ReplaySpec(trace=str(workload_path(data, workload, load)), format="pollux",
                      options=LoadOptions(max_gpus=None), cluster=CLUSTER,
                      policies=[{"name": policy, "params": params}], goodput_root=data)
    prepared = prepare(spec)
    start, cpu = time.perf_counter(), time.process_time()
    [result] = run(spec, prepared)
    cell = {"policy": policy, "workload": workload, "load": load, "avg_jct_s": result.summary["avg_jct_s"],
            "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}
    if check_cli:
        cell["cli_avg_jct_s"] = cli_cell(data, policy, workload, load, knowledge)
    return cell


def cli_cell(data: str, policy: str, workload: int, load: float, knowledge: str = "learned") -> float:
    """The cell's average JCT as ``schedlab replay --format pollux`` reports it (its summary.json)."""
    import contextlib
    import tempfile

    from schedlab.cli import main as cli_main

    os.environ["SCHEDLAB_POLLUX_DATA"] = data
    with tempfile.TemporaryDirectory(prefix="pollux-study-cli-") as tmp:
        argv = ["replay", "--trace", str(workload_path(data, workload, load)), "--format", "pollux",
                "--cluster", CLUSTER, "--policy", policy, "--out", tmp, "--overwrite", "--no-progress",
                *(["--set", f"pollux.knowledge={knowledge}"] if policy == "pollux" else [])]
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):  # its table: not wanted here
            code = cli_main(argv)
        if code:
            raise RuntimeError(f"schedlab {' '.join(argv)} exited {code}")
        return json.loads((Path(tmp) / "summary.json").read_text())["avg_jct_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.environ.get("SCHEDLAB_POLLUX_DATA") or str(DEFAULT_DATA))
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--policies", nargs="+", default=["tiresias", "optimus", "pollux"])
    parser.add_argument("--workloads", nargs="+", type=int, default=list(range(1, 9)))
    parser.add_argument("--loads", nargs="+", type=float, default=[0.5, 1.0, 1.5, 2.0])
    parser.add_argument("--knowledge", choices=["learned", "oracle"], default="learned",
                        help="pollux's goodput knowledge (its policy option)")
    parser.add_argument("--speed", action="store_true", help="time one workload-6 replay per policy instead")
    parser.add_argument("--check-cli", action="store_true",
                        help="also replay each cell through `schedlab replay` and compare its average JCT")
    parser.add_argument("--one", nargs=3, metavar=("POLICY", "WORKLOAD", "LOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not (Path(args.data) / "traces").is_dir():
        sys.exit(f"Pollux data not found: {args.data} (pass --data)")
    bad = [load for load in args.loads if load not in FOLDERS]
    if bad or not set(args.workloads) <= set(range(1, 9)):
        sys.exit(f"loads must be among {sorted(FOLDERS)} and workloads among 1-8 (got {args.loads}, {args.workloads})")
    if args.speed:
        for policy in args.policies:
            start = time.perf_counter()
            cold = json.loads(subprocess.run(
                [sys.executable, "-m", __spec__.name, "--data", args.data, "--knowledge", args.knowledge,
                 "--one", policy, "6", "1.0"],
                check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            process = time.perf_counter() - start
            replay_cell(args.data, policy, 6, 1.0, args.knowledge)  # warm the model caches
            warm = replay_cell(args.data, policy, 6, 1.0, args.knowledge)
            print(f"{policy:9s} workload-6 load 1.0: cold {cold['wall_s']:.2f} s per replay ({cold['cpu_s']:.2f} s CPU;"
                  f" {process:.2f} s whole process), warm {warm['wall_s']:.2f} s ({warm['cpu_s']:.2f} s CPU);"
                  f" avg JCT {cold['avg_jct_s']:.2f} s")
        return
    if args.one:
        print(json.dumps(replay_cell(args.data, args.one[0], int(args.one[1]), float(args.one[2]), args.knowledge)))
        return

    from dask.distributed import Client, LocalCluster, as_completed

    cost = {"pollux": 2, "optimus": 1, "tiresias": 0}  # slowest first: no long replay left for the end
    cells = sorted(((p, w, load) for p in args.policies for load in args.loads for w in args.workloads),
                   key=lambda c: (-cost.get(c[0], 0), -c[2], c[1]))
    start = time.perf_counter()
    results = []
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            Client(lc) as client:
        futures = [client.submit(replay_cell, args.data, p, w, load, args.knowledge, args.check_cli, pure=False,
                                 priority=-i)
                   for i, (p, w, load) in enumerate(cells)]
        for future in as_completed(futures):
            r = future.result()
            results.append(r)
            study = STUDY[(r["policy"], r["load"])][r["workload"] - 1]
            cli = (f", CLI {r['cli_avg_jct_s']:.3f} (equal: {r['cli_avg_jct_s'] == r['avg_jct_s']})"
                   if args.check_cli else "")
            print(f"[{time.perf_counter() - start:6.0f} s] {r['policy']:9s} w{r['workload']} load {r['load']}:"
                  f" {r['avg_jct_s']:.3f} / {study} ({r['avg_jct_s'] / study - 1:+.1%}){cli},"
                  f" replay {r['wall_s']:.1f} s ({r['cpu_s']:.1f} s CPU)",
                  flush=True)
    wall = time.perf_counter() - start
    got = {(r["policy"], r["workload"], r["load"]): r for r in results}
    print(f"average JCT (s), ours / study (deviation), cluster {CLUSTER}, {args.workers} Dask workers,"
          f" pollux knowledge: {args.knowledge}")
    print("policy    load  " + "  ".join(f"{'w' + str(w):>22s}" for w in args.workloads) + "   mean dev")
    for p in args.policies:
        for load in args.loads:
            devs, row = [], []
            for w in args.workloads:
                ours, study = got[(p, w, load)]["avg_jct_s"], STUDY[(p, load)][w - 1]
                devs.append(ours / study - 1)
                row.append(f"{ours:8.0f}/{study:6d} ({devs[-1]:+5.1%})")
            print(f"{p:9s} {load:4.1f}  " + "  ".join(row) + f"   {sum(devs) / len(devs):+5.1%}")
    complete = [w for w in args.workloads if all((p, w, 1.0) in got for p in ("pollux", "tiresias", "optimus"))]
    if complete:
        order = all(got[("pollux", w, 1.0)]["avg_jct_s"] < got[("tiresias", w, 1.0)]["avg_jct_s"]
                    < got[("optimus", w, 1.0)]["avg_jct_s"] for w in complete)
        print(f"order pollux < tiresias < optimus at load 1.0 on workloads {complete}: {order}")
    if args.check_cli:
        equal = sum(r["cli_avg_jct_s"] == r["avg_jct_s"] for r in results)
        print(f"CLI (schedlab replay --format pollux) equals the benchmark on {equal} of {len(results)} cells")
    cpu = sum(r["cpu_s"] for r in results)
    print(f"CPU time of the replays {cpu:.0f} s: on an idle machine about {cpu / args.workers:.0f} s of wall time"
          f" over {args.workers} workers, plus start-up")
    slowest = max(results, key=lambda r: r["wall_s"])
    print(f"wall time {wall:.1f} s for {len(cells)} replays; slowest replay {slowest['wall_s']:.1f} s"
          f" ({slowest['policy']} w{slowest['workload']} load {slowest['load']})")


if __name__ == "__main__":
    main()
