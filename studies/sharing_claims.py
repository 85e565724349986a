"""The sharing papers' central claims, decomposed: Castor Table 5's set-up over many seeds,
and each sharing decision's predicted benefit (Castor Theorem 1 / SJF-BSBF eq. 14-23) against the
realised one.

    python -m schedlab.studies.sharing_claims [--seeds 0 1 ... 9] [--labels castor sjf] [--cache DIR] \\
        [--time-to-go nominal|expected_end] [castor-pollux castor-pollux-h200]

Per config: average JCT (hours) mean +/- std over seeds per policy label, the per-seed ranking, and the
seed where castor loses most to sjf (its makespan, the jobs that decide it, the sharing decisions
around them). Per sharing policy (``castor``, ``sjf-bsbf``; their ``decision_log``): one record per
(new job, partner) pair at each sharing start. Both sides of Theorem 1 are measured from the decision:

- ``wait``: the solo-exclusive alternative, (a + a + b) / 2 with a the partner's time to go at its pace
  then and b the new job's remaining solo time. It is the same on both sides (no ξ in it).
- predicted ``share``: eq. 14-23 on the policy's ξ (its predictor) and the accumulation speed of the
  batch Alg. 2 chose; realised ``share``: ((A's end - t) + (B's end - t)) / 2 from the replay.

The gap predicted - realised is split one factor at a time: ``xi``: Theorem 1 on the engine's true
ξ instead of the prediction; ``pace``: on the paces the engine set at the start (a multi-GPU job runs
at its slowest worker's pace: the new job's largest ξ over all its partners, and the partner's pace
relative to its pace before, when it already shared elsewhere); ``later``: the rest (partners joining
or leaving after the decision). ``accumulation``: what the chosen batch halving costs in Theorem 1's
own terms (share with the accumulation speed vs at full speed), not a gap term (both sides pay it).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from schedlab.sched.policies.sharing.policy import theorem1

JOB_COLUMNS = ("job_id", "num_gpus", "submit_time", "start_time", "end_time", "jct_s", "wait_s")
HOUR = 3600.0


def with_time_to_go(spec, time_to_go: str | None):
    """``spec`` with the sharing policies' Theorem 1 time to go (``SharingParams.time_to_go``) set as a
    parameter of the replay (so the cache key has it); None, or another policy: as configured."""
    from schedlab.sched.policies import load_policy_class
    from schedlab.sched.policies.sharing.policy import SJFBSBF

    if time_to_go is None or not issubclass(load_policy_class(spec.policy), SJFBSBF):
        return spec
    return spec.model_copy(update={"params": {**spec.params, "time_to_go": time_to_go}})


def run_one(spec) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One replay with the sharing policies' decision log on: (job table, decisions)."""
    from schedlab.sched.replay import prepare, run

    replay = spec.spec()
    prepared = prepare(replay, warn=False)
    log: list[dict] = []

    def with_log(policy):
        if hasattr(policy, "decision_log"):
            policy.decision_log = log
        return policy

    [result] = run(replay, prepared, wrap_policy=with_log)
    jobs = result.jobs[[c for c in JOB_COLUMNS if c in result.jobs.columns]].copy()
    return jobs, pd.DataFrame(log)


def cached(spec, cache: Path | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``run_one`` through ``cache`` (``<key>.jobs.parquet`` / ``<key>.decisions.parquet``)."""
    if cache is None:
        return run_one(spec)
    key = spec.key
    jobs_path, dec_path = cache / f"{key}.jobs.parquet", cache / f"{key}.decisions.parquet"
    if jobs_path.exists() and dec_path.exists():
        return pd.read_parquet(jobs_path), pd.read_parquet(dec_path)
    jobs, decisions = run_one(spec)
    cache.mkdir(parents=True, exist_ok=True)
    jobs.to_parquet(jobs_path)
    decisions.to_parquet(dec_path)
    return jobs, decisions


def _theorem_share(a: np.ndarray, b: np.ndarray, xi_a: np.ndarray, xi_b: np.ndarray) -> np.ndarray:
    """Theorem 1's pair average JCT when sharing now (eq. 16-17 / 20-21, κ = 0), vectorised."""
    return np.array([theorem1(x, y, y, p, q)[1] for x, y, p, q in zip(a, b, xi_a, xi_b)])


def realised(decisions: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """Add the realised pair JCT and the factor-by-factor Theorem 1 variants to ``decisions``."""
    if decisions.empty:
        return decisions
    end = jobs.set_index("job_id")["end_time"]
    d = decisions.copy()
    t = d["time"]
    d["real_share_s"] = ((end.loc[d["partner"]].to_numpy() - t) + (end.loc[d["job"]].to_numpy() - t)) / 2
    b = d["remaining_s"] / d["speed"]
    d["true_xi_share_s"] = _theorem_share(d["partner_left_s"], b, d["xi_partner_true"], d["xi_job_true"])
    d["pace_share_s"] = _theorem_share(d["partner_left_s"], b, d["partner_pace"] / d["partner_pace_before"],
                                       d["job_pace"])
    d["full_speed_share_s"] = _theorem_share(d["partner_left_s"], d["remaining_s"], d["xi_partner_pred"],
                                             d["xi_job_pred"])
    d["pred_benefit_s"] = d["pred_wait_s"] - d["pred_share_s"]
    d["real_benefit_s"] = d["pred_wait_s"] - d["real_share_s"]
    # Theorem 1 in one unit: the partner's time to go at its pace with goodput 1 (as b counts the new
    # job's nominal seconds; time_to_go nominal), against the engine's expected end (its nominal
    # seconds over its current epoch's goodput; time_to_go expected_end)
    a_nominal = d["partner_nominal_s"]
    d["a_over_nominal"] = d["partner_end_left_s"] / a_nominal
    d["nominal_a_shares"] = [theorem1(x, y / v, y, p, q)[0] for x, y, v, p, q in zip(
        a_nominal, d["remaining_s"], d["speed"], d["xi_partner_pred"], d["xi_job_pred"])]
    # the alternative SJF would take: the new job starts alone once enough GPUs are released (eq. 24)
    d["exclusive_alt_s"] = (d["partner_left_s"] + d["exclusive_start_s"] + d["remaining_s"]) / 2
    d["pred_benefit_excl_s"] = d["exclusive_alt_s"] - d["pred_share_s"]
    d["real_benefit_excl_s"] = d["exclusive_alt_s"] - d["real_share_s"]
    return d


def _new_job_time(a: pd.Series, b: pd.Series, xi_a: pd.Series, xi_b: pd.Series) -> pd.Series:
    """Theorem 1's T_B (eq. 16 / 21 with κ = 0): the new job's time to its end when sharing now."""
    t_a = a * xi_a
    return (b * xi_b).where(a * xi_a >= b * xi_b, t_a + (b - t_a / xi_b))


def new_job_view(d: pd.DataFrame, jobs_end: dict[int, pd.Series]) -> pd.DataFrame:
    """One row per sharing start: the new job's own time to its end, as Theorem 1 predicted it (the
    pair it shares with longest, on the policy's ξ; on the true ξ; at the pace the engine set, its
    largest ξ over all partners), as realised, and Castor eq. 24's alternative (alone once enough GPUs
    are released)."""
    d = d.assign(
        b=d["remaining_s"] / d["speed"],
        tb_pred=_new_job_time(d["partner_left_s"], d["remaining_s"] / d["speed"], d["xi_partner_pred"],
                              d["xi_job_pred"]),
        tb_true=_new_job_time(d["partner_left_s"], d["remaining_s"] / d["speed"], d["xi_partner_true"],
                              d["xi_job_true"]),
        tb_pace=_new_job_time(d["partner_left_s"], d["remaining_s"] / d["speed"],
                              d["partner_pace"] / d["partner_pace_before"], d["job_pace"]))
    starts = d.groupby(["seed", "job", "time"], sort=False).agg(
        remaining_s=("remaining_s", "first"), speed=("speed", "first"), exclusive_start_s=("exclusive_start_s", "first"),
        tb_pred=("tb_pred", "max"), tb_true=("tb_true", "max"), tb_pace=("tb_pace", "max"),
        job_pace=("job_pace", "first"), partners=("partner", "size")).reset_index()
    starts["tb_real"] = [jobs_end[s].loc[j] - t for s, j, t in zip(starts["seed"], starts["job"], starts["time"])]
    starts["tb_exclusive"] = starts["exclusive_start_s"] + starts["remaining_s"]
    return starts


def start_summary(st: pd.DataFrame) -> dict[str, float]:
    """The new jobs' view (hours): predicted vs realised time to end, and the exclusive alternative."""
    h = HOUR
    return {"starts": len(st), "lost_vs_exclusive": float((st["tb_real"] > st["tb_exclusive"]).mean()),
            "pred_lost_vs_exclusive": float((st["tb_pred"] > st["tb_exclusive"]).mean()),
            "exclusive_h": st["tb_exclusive"].mean() / h, "tb_pred_h": st["tb_pred"].mean() / h,
            "tb_true_h": st["tb_true"].mean() / h, "tb_pace_h": st["tb_pace"].mean() / h,
            "tb_real_h": st["tb_real"].mean() / h,
            "accumulation_h": (st["remaining_s"] / st["speed"] - st["remaining_s"]).mean() / h,
            "stretch_real": float((st["tb_real"] / st["remaining_s"]).median()),
            "stretch_pred": float((st["tb_pred"] / st["remaining_s"]).median())}


def decision_summary(d: pd.DataFrame) -> dict[str, float]:
    """One policy's decisions (all seeds): counts, benefits (hours) and the gap split by factor."""
    if d.empty:
        return {"starts": 0, "pairs": 0}
    h = HOUR
    return {
        "starts": int(d.groupby(["seed", "job", "time"]).ngroups), "pairs": len(d),
        "multi_partner": float((d["job_partners"] > 1).mean()),
        "halved": float((d["steps"] > 1).mean()),
        "pred<0": float((d["pred_benefit_s"] < 0).mean()), "real<0": float((d["real_benefit_s"] < 0).mean()),
        "pred_benefit_h": d["pred_benefit_s"].mean() / h, "real_benefit_h": d["real_benefit_s"].mean() / h,
        "median_pred_h": d["pred_benefit_s"].median() / h, "median_real_h": d["real_benefit_s"].median() / h,
        "excl_pred<0": float((d["pred_benefit_excl_s"] < 0).mean()),
        "excl_real<0": float((d["real_benefit_excl_s"] < 0).mean()),
        "excl_pred_benefit_h": d["pred_benefit_excl_s"].mean() / h,
        "excl_real_benefit_h": d["real_benefit_excl_s"].mean() / h,
        "exclusive_start_h": d["exclusive_start_s"].mean() / h, "partner_left_h": d["partner_left_s"].mean() / h,
        "gap_h": (d["real_share_s"] - d["pred_share_s"]).mean() / h,
        "gap_xi_h": (d["true_xi_share_s"] - d["pred_share_s"]).mean() / h,
        "gap_pace_h": (d["pace_share_s"] - d["true_xi_share_s"]).mean() / h,
        "gap_later_h": (d["real_share_s"] - d["pace_share_s"]).mean() / h,
        "accum_cost_h": (d["pred_share_s"] - d["full_speed_share_s"]).mean() / h,
        "a_over_nominal_median": float(d["a_over_nominal"].median()),
        "a_over_nominal>1.5": float((d["a_over_nominal"] > 1.5).mean()),
        "wait_with_nominal_a": float(1 - d["nominal_a_shares"].mean()),
        "job_goodput": d["job_goodput"].mean(), "partner_goodput": d["partner_goodput"].mean(),
        "xi_job_pred": d["xi_job_pred"].mean(), "xi_job_true": d["xi_job_true"].mean(),
        "xi_partner_pred": d["xi_partner_pred"].mean(), "xi_partner_true": d["xi_partner_true"].mean(),
        "job_pace": d["job_pace"].mean(),
    }


def who_pays(runs: dict[tuple[str, int], tuple[pd.DataFrame, pd.DataFrame]], policy: str, base: str) -> pd.DataFrame:
    """Per seed, ``policy``'s extra JCT over ``base`` (job-hours, summed) for the jobs that started
    beside a partner, the jobs that were partners only, and the jobs that never shared."""
    out = {}
    for lab, seed in sorted(runs):
        if lab != policy or (base, seed) not in runs:
            continue
        (pj, dec), (bj, _) = runs[(policy, seed)], runs[(base, seed)]
        extra = (pj.set_index("job_id")["jct_s"] - bj.set_index("job_id")["jct_s"]) / HOUR
        new = set(dec["job"]) if not dec.empty else set()
        partner = (set(dec["partner"]) if not dec.empty else set()) - new
        rest = set(extra.index) - new - partner
        out[seed] = {"new_h": extra.loc[sorted(new)].sum(), "partner_only_h": extra.loc[sorted(partner)].sum(),
                     "never_shared_h": extra.loc[sorted(rest)].sum(), "jobs_new": len(new),
                     "jobs_partner_only": len(partner), "jobs_never": len(rest)}
    return pd.DataFrame.from_dict(out, orient="index")


def outlier(name: str, runs: dict[tuple[str, int], tuple[pd.DataFrame, pd.DataFrame]], policy: str,
            base: str) -> None:
    """The seed where ``policy`` loses most to ``base``: makespans, the jobs that cost most, and the
    sharing decisions those jobs took part in."""
    seeds = sorted({s for lab, s in runs if lab == policy} & {s for lab, s in runs if lab == base})
    if not seeds:
        return
    diff = {s: runs[(policy, s)][0]["jct_s"].mean() - runs[(base, s)][0]["jct_s"].mean() for s in seeds}
    seed = max(diff, key=diff.get)
    (pj, pd_), (bj, _) = runs[(policy, seed)], runs[(base, seed)]
    span = lambda j: (j["end_time"].max() - j["submit_time"].min())  # noqa: E731
    print(f"\n{name}: worst seed for {policy} vs {base}: seed {seed} (avg JCT {pj['jct_s'].mean() / HOUR:.2f} vs"
          f" {bj['jct_s'].mean() / HOUR:.2f} h, makespan {span(pj):,.0f} vs {span(bj):,.0f} s)")
    both = pj.set_index("job_id")[["num_gpus", "submit_time", "start_time", "end_time", "jct_s"]].join(
        bj.set_index("job_id")[["start_time", "end_time", "jct_s"]].add_suffix(f"_{base}"))
    both["extra_h"] = (both["jct_s"] - both[f"jct_s_{base}"]) / HOUR
    shared = set(pd_["job"]) if not pd_.empty else set()
    partnered = set(pd_["partner"]) if not pd_.empty else set()
    both["shared"] = [("new" if j in shared else "") + ("partner" if j in partnered else "") for j in both.index]
    print(f"sum of extra JCT {both['extra_h'].sum():.1f} job-h over {len(both)} jobs; the 10 jobs that lost most:")
    print(both.sort_values("extra_h", ascending=False).head(10).round(2).to_string())
    print(f"the 5 jobs that end last under {policy}:")
    print(both.sort_values("end_time", ascending=False).head(5).round(2).to_string())
    if not pd_.empty:
        late = set(both.sort_values("extra_h", ascending=False).head(10).index)
        involved = pd_[pd_["job"].isin(late) | pd_["partner"].isin(late)]
        cols = ["time", "job", "job_gpus", "remaining_s", "steps", "partner", "partner_gpus", "partner_left_s",
                "xi_job_pred", "xi_job_true", "job_pace", "partner_pace", "pred_benefit_s", "real_benefit_s"]
        print(f"{len(involved)} sharing pairs involve those 10 jobs:")
        print(involved[[c for c in cols if c in involved.columns]].round(2).to_string(index=False))


def main() -> None:
    from schedlab.settings import Settings

    Settings.from_env().apply()
    from schedlab.sched.spec import load_config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*", default=["castor-pollux"])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--labels", nargs="+", default=["castor", "sjf"], help="policy labels (default castor sjf)")
    parser.add_argument("--cache", type=Path, help="folder keeping each replay's jobs and decisions")
    parser.add_argument("--decisions", type=Path, help="write every config's decisions here (CSV per config)")
    parser.add_argument("--time-to-go", choices=("nominal", "expected_end"),
                        help="the sharing policies' time_to_go (default: as configured; the policy's default is nominal)")
    args = parser.parse_args()
    if args.decisions:
        args.decisions.mkdir(parents=True, exist_ok=True)
    if any(s < 0 for s in args.seeds):
        parser.error("--seeds must be non-negative")
    pd.set_option("display.width", 250, "display.max_columns", 40)
    started = time.perf_counter()
    for name in args.configs:
        config = load_config(name).model_copy(update={"seeds": args.seeds})
        specs = [s for s in config.grid("sharing-claims") if math.isclose(s.load, 1.0) and s.label in args.labels]
        missing = set(args.labels) - {s.label for s in specs}
        if missing:
            parser.error(f"{name}: no policy labelled {sorted(missing)} (labels: "
                         f"{sorted({p.label or p.name for p in config.policy_entries()})})")
        runs: dict[tuple[str, int], tuple[pd.DataFrame, pd.DataFrame]] = {}
        for spec in specs:
            t0 = time.perf_counter()
            jobs, decisions = cached(with_time_to_go(spec, args.time_to_go), args.cache)
            if not decisions.empty:
                decisions = realised(decisions.assign(seed=spec.seed), jobs)
            runs[(spec.label, spec.seed)] = (jobs, decisions)
            print(f"  {name} {spec.label} seed {spec.seed}: avg JCT {jobs['jct_s'].mean() / HOUR:.3f} h,"
                  f" {len(decisions)} pairs, {time.perf_counter() - t0:.0f} s", flush=True)
        jct = pd.DataFrame({lab: {s: runs[(lab, s)][0]["jct_s"].mean() / HOUR for s in args.seeds}
                            for lab in args.labels})
        span = pd.DataFrame({lab: {s: (runs[(lab, s)][0]["end_time"].max() - runs[(lab, s)][0]["submit_time"].min())
                                   for s in args.seeds} for lab in args.labels})
        print(f"\n=== {name} (interference {config.models.interference}), seeds {args.seeds}")
        print("avg JCT (h) per seed, rank in brackets:")
        ranks = jct.rank(axis=1, method="min").astype(int)
        print(jct.round(3).astype(str).add(" (").add(ranks.astype(str)).add(")").to_string())
        print("mean +/- std over seeds: " + ", ".join(
            f"{lab} {jct[lab].mean():.3f} +/- {jct[lab].std():.3f} h (makespan {span[lab].mean():,.0f} s)"
            for lab in args.labels))
        if "castor" in jct and "sjf" in jct:
            print(f"castor < sjf on {(jct['castor'] < jct['sjf']).sum()} of {len(jct)} seeds; castor - sjf"
                  f" {(jct['castor'] - jct['sjf']).mean():+.3f} h (median {(jct['castor'] - jct['sjf']).median():+.3f})")
            print("castor's extra JCT over sjf (job-h) by who shared:")
            print(who_pays(runs, "castor", "sjf").round(1).to_string())
            outlier(name, runs, "castor", "sjf")
        for lab in args.labels:
            frames = [runs[(lab, s)][1] for s in args.seeds if not runs[(lab, s)][1].empty]
            if not frames:
                continue
            d = pd.concat(frames, ignore_index=True)
            print(f"\n{name} {lab}: sharing decisions (pairs of all seeds):")
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                              for k, v in decision_summary(d).items()}))
            per_seed = pd.DataFrame({s: decision_summary(d[d["seed"] == s]) for s in sorted(set(d["seed"]))}).T
            print(per_seed[["pairs", "pred<0", "real<0", "excl_real<0", "pred_benefit_h", "real_benefit_h",
                            "excl_pred_benefit_h", "excl_real_benefit_h", "gap_xi_h", "gap_pace_h",
                            "gap_later_h"]].round(3).to_string())
            ends = {seed: runs[(lab, seed)][0].set_index("job_id")["end_time"] for seed in args.seeds}
            st = new_job_view(d, ends)
            print(f"{name} {lab}: the new job's own time to its end (h; per start, all seeds):")
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in start_summary(st).items()}))
            if args.decisions:
                st.to_csv(args.decisions / f"{name}__{lab}__starts.csv", index=False)
                d.to_csv(args.decisions / f"{name}__{lab}.csv", index=False)
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
