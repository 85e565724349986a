"""The SM-activity distribution (Castor §9.2, Fig. 12c/d): profiled SMACT per workload and pair, weighted
by the GPU-seconds each GPU spent at it, idle GPUs at 0; absent (never 0) where no profile covers a job."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from schedlab.profiling.smact import smact_profile
from schedlab.profiling.store import ProfileRecord, ProfileStore
from schedlab.sched.core.cluster import load_cluster
from schedlab.sched.core.job import Job
from helpers import prepared_table, replay_table
from schedlab.sched.models.smact import SmactProfile, smact_distribution
from schedlab.sched.traces import LoadOptions, load_trace

H100 = "NVIDIA H100 80GB HBM3"
WORKLOADS = ("cifar10", "imagenet", "bert", "deepspeech2", "ncf", "yolov3")
SOLO = {w: 0.3 + 0.1 * i for i, w in enumerate(WORKLOADS)}  # 0.3 .. 0.8


def record(key: str, workload: str, batch: int, smact: float | None, **kw) -> ProfileRecord:
    base = {"config_key": key, "sweep": "fixture", "kind": "solo", "workload": workload, "size": "full",
            "batch_size": batch, "accum_steps": 1, "num_gpus": 1, "device": "cuda", "gpu_model": H100,
            "iter_time_mean_s": 0.1, "ind": {"smact_mean": smact, "smact_p95": smact}}
    return ProfileRecord(**{**base, **kw})


def write_store(root: Path, workloads=WORKLOADS, pairs: bool = True) -> None:
    store = ProfileStore(root)
    for w in workloads:
        for batch, offset in ((8, -0.1), (64, 0.0)):
            store.write([record(f"{w}-{batch}", w, batch, SOLO[w] + offset)])
    if pairs:
        for i, a in enumerate(workloads):
            for b in workloads[i:]:
                key = f"pair-{a}-{b}"
                store.write([record(key, a, 32, 0.9, kind="pair", job=0, partner=b, mode="mps"),
                             record(key, b, 32, 0.95, kind="pair", job=1, partner=a, mode="mps")])


def test_store_gives_solo_and_pair_smact_for_the_cluster_gpu_type(tmp_path):
    write_store(tmp_path, ("cifar10", "ncf"))
    ProfileStore(tmp_path).write([record("tiny", "bert", 64, 0.99, size="tiny")])
    ProfileStore(tmp_path).write([record("cpu", "bert", 64, 0.99, device="cpu", gpu_model=None)])
    ProfileStore(tmp_path).write([record("nosmact", "bert", 64, None)])
    p = smact_profile(tmp_path, "h100")
    assert p.gpu_type == "h100" and set(p.solo) == {"cifar10", "ncf"}  # tiny, CPU and SMACT-less runs ignored
    assert p.solo_value("cifar10", 64, 1) == pytest.approx(0.3)
    assert p.solo_value("cifar10", 12, 1) == pytest.approx(0.2)  # nearest micro-batch in log scale: 8
    assert p.solo_value("bert", 64, 1) is None
    assert p.pair_value(("ncf", 32), ("cifar10", 32)) == pytest.approx(0.925)  # mean of the two members
    assert p.pair_value(("cifar10", 32), ("ncf", 32)) == pytest.approx(0.925)
    assert p.pair_value(("cifar10", 32), ("bert", 32)) is None
    other = smact_profile(tmp_path, "a6000")
    assert other.gpu_type == "h100" and "no SMACT profiled on 'a6000'; used 'h100'" in other.notes
    assert "1 record(s) of non-full model sizes ignored" in other.notes


def test_distribution_weights_gpu_seconds_and_counts_idle_gpus_as_zero():
    profile = SmactProfile(solo={"a": [(32.0, 1, 0.4)], "b": [(32.0, 2, 0.6)]},
                           pairs={("a", "b"): [(32.0, 32.0, 0.9)]})
    a = Job("a", 0.0, 1, 10.0, model="a", batch_size=32.0)
    b = Job("b", 0.0, 2, 10.0, model="b", batch_size=32.0)
    # 3 GPUs over [0, 10]: a alone on GPU 0 for 0-4, b on GPUs 0-1 from 4 to 10 (beside a on GPU 0 until 6)
    occupancy = [(a, 0.0, 6.0, (0,), 1), (b, 4.0, 10.0, (0, 1), 1)]
    d = smact_distribution(occupancy, 3, 0.0, 10.0, profile)
    assert d.complete
    got = dict(zip(d.distribution["smact"], d.distribution["gpu_s"]))
    assert got == pytest.approx({0.0: 10 + 4, 0.4: 4, 0.9: 2, 0.6: 4 + 6})
    m = d.metrics()
    assert m["smact_mean"] == pytest.approx((0.4 * 4 + 0.9 * 2 + 0.6 * 10) / 30)
    assert m["smact_zero_share"] == pytest.approx(14 / 30) and m["smact_high_share"] == pytest.approx(12 / 30)
    assert m["smact_p50"] == pytest.approx(0.4)  # 14/30 at 0, 18/30 at or below 0.4
    missing = smact_distribution(occupancy, 3, 0.0, 10.0, SmactProfile(solo=profile.solo, pairs={}))
    assert missing.missing == {"a + b (pair)": pytest.approx(2.0)}


def synthetic(cluster: str, seed: int = 3) -> pd.DataFrame:
    spec = load_cluster(cluster)
    options = LoadOptions(num_jobs=60, load=2.0, seed=seed, max_gpus=spec.total_gpus)
    table, _ = load_trace(None, fmt="synthetic", options=options)
    table, _ = prepared_table(table, spec, annotate=True, seed=seed)
    return table


@pytest.mark.parametrize("policy", ["fifo", "srtf"])
def test_exclusive_replay_smact_matches_the_job_table(tmp_path, policy):
    """Exclusive policies (SRTF with preemptions too): idle GPU-time is 1 - gpu_util, and the mean is
    each job's GPU-seconds held x its SMACT."""
    write_store(tmp_path, pairs=False)
    profile = smact_profile(tmp_path, "h100")
    table = synthetic("4x4:h100")
    plain = replay_table(table, "4x4:h100", policy, seed=3)
    result = replay_table(table, "4x4:h100", policy, seed=3, smact_profiles=str(tmp_path))
    pd.testing.assert_frame_equal(plain.jobs, result.jobs)  # recording occupancy changes nothing
    s = result.summary
    assert policy == "fifo" or s["preemptions"] > 0
    assert s["smact_zero_share"] == pytest.approx(1 - s["gpu_util"])
    jobs = result.jobs.merge(table[["job_id", "model", "batch_size"]], on="job_id", suffixes=("_r", ""))
    per_job = [profile.solo_value(m, b, g) for m, b, g in zip(jobs["model"], jobs["batch_size"], jobs["num_gpus"])]
    expected = float(np.sum(np.array(per_job) * jobs["run_s"] * jobs["num_gpus"])) / (16 * s["makespan_s"])
    assert s["smact_mean"] == pytest.approx(expected)
    assert result.smact is not None and result.smact["gpu_s"].sum() == pytest.approx(16 * s["makespan_s"])
    out = result.write(tmp_path / "out")
    assert (out / "smact.parquet").exists()


def test_sharing_replay_uses_pair_smact_and_absent_when_unprofiled(tmp_path):
    write_store(tmp_path / "all")
    table = synthetic("2x4:h100", seed=5)
    shared = replay_table(table, "2x4:h100", "sjf-ffs", seed=5, smact_profiles=str(tmp_path / "all"))
    assert shared.summary["shared_gpu_time_fraction"] > 0
    dist = shared.smact
    assert dist is not None and dist.loc[np.isclose(dist["smact"], 0.925), "gpu_s"].sum() > 0
    write_store(tmp_path / "solo", pairs=False)
    partial = replay_table(table, "2x4:h100", "sjf-ffs", seed=5, smact_profiles=str(tmp_path / "solo"))
    assert not any(k.startswith("smact_") for k in partial.summary if k != "load_report")
    report = partial.summary["load_report"]
    assert "(pair)" in report["smact_note"] and partial.smact is None
    assert all(v > 0 for v in report["smact_missing"].values())
    ProfileStore(tmp_path / "empty")
    none = replay_table(table, "2x4:h100", "fifo", seed=5, smact_profiles=str(tmp_path / "empty"))
    assert "smact_mean" not in none.summary and "(solo)" in none.summary["load_report"]["smact_note"]


def test_the_caller_reads_the_profile_store_and_sched_never_does(tmp_path):
    """``sched`` imports nothing from ``profiling``: a spec names the store, its caller reads it
    (``profile_for``) and gives ``prepare`` the profile; a spec naming a store without it is refused."""
    from schedlab.profiling.smact import profile_for
    from schedlab.sched.replay import ReplaySpec, prepare, run

    write_store(tmp_path, pairs=False)
    table = synthetic("4x4:h100")
    spec = ReplaySpec(cluster="4x4:h100", policies=["fifo"], seed=3, smact_profiles=str(tmp_path))
    with pytest.raises(ValueError, match=r"smact_profiles .*: the replay needs the SMACT profile read from it"):
        prepare(spec, table)
    with pytest.raises(ValueError, match="the replay needs the SMACT profile"):
        run(spec)
    profile = profile_for(spec)
    assert profile == smact_profile(tmp_path, "h100")
    assert profile_for(spec.model_copy(update={"smact_profiles": None})) is None
    [result] = run(spec, prepare(spec, table, smact=profile))
    assert result.summary["smact_mean"] > 0
    with pytest.raises(ValueError, match="not a profile store"):
        profile_for(spec.model_copy(update={"smact_profiles": str(tmp_path / "nowhere")}))


EXPERIMENT = """\
name: t
traces:
  - name: syn
    format: synthetic
    options: {num_jobs: 40, load: 2.0}
    annotate: true
clusters: ["2x4:h100"]
policies: [fifo, sjf-ffs]
"""


def test_experiment_replays_report_smact_and_the_comparison_shows_it(tmp_path):
    from schedlab.sched.reporting import compare, plots
    from schedlab.sched.spec import ConfigError, load_config
    from schedlab.sched.reporting.mlflow_view import run_params
    from schedlab.tasks.replay import execute

    plain = load_config(_write(tmp_path / "plain.yaml", EXPERIMENT)).grid("v1")
    with pytest.raises(ConfigError, match="smact_profiles: 'nowhere' is not a profile store"):
        load_config(_write(tmp_path / "bad.yaml", EXPERIMENT + "smact_profiles: nowhere\n"))
    write_store(tmp_path / "profiles")
    specs = load_config(_write(tmp_path / "exp.yaml", EXPERIMENT + "smact_profiles: profiles\n")).grid("v1")
    assert specs[0].smact_profiles == str(tmp_path / "profiles")
    assert "smact_profiles" not in plain[0].identity and {s.key for s in specs}.isdisjoint(s.key for s in plain)
    assert run_params(specs[0])["smact_profiles"] == str(tmp_path / "profiles")
    rows, dists = [], {}
    for spec in specs:
        result, _ = execute(spec)
        assert 0 < result.summary["smact_mean"] < 1 and result.summary["load_report"]["smact_gpu_type"] == "h100"
        rows.append({"trace": "syn", "cluster": spec.cluster, "policy": spec.label, "seed": 0, **result.summary})
        dists[spec.label] = [result.smact]
    table = compare.comparison(rows, "fifo")
    assert "smact_mean" in compare.shown_columns(table) and "smact_high_share" in compare.to_text(table)
    bare = compare.comparison([{k: v for k, v in r.items() if not k.startswith("smact")} for r in rows], "fifo")
    assert "smact_mean" not in bare.columns and "smact_mean" not in compare.shown_columns(bare)
    path = plots.smact_cdf(dists, tmp_path / "smact.png", "SM activity")
    assert path.stat().st_size > 10_000


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_cli_replay_writes_smact_and_rejects_a_folder_that_is_no_store(tmp_path, capsys):
    from schedlab.cli import main

    write_store(tmp_path / "profiles")
    args = ["replay", "--policy", "fifo", "--cluster", "2x4:h100", "--num-jobs", "20", "--annotate", "--no-progress"]
    assert main([*args, "--smact-profiles", str(tmp_path / "nowhere"), "--out", str(tmp_path / "bad")]) == 2
    assert "nowhere: not a profile store" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    assert main([*args, "--smact-profiles", str(tmp_path / "profiles"), "--out", str(tmp_path / "out")]) == 0
    assert pd.read_parquet(tmp_path / "out" / "smact.parquet")["gpu_s"].sum() > 0


def test_occupancy_follows_a_job_that_grows_and_shrinks():
    """Each stint is one fixed set of GPUs: a resize closes one and opens the next (elastic policies)."""
    from schedlab.sched.core.cluster import ClusterState
    from schedlab.sched.core.engine import Engine
    from test_engine_elastic import (  # the elastic tests' scripted driver
        Scripted,
        goodput_job,
    )

    job = goodput_job("a", 0.0, 1)
    engine = Engine([job], ClusterState(load_cluster("2x4")), Scripted(resizes=[(8.0, "a", 3), (9.0, "a", 2)]),
                    allocation_stall_s=0.0, preemption_overhead_s=0.0, record_occupancy=True)
    result = engine.run()
    stints = [(t0, t1, len(gpus)) for _, t0, t1, gpus, _ in result.occupancy]
    assert stints == [(0.0, 8.0, 1), (8.0, 9.0, 3), (9.0, pytest.approx(job.end_time), 2)]
    assert not engine._held_since  # nothing left open
    profile = SmactProfile(solo={"toy": [(math.nan, 1, 0.5)]}, pairs={})
    d = smact_distribution(result.occupancy, 8, 0.0, job.end_time, profile)
    busy = 8 + 3 + 2 * (job.end_time - 9)
    assert d.metrics()["smact_mean"] == pytest.approx(0.5 * busy / (8 * job.end_time))
