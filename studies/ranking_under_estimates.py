"""Which of the seed papers' orders survive when the policies decide on estimated, not true, durations?

Runs the shipped ranking experiments (``ranking-castor-t5``, ``ranking-sjf-bsbf-iii``, ``ranking-showdown``:
each a paper's set-up with every duration-reading policy run under ``oracle``, ``history``, ``requested``,
``noisy`` sigma 0.5 and 1.0) on a Dask LocalCluster, without Prefect or MLflow, and prints per set-up:

- the ranking under each knowledge mode (average JCT in hours, seed means), the policies that read no
  duration appearing in every mode unchanged;
- for each pair of policies adjacent in the oracle ranking, and each seed system against the others, whether
  the order holds under each mode, with the paired verdict over seeds (the same trace under both policies,
  :mod:`schedlab.sched.reporting.paired`);
- what each policy loses to estimates: its run under a mode against its own oracle run, paired.

    python -m schedlab.studies.ranking_under_estimates [--workers 2] [--cache DIR] [--markdown FILE] [CONFIG ...]

``--cache`` (default ``$SCHEDLAB_HOME/studies/ranking``) keeps each replay's job table, so the study can be
run in parts and re-run for the analysis alone. The page ``docs/studies/ranking_under_estimates.md`` holds
the figures of the last run and what they mean.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

DEFAULT = ["ranking-castor-t5", "ranking-sjf-bsbf-iii", "ranking-showdown"]
MODES = ["oracle", "history", "requested", "noisy-0.5", "noisy-1.0"]
#: the seed systems of each set-up, each compared with every other policy of the set-up
SEED_SYSTEMS = {"ranking-castor-t5": ["castor"], "ranking-sjf-bsbf-iii": ["sjf-bsbf"],
                "ranking-showdown": ["castor", "sjf-bsbf", "gimbal-jct", "lyra"]}
HOUR = 3600.0


def split_label(label: str) -> tuple[str, str]:
    """``castor~noisy-0.5`` -> (``castor``, ``noisy-0.5``); a label without ``~`` is the oracle run."""
    policy, _, mode = label.partition("~")
    return policy, mode or "oracle"


def per_seed_jct(config: str, cache: str, workers: int) -> pd.DataFrame:
    """Average JCT (s) per (label, seed) of ``config``'s replays, run on a LocalCluster through the cache."""
    from dask.distributed import Client, LocalCluster

    from schedlab.sched.spec import load_config
    from schedlab.studies.reproduce_papers import cached_run

    specs = load_config(config).grid("ranking")
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        futures = client.map(cached_run, specs, cache=cache, pure=False)
        rows = [{"label": label, "seed": spec.seed, "avg_jct_s": float(jobs["jct_s"].mean())}
                for spec, (_, label, jobs, _, _) in zip(specs, client.gather(futures), strict=True)]
    return pd.DataFrame(rows)


def mode_table(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` (label, seed, avg_jct_s) as a (policy, seed) x mode frame of average JCT; a policy that
    reads no duration (only an oracle label) is repeated in every mode."""
    frame = runs.assign(policy=runs["label"].map(lambda s: split_label(s)[0]),
                        mode=runs["label"].map(lambda s: split_label(s)[1]))
    wide = frame.pivot_table(index=["policy", "seed"], columns="mode", values="avg_jct_s")
    for mode in MODES:
        if mode not in wide:
            wide[mode] = float("nan")
        wide[mode] = wide[mode].fillna(wide["oracle"])
    return wide[MODES]


def rankings(wide: pd.DataFrame) -> pd.DataFrame:
    """Seed-mean average JCT (hours) per policy and mode, rows in the oracle order."""
    means = wide.groupby(level="policy").mean() / HOUR
    return means.sort_values("oracle")


def readers(runs: pd.DataFrame) -> list[str]:
    """The policies run under estimates (those with a ``~mode`` label)."""
    return sorted({split_label(label)[0] for label in runs["label"] if "~" in label})


def order_pairs(config: str, order: list[str]) -> list[tuple[str, str]]:
    """The pairs a page reports: neighbours in the oracle order, and each seed system against every other
    policy; each as (better under oracle, worse under oracle)."""
    pairs = list(zip(order, order[1:]))
    for system in SEED_SYSTEMS.get(config, []):
        if system in order:
            for other in order:
                if other != system:
                    pair = (system, other) if order.index(system) < order.index(other) else (other, system)
                    if pair not in pairs:
                        pairs.append(pair)
    return pairs


def pair_verdicts(wide: pd.DataFrame, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """For each (a, b) and mode: b's average JCT minus a's per seed, paired (:func:`paired.paired`): mean
    (h), 95 % interval, seeds where a is better, and whether the oracle order holds."""
    from schedlab.sched.reporting import paired

    rows = []
    for a, b in pairs:
        for mode in MODES:
            both = pd.concat([wide.loc[b, mode], wide.loc[a, mode]], axis=1, keys=["b", "a"]).dropna() / HOUR
            test = paired.paired(both["b"], both["a"], a, higher_is_better=True)  # b - a > 0: a better
            holds = "kept" if test.verdict == paired.BETTER else "flipped" if test.verdict == paired.WORSE else "not separated"
            rows.append({"better (oracle)": a, "worse (oracle)": b, "mode": mode, "diff_h": test.mean,
                         "ci95_low_h": test.low, "ci95_high_h": test.high, "a_wins": test.wins,
                         "seeds": test.seeds, "order": holds})
    return pd.DataFrame(rows)


def losses(wide: pd.DataFrame, policies: list[str]) -> pd.DataFrame:
    """Each duration reader under each estimate against its own oracle run (hours, paired over seeds)."""
    from schedlab.sched.reporting import paired

    rows = []
    for policy in policies:
        for mode in MODES[1:]:
            both = wide.loc[policy, [mode, "oracle"]].dropna() / HOUR
            test = paired.paired(both[mode], both["oracle"], "oracle")  # lower JCT is better
            base = both["oracle"].mean()
            rows.append({"policy": policy, "mode": mode, "oracle_h": base, "loss_h": test.mean,
                         "loss_pct": 100 * test.mean / base, "ci95_low_h": test.low, "ci95_high_h": test.high,
                         "verdict": {paired.BETTER: "better than oracle", paired.WORSE: "worse than oracle"}.get(
                             test.verdict, test.verdict)})
    return pd.DataFrame(rows)


def summary_of_orders(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Per mode: how many reported pairs keep, flip or are not separated."""
    return verdicts.pivot_table(index="mode", columns="order", values="seeds", aggfunc="count", fill_value=0).reindex(MODES)


def main(argv: list[str] | None = None) -> None:
    from schedlab.settings import Settings, schedlab_home

    Settings.from_env().apply().prefect_ready()  # before prefect is imported (tasks.replay), for the workers too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=DEFAULT)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", default=str(schedlab_home() / "studies" / "ranking"),
                        help="folder keeping each replay's results (default: $SCHEDLAB_HOME/studies/ranking)")
    parser.add_argument("--markdown", help="also write the tables here as Markdown")
    args = parser.parse_args(argv)
    from schedlab.sched.reporting.reproduce import to_markdown

    pd.set_option("display.width", 250, "display.max_columns", 40, "display.max_rows", 500)
    out: list[str] = []
    for config in args.configs:
        started = time.perf_counter()
        runs = per_seed_jct(config, args.cache, args.workers)
        wide = mode_table(runs)
        ranked = rankings(wide)
        order = list(ranked.index)
        verdicts = pair_verdicts(wide, order_pairs(config, order))
        blocks = [
            (f"{config}: average JCT (h), seed means ({runs['seed'].nunique()} seeds), oracle order", ranked.round(3)),
            ("how the ranking moves: each mode's order", pd.DataFrame(
                {mode: list(ranked[mode].sort_values().index) for mode in MODES}, index=range(1, len(order) + 1))),
            ("pairs (b - a, hours, paired over seeds; `kept`: a still better at 95 %)", verdicts.round(3)),
            ("pairs per mode", summary_of_orders(verdicts)),
            ("what each duration reader loses to estimates (mode - oracle, paired)", losses(wide, readers(runs)).round(3)),
        ]
        print(f"\n=== {config} ({time.perf_counter() - started:.0f} s)")
        for title, frame in blocks:
            print(f"\n{title}\n{frame.to_string()}")
            out.append(f"### {title}\n\n{to_markdown(frame, 'policy' if frame.index.name == 'policy' else '#')}\n")
    if args.markdown:
        Path(args.markdown).write_text("\n".join(out))


if __name__ == "__main__":
    main()
