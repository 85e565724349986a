"""Gimbal's set-ups' policies under a strict placement (issue #23): a job the placement refuses
although enough GPUs are free waits, others may start, and a round-based policy does not run the
refused combination that round."""

from __future__ import annotations

import random

import pytest
from helpers import make_table
from helpers import replay_table

# 2x2. A and B (1 GPU each) fill server 0 (best fit), C server 1; B ends at 50, leaving one free GPU
# on each server. D (2 GPUs, 60 s) fits one server only: refused until A and C end at 1000, although
# 2 GPUs are free. E (1 GPU, 70 s) fits at once. ξ = 2.5: no pair is worth packing (1/ξ + 1/ξ < 1),
# except where a policy covers a job to make a set (gimbal-deadline below).
TRACE = make_table([("A", 0, 1, 1000), ("B", 0, 1, 50), ("C", 0, 1, 1000), ("D", 60, 2, 100), ("E", 70, 1, 10)]
                   ).assign(model="bert", batch_size=12.0)
XI = "mpscap:analytic:2.5"


def _starts(policy: str, params: dict, placement: str) -> dict[str, float]:
    result = replay_table(TRACE, "2x2", policy, params, placement=placement, interference=XI)
    jobs = result.jobs.set_index("job_id")
    assert sorted(jobs.index) == list("ABCDE") and (jobs["end_time"] >= jobs["start_time"]).all()
    return {job: float(jobs.at[job, "start_time"]) for job in jobs.index}


@pytest.mark.parametrize(("policy", "params", "spread_d", "strict_d", "strict_e"), [
    ("backfill", {}, 60, 1000, 70),  # D (the head) blocks with its reservation; E backfills (ends before it)
    ("gandiva", {}, 60, 1000, 70),  # D waits and blocks no one
    ("lucid", {}, 60, 1000, 70),
    ("gimbal-jct", {}, 60, 1000, 70),
    # E takes a free GPU; then D no longer fits the free GPUs, and Gandiva+Gimbal's unequal rule covers
    # a 1-GPU job alone on a server with D (one server: §5.1's fewest nodes)
    ("gimbal-deadline", {}, 60, 70, 70),
    # rounds of 360 s: D is planned at 720 and 1080; refused at 720, it runs from 1080 (E runs at 360)
    ("gavel", {}, 720, 1080, 360),
    ("gavel", {"objective": "makespan", "mode": "mps"}, 720, 1080, 360),
    # Gimbal's Gavel plans the unequal pair (D, E) at 360: D is refused, so neither job runs that round
    ("gimbal-makespan", {}, 360, 1080, 1080),
])
@pytest.mark.parametrize("placement", ["strict-best-fit", "strict-consolidated"])
def test_a_refused_job_waits_and_others_start(policy, params, spread_d, strict_d, strict_e, placement):
    assert _starts(policy, params, "fewest-servers")["D"] == spread_d  # spread over both servers at once
    starts = _starts(policy, params, placement)
    assert (starts["D"], starts["E"]) == (strict_d, strict_e)


def test_a_refused_gavel_combination_gets_no_time_that_round():
    """Gavel's time received (its round priority's denominator) counts only combinations that ran."""
    from schedlab.sched.core.cluster import ClusterState, load_cluster
    from schedlab.sched.core.engine import Engine
    from schedlab.sched.core.job import jobs_from_table
    from schedlab.sched.policies import make_policy

    seen: list[tuple[float, float]] = []  # (round start, D's time received when it began)

    class Watched(type(make_policy("gavel"))):
        def schedule(self, engine):
            if self.round_due:
                d = next((i for i, job in self.active.items() if job.job_id == "D"), None)
                seen.append((engine.now, self.received.get((d,), 0.0)))
            super().schedule(engine)

    table = make_table([("A", 0, 1, 1000), ("B", 0, 1, 50), ("C", 0, 1, 1000), ("D", 60, 2, 100)])
    engine = Engine(jobs_from_table(table), ClusterState(load_cluster("2x2")), Watched(),
                    placement="strict-best-fit")
    engine.run()
    # D was planned at 360 and 720 but refused both times: no time received at 720 or 1080
    assert [(t, got) for t, got in seen if t in (720.0, 1080.0)] == [(720.0, 0.0), (1080.0, 0.0)]


def _random_trace(seed: int):
    """3-14 jobs of 1-4 GPUs on catalog workloads, arriving in bursts (fragmentation on small servers)."""
    rng = random.Random(seed)
    rows, t = [], 0.0
    for i in range(rng.randint(3, 14)):
        t += rng.choice([0.0, 5.0, 60.0, 400.0])
        rows.append((f"j{i}", t, rng.choice([1, 1, 2, 3, 4]), rng.choice([30.0, 300.0, 2000.0])))
    workloads = [rng.choice([("bert", 12.0), ("cifar10", 128.0), ("deepspeech2", 20.0)]) for _ in rows]
    return make_table(rows).assign(model=[m for m, _ in workloads], batch_size=[b for _, b in workloads])


@pytest.mark.parametrize(("policy", "params"), [
    ("backfill", {}), ("gandiva", {}), ("gandiva", {"unequal": True, "order": "edf"}), ("lucid", {}),
    ("gavel", {}), ("gavel", {"objective": "makespan", "mode": "mps", "unequal": True}),
    ("gimbal-jct", {}), ("gimbal-deadline", {}), ("gimbal-makespan", {}),
])
def test_every_job_ends_under_strict_placement(policy, params):
    """No refused job is lost or started twice, and no pass loops, on random traces (2x2 and 4x2)."""
    for seed in range(6):
        table = _random_trace(seed)
        jobs = replay_table(table, ("2x2", "4x2")[seed % 2], policy, params, placement="strict-best-fit",
                      interference=("mpscap:analytic:1.1", "mpscap:analytic:2.5")[seed % 2], seed=seed).jobs
        assert sorted(jobs["job_id"]) == sorted(table["job_id"]) and jobs["end_time"].notna().all()
        assert (jobs["start_time"] >= jobs["submit_time"]).all()
        assert (jobs["jct_s"] >= jobs["duration"] - 1e-6).all()
