"""Run the reproduction experiments' replays (no Prefect, no MLflow) on a Dask LocalCluster and print
our results beside the papers' tables and the load sweep (Castor Fig. 16 / SJF-BSBF Fig. 6a), each
mean with its seeds, the paired comparisons of a ``classes`` table's first column over seeds (each
policy against the baseline and the policy ranked above, with the Order line:
:func:`schedlab.sched.reporting.reproduce.paired_on_first_column`), and the wall time.

    python -m schedlab.studies.reproduce_papers [--workers 2] [--loads 1.0] [castor-pollux sjf-bsbf-pollux ...]
    python -m schedlab.studies.reproduce_papers --interference table:h200-pairs.csv gimbal-jct gimbal-makespan
    python -m schedlab.studies.reproduce_papers --cache /tmp/lyra --seeds 0 lyra-table5 lyra-scaling lyra-advanced \\
        lyra-heterogeneous lyra-ideal          # Lyra Table 5 (one seed; --labels to run some rows only)

Default configs: the Philly set-ups with the trace's own durations (castor-philly, sjf-bsbf-philly,
castor-itp) and the papers' Pollux-method workloads (castor-pollux, sjf-bsbf-pollux,
sjf-bsbf-pollux-480). Tables of ``kind: schemes`` (Lyra Table 5) gather their rows from every config
given on the command line. ``--cache DIR`` keeps each replay's job table and summary (by the replay's
key) and reuses them on the next call, so a long reproduction can be run in parts.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from pathlib import Path

import pandas as pd

DEFAULT = ["castor-philly", "sjf-bsbf-philly", "castor-itp", "castor-pollux", "sjf-bsbf-pollux", "sjf-bsbf-pollux-480"]
JOB_COLUMNS = ("num_gpus", "jct_s", "wait_s", "queue_s", "preemptions", "submit_time", "end_time", "deadline")


def run_spec(spec) -> tuple[float, str, pd.DataFrame, float, dict]:
    """One replay (on a Dask worker): (load, label, job table, wall seconds, numeric summary)."""
    from schedlab.sched.reporting.paper_tables import window_usage
    from schedlab.tasks.replay import execute

    started = time.perf_counter()
    result, cluster = execute(spec)
    summary = {k: v for k, v in result.summary.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    t0, t1 = float(result.jobs["submit_time"].min()), float(result.jobs["submit_time"].max())
    per = cluster.training_pool.gpus_per_server
    training_gpus, inference_gpus, inference_busy = cluster.training_pool.servers * per, 0, 0.0
    if spec.inference:  # usage over the submission window (Table 5's 15 days), sched/reporting/paper_tables.py
        from schedlab.sched.models.inference import load_inference

        inference_gpus = cluster.pool("inference").servers * cluster.pool("inference").gpus_per_server
        inference_busy = load_inference(spec.inference["load"]).integral(t0, t1) * inference_gpus
    (summary["window_training_usage"], summary["window_overall_usage"],
     summary["window_onloan_usage"]) = window_usage(result.utilization, t0, t1, training_gpus, per, inference_gpus,
                                                    inference_busy)
    jobs = result.jobs[[c for c in JOB_COLUMNS if c in result.jobs.columns]]
    return spec.load, spec.label, jobs, time.perf_counter() - started, summary


def experiment_tables(name: str, jobs: dict[tuple[float, str], list[pd.DataFrame]]) -> list[tuple[str, pd.DataFrame]]:
    """The paper tables of config ``name`` (``tables_for_experiment``) from its replays' job tables
    (``(load, label)`` -> one table per seed, cut to :data:`JOB_COLUMNS`), as ``(title, frame)``;
    ``kind: schemes`` tables are gathered over every config in ``main``, ``kind: figures`` hold no
    replay metric."""
    from schedlab.sched.reporting.paper_tables import compare, tables_for_experiment
    from schedlab.sched.reporting.reproduce import with_seeds

    out = []
    for table_name, spec in tables_for_experiment(name).items():
        kind = spec.get("kind", "classes")
        at_load = {label: js for (l, label), js in jobs.items() if math.isclose(l, spec["load"])}
        if kind in ("schemes", "figures") or not at_load:
            continue
        if kind == "ratios":
            title = (f"{table_name} at load {spec['load']} (policy vs baseline: baseline / policy for times, policy /"
                     " baseline for deadlines met, seed means over `seeds`; rows of other experiments NaN):")
        else:
            title = (f"{table_name} at load {spec['load']} (hours, seed means over `seeds`; large = more than"
                     f" {spec['large_job_gpus']} GPUs; class average: {spec['class_average']}):")
        out.append((title, with_seeds(compare(table_name, at_load), spec, at_load)))
    return out


def cached_run(spec, cache: str | None):
    """``run_spec`` through the cache folder (``<key>.parquet`` + ``<key>.json``) when one is given."""
    if cache is None:
        return run_spec(spec)
    key = spec.model_copy(update={"code_version": "reproduce"}).key
    jobs_path, meta_path = Path(cache) / f"{key}.parquet", Path(cache) / f"{key}.json"
    if jobs_path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        return spec.load, spec.label, pd.read_parquet(jobs_path), meta["wall_s"], meta["summary"]
    load, label, jobs, wall, summary = run_spec(spec)
    Path(cache).mkdir(parents=True, exist_ok=True)
    jobs.to_parquet(jobs_path)
    meta_path.write_text(json.dumps({"label": label, "seed": spec.seed, "trace": spec.trace_label,
                                     "wall_s": wall, "summary": summary}, default=str))
    return load, label, jobs, wall, summary


def main() -> None:
    from schedlab.settings import Settings

    Settings.from_env().apply().prefect_ready()  # before prefect is imported (tasks.replay), for the workers too
    from dask.distributed import Client, LocalCluster
    from schedlab.sched.reporting.paper_tables import HOUR, compare, paper_tables, tables_for_experiment
    from schedlab.sched.reporting.reproduce import order_line, paired_on_first_column
    from schedlab.sched.spec import load_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=DEFAULT)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loads", type=float, nargs="+", help="only these load factors (default: the configs')")
    parser.add_argument("--seeds", type=int, nargs="+", help="these seeds in place of the configs' (a subset or more)")
    parser.add_argument("--labels", nargs="+", help="only these policy labels (default: all)")
    parser.add_argument("--cache", help="folder keeping each replay's results, reused on the next call")
    parser.add_argument("--csv", help="write the kind: schemes tables here (one CSV per table)")
    parser.add_argument("--interference", help="replace every config's ξ source (e.g. table:h200-pairs.csv, the "
                                               "measured H200 pairs)")
    args = parser.parse_args()
    if args.seeds and any(seed < 0 for seed in args.seeds):
        parser.error("--seeds must be non-negative")
    pd.set_option("display.width", 250, "display.max_columns", 40, "display.precision", 2)
    started = time.perf_counter()
    scheme_jobs: dict[str, list[pd.DataFrame]] = defaultdict(list)
    scheme_summaries: dict[str, list[dict]] = defaultdict(list)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        for name in args.configs:
            config = load_config(name)
            if args.seeds:
                config = config.model_copy(update={"seeds": args.seeds})
            if args.interference:
                config = config.model_copy(update={"models": config.models.model_copy(
                    update={"interference": args.interference})})
            specs = [s for s in config.grid("reproduce") if (not args.loads or s.load in args.loads)
                     and (not args.labels or s.label in args.labels)]
            if not specs:
                continue
            t0 = time.perf_counter()
            jobs: dict[tuple[float, str], list[pd.DataFrame]] = defaultdict(list)
            walls: dict[str, list[float]] = defaultdict(list)
            by_key: dict[str, pd.DataFrame] = {}  # spec key -> its job table (the paired comparisons)
            for replay, (load, label, table, wall, summary) in zip(specs, client.gather(
                    client.map(cached_run, specs, cache=args.cache, pure=False))):
                by_key[replay.key] = table
                jobs[(load, label)].append(table)
                walls[label].append(wall)
                if math.isclose(load, 1.0):
                    scheme_jobs[label].append(table)
                    scheme_summaries[label].append(summary)
            print(f"\n=== {name}: {config.description} (seeds {sorted({s.seed for s in specs})}, interference"
                  f" {config.models.interference}); {len(specs)} replays in {time.perf_counter() - t0:.0f} s")
            print("mean wall s per replay: " + ", ".join(f"{k} {sum(v) / len(v):.1f}" for k, v in walls.items()))
            sweep = pd.DataFrame(
                {load: {label: sum(j["jct_s"].mean() for j in js) / len(js) / HOUR
                        for (l, label), js in jobs.items() if l == load}
                 for load in sorted({l for l, _ in jobs})}
            )
            sweep["seeds"] = [  # the replays each mean is over (a range when loads differ)
                "-".join(dict.fromkeys(str(n) for n in sorted({len(js) for (_, lab), js in jobs.items() if lab == label})))
                for label in sweep.index]
            print("average JCT (hours, seed means over `seeds`) by load factor:")
            print(sweep.round(2).to_string())
            for title, frame in experiment_tables(config.name, jobs):
                print(f"\n{title}")
                print(frame.round(3).to_string())
            for table_name, spec in tables_for_experiment(config.name).items():  # classes tables: paired over seeds
                if spec.get("kind", "classes") == "classes":
                    pairs = paired_on_first_column(config, spec, specs, by_key)
                    if not pairs.empty:
                        order = order_line(pairs, spec["columns"][0], config.paired_interval)
                        print(f"\n{table_name}: " + order.replace("**", ""))
                        print(pairs.drop(columns=["trace", "cluster"]).round(3).to_string(index=False))
    for table_name, spec in paper_tables().items():
        if spec.get("kind") != "schemes" or not set(spec["experiments"]) & set(args.configs):
            continue
        frame = compare(table_name, dict(scheme_jobs), dict(scheme_summaries))
        frame.insert(3, "seeds", [len(scheme_jobs.get(label, [])) for label in frame.index])
        print(f"\n{table_name} (seconds; usage 0-1; seed means; `vs {spec['baseline']}` = {spec['baseline']} / row,"
              " `vs ref` = row / reference row, the paper's Reduction):")
        print(frame.round(3).to_string())
        onloan = {label: [s["window_onloan_usage"] for s in sums if not math.isnan(s.get("window_onloan_usage", math.nan))]
                  for label, sums in scheme_summaries.items()}
        if any(onloan.values()):  # Lyra §7.3 Fig. 9: "consistently above 92 %"
            print("on-loan server usage over the window (busy / lent GPU-seconds, seed mean; paper > 0.92): "
                  + ", ".join(f"{label} {sum(v) / len(v):.3f}" for label, v in onloan.items() if v))
        if args.csv:
            Path(args.csv).mkdir(parents=True, exist_ok=True)
            frame.rename_axis("label").to_csv(Path(args.csv) / f"{table_name}.csv")
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
