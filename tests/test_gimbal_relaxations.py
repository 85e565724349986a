"""Gimbal's relaxations of its base policies (Gimbal §5.1, §7.1-7.2; spec gimbal.md §2.1, A13, A14):
unequal job sets in Lucid/Gandiva (star rule, fewest servers, set size), EDF Gandiva, unequal Gavel pairs.
Each is off by default (the default replays are pinned by test_replay_digests.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_table
from hypothesis import given, settings
from hypothesis import strategies as st
from packing import CheckedEngine, workloads
from packing import run as run_packing
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.policies import make_policy
from schedlab.sched.policies.gavel.lp import build_problem, solve
from schedlab.sched.policies.packing import fewest_servers
from schedlab.sched.models.sharing import SharingModel


class StarEngine(CheckedEngine):
    """Also checks the star rule (C3) on every shared start: the newcomer joins one larger job (rule
    a) or the same GPU set (equal pair), or covers whole smaller jobs that run alone (rule b); a host
    shares only with its own smaller members."""

    def start(self, job, placement=None, *, share_gpus=(), **kwargs) -> bool:
        if share_gpus:
            hosts = {self.cluster.holders[g][0] for g in share_gpus}
            if len(hosts) == 1 and (host := next(iter(hosts))).num_gpus >= job.num_gpus:
                assert host.num_gpus > job.num_gpus or set(host.gpus) == set(share_gpus), "star rule"
                for g in host.gpus:  # the host shares only with its own smaller members
                    for other in self.cluster.holders[g]:
                        assert other is host or other.num_gpus < host.num_gpus, "a member hosts a member"
            else:  # rule (b): every covered job is smaller, alone, and entirely under the newcomer
                for covered in hosts:
                    assert covered.num_gpus < job.num_gpus and set(covered.gpus) <= set(share_gpus), "rule (b)"
                    assert all(len(self.cluster.holders[g]) == 1 for g in covered.gpus), "covered job not alone"
        partner = self.cluster.holders[share_gpus[0]][0] if share_gpus else None
        ok = Engine.start(self, job, placement, share_gpus=share_gpus, **kwargs)  # CheckedEngine allows one partner
        if ok:
            self.log.append((self.now, job, partner))
            assert all(len(self.cluster.holders[g]) <= 2 for g in job.gpus)
            self.placed = getattr(self, "placed", {}) | {job.job_id: job.gpus}
        return ok


def run(table, cluster, xi, policy, params, engine_cls=StarEngine):
    spec = load_cluster(cluster)
    engine = engine_cls(jobs_from_table(table), ClusterState(spec), make_policy(policy, params),
                        sharing=SharingModel.for_cluster(spec, xi))
    engine.run()
    jobs = {j.job_id: j for j in engine.jobs}
    assert all(engine.completions[j] == 1 for j in jobs)
    return engine, jobs


# ---- fewest servers (C2) ------------------------------------------------------------------------------
def test_fewest_servers_prefers_the_fullest_servers():
    # 2 GPUs per server: GPUs 1 (server 0), 2, 3 (server 1), 4 (server 2): 2 GPUs -> server 1 alone
    assert fewest_servers([1, 2, 3, 4], 2, 2) == (2, 3)
    assert fewest_servers([1, 2, 3, 4], 3, 2) == (2, 3, 1)
    assert fewest_servers([0, 5, 6, 7], 3, 4) == (5, 6, 7)


# ---- unequal job sets in Lucid and Gandiva ------------------------------------------------------------
LUCID_GIMBAL = {"unequal": True, "max_pair_score": 3, "max_pack_gpus": 64}


def test_lucid_unequal_packs_smaller_jobs_inside_the_largest_on_fewest_servers():
    # 2 servers x 2 GPUs. A (4 GPUs) runs everywhere; B (2) joins A on one server; C and D (1 each)
    # take A's last two single GPUs; E (1) finds no GPU of A's left and waits until a member ends.
    table = workloads(
        [("A", 0, 4, 1000), ("B", 10, 2, 100), ("C", 20, 1, 100), ("D", 30, 1, 100), ("E", 40, 1, 100)],
        [("cifar10", 32), ("ncf", 256), ("ncf", 256), ("ncf", 256), ("ncf", 256)],
    )
    engine, jobs = run(table, "2x2", "analytic:1.05", "lucid", LUCID_GIMBAL)
    partner_of = {job.job_id: partner and partner.job_id for _, job, partner in engine.log}
    assert partner_of == {"A": None, "B": "A", "C": "A", "D": "A", "E": "A"}
    assert jobs["B"].start_time == pytest.approx(10.0)
    assert len({g // 2 for g in engine.placed["B"]}) == 1  # B on one server, not one GPU of each
    first_end = min(jobs[j].end_time for j in "BCD")
    assert jobs["E"].start_time == pytest.approx(first_end)  # waited until a member left
    assert engine.policy.unequal_packs == 4


def test_lucid_unequal_respects_the_set_size_cap():
    # max_jobset = 2: only one smaller member beside A; C joins when B has left
    table = workloads([("A", 0, 4, 1000), ("B", 10, 1, 100), ("C", 20, 1, 100)],
                      [("cifar10", 32), ("ncf", 256), ("ncf", 256)])
    engine, jobs = run(table, "1x4", "analytic:1.05", "lucid", LUCID_GIMBAL | {"max_jobset": 2})
    partner_of = {job.job_id: partner and partner.job_id for _, job, partner in engine.log}
    assert partner_of == {"A": None, "B": "A", "C": "A"}
    assert jobs["C"].start_time == pytest.approx(jobs["B"].end_time)


def test_lucid_default_never_packs_unequal_sizes():
    table = workloads([("A", 0, 4, 1000), ("B", 10, 2, 100)], [("cifar10", 32), ("ncf", 256)])
    engine, jobs = run(table, "1x4", "analytic:1.05", "lucid", None)
    assert engine.policy.packs == 0 and jobs["B"].start_time == pytest.approx(1000.0)


def test_a_member_finishing_frees_room_and_the_host_runs_alone_again():
    # A hosts B; B ends at ~115 s; C (2 GPUs, arriving at 200 s) may then join A again
    table = workloads([("A", 0, 4, 2000), ("B", 10, 2, 100), ("C", 200, 2, 100)],
                      [("cifar10", 32), ("ncf", 256), ("ncf", 256)])
    engine, _jobs = run(table, "1x4", "analytic:1.05", "lucid", LUCID_GIMBAL)
    assert [p and p.job_id for _, j, p in engine.log] == [None, "A", "A"]
    assert not engine.policy.members and not engine.policy.host


def test_gandiva_unequal_introspection_unpacks_a_bad_member():
    # analytic:1.5 -> 1/1.5 + 1/1.5 = 1.33 >= 1 stays; analytic:3 -> 0.67 < 1: the member is unpacked
    table = workloads([("A", 0, 2, 1000), ("B", 10, 1, 100)], [("cifar10", 32), ("ncf", 256)])
    engine, jobs = run(table, "1x2", "analytic:3", "gandiva", {"unequal": True})
    assert engine.policy.unequal_packs == 1 and engine.policy.unpacks == 1
    assert jobs["B"].preemptions == 1 and not engine.policy.members
    engine, jobs = run(table, "1x2", "analytic:1.5", "gandiva", {"unequal": True})
    assert engine.policy.unpacks == 0 and jobs["B"].start_time == pytest.approx(10.0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(["lucid", "gandiva"]))
def test_star_rule_is_never_violated(seed, policy):
    """Random traces of mixed sizes on 4x2 GPUs: every shared start obeys C1-C3 (StarEngine asserts)
    and every set keeps at most max_jobset jobs."""
    rng = np.random.default_rng(seed)
    n = 30
    rows = [(f"j{i}", float(t), int(g), float(d)) for i, (t, g, d) in enumerate(zip(
        np.sort(rng.uniform(0, 2000, n)), rng.choice([1, 2, 4, 8], n), rng.uniform(50, 1500, n)))]
    models = [(m, b) for m, b in zip(rng.choice(["cifar10", "ncf"], n), [32] * n)]
    models = [(m, 32 if m == "cifar10" else 256) for m, _ in models]
    params = (LUCID_GIMBAL | {"max_jobset": 3}) if policy == "lucid" else {"unequal": True, "max_jobset": 3}

    class SetSizeEngine(StarEngine):
        def start(self, job, placement=None, *, share_gpus=(), **kwargs) -> bool:
            ok = super().start(job, placement, share_gpus=share_gpus, **kwargs)
            assert all(len(m) <= 2 for m in self.policy.members.values())
            return ok

    engine, _ = run(workloads(rows, models), "4x2", "analytic:1.2", policy, params, SetSizeEngine)
    assert engine.policy.packs >= 0


# ---- deadline-aware Gandiva (A13) ---------------------------------------------------------------------
def test_gandiva_edf_serves_the_earliest_deadline_first():
    # one GPU; B and C wait behind A; C's deadline is earlier, so EDF starts C first, FIFO starts B
    table = make_table([("A", 0, 1, 100), ("B", 1, 1, 100), ("C", 2, 1, 100)])
    table["deadline"] = [1000.0, 5000.0, 400.0]
    table["model"], table["batch_size"] = "bert", 12.0  # bert x bert does not fit in one T4: no packing
    _, fifo = run_packing(table, "1x1:t4", "analytic:1.05", "gandiva")
    _, edf = run_packing(table, "1x1:t4", "analytic:1.05", "gandiva", {"order": "edf"})
    assert fifo["B"].start_time < fifo["C"].start_time
    assert edf["C"].start_time == pytest.approx(100.0) and edf["B"].start_time == pytest.approx(200.0)


def test_gandiva_edf_puts_jobs_without_deadline_last():
    table = make_table([("A", 0, 1, 100), ("B", 1, 1, 100), ("C", 2, 1, 100)])
    table["deadline"] = [1000.0, math.nan, 5000.0]
    table["model"], table["batch_size"] = "bert", 12.0
    _, edf = run_packing(table, "1x1:t4", "analytic:1.05", "gandiva", {"order": "edf"})
    assert edf["C"].start_time < edf["B"].start_time


def test_gandiva_rejects_an_unknown_order():
    with pytest.raises(ValueError, match="order"):
        make_policy("gandiva", {"order": "sjf"})


# ---- unequal pairs in Gavel (A14) ---------------------------------------------------------------------
def test_gavel_lp_combination_holds_the_larger_jobs_gpus():
    problem = build_problem([4, 2], [(0,), (1,), (0, 1)], [(1.0,), (1.0,), (0.9, 0.8)], capacity=4)
    assert list(problem.combo_gpus) == [4, 2, 4]
    # makespan, equal work: alone, 4 x0 + 2 x1 <= 4 gives min(x0, x1) <= 2/3 < the pair's min rate 0.8
    # (the optimum tops the pair up with singles on the GPU time it leaves: both jobs at 5/6)
    solution = solve(problem, "makespan", remaining=[100.0, 100.0])
    assert solution.x == pytest.approx([1 / 12, 1 / 6, 5 / 6], abs=1e-4)
    assert 4 * solution.x[0] + 2 * solution.x[1] + 4 * solution.x[2] == pytest.approx(4.0, abs=1e-4)


def _gavel(table, params, cluster="1x4"):
    spec = load_cluster(cluster)
    engine = Engine(jobs_from_table(table), ClusterState(spec), make_policy("gavel", params),
                    sharing=SharingModel.for_cluster(spec, "analytic:1.2"))
    return engine


def test_gavel_unequal_pairs_and_rates():
    table = workloads([("A", 0, 4, 3000), ("B", 0, 2, 3000)], [("cifar10", 32), ("ncf", 256)])
    engine = _gavel(table, {"unequal": True})
    combos, rates = engine.policy._combinations(engine, engine.jobs)
    assert combos == [(0,), (1,), (0, 1)]
    # A: 2 of its 4 workers beside B at ξ = 1.2, LISS-balanced: (2/1.2 + 2) / 4; B: 1/1.2
    assert rates[2] == pytest.approx(((2 / 1.2 + 2) / 4, 1 / 1.2))
    default = _gavel(table, None)
    assert default.policy._combinations(default, default.jobs)[0] == [(0,), (1,)]


def test_gavel_unequal_starts_the_smaller_job_inside_the_larger_one():
    table = workloads([("A", 0, 4, 3000), ("B", 0, 2, 3000)], [("cifar10", 32), ("ncf", 256)])
    engine = _gavel(table, {"unequal": True, "objective": "makespan"}, cluster="2x2")
    seen = []
    original = engine.start

    def start(job, placement=None, **kwargs):
        ok = original(job, placement, **kwargs)
        seen.append((job.job_id, tuple(kwargs.get("share_gpus", ()))))
        return ok

    engine.start = start
    result = engine.run()
    assert seen[0][0] == "A" and seen[1][0] == "B"
    shared = seen[1][1]
    assert len(shared) == 2 and set(shared) <= set(engine.jobs[0].gpus or range(4))
    assert len({g // 2 for g in shared}) == 1  # one server (C2)
    assert result is not None
    # no LISS in the engine: A straggles at ξ = 1.2 beside B; both still beat running one after the other
    assert max(j.end_time for j in engine.jobs) < 2 * 3000


def test_rule_b_a_waiting_job_covers_smaller_running_jobs_on_fewest_servers():
    # 2 servers x 2 T4s: B and C (1 GPU each, ncf) start on server 0, E (2 GPUs, bert at batch 12:
    # 15 GiB) on server 1. A (2 GPUs, imagenet at batch 128: 9.7 GiB) fits on no free GPU and not
    # beside E (memory), so it covers B and C on server 0 (rule b, one server).
    table = workloads([("B", 0, 1, 1000), ("C", 0, 1, 1000), ("E", 0, 2, 1000), ("A", 10, 2, 100)],
                      [("ncf", 256), ("ncf", 256), ("bert", 12), ("imagenet", 128)])
    engine, jobs = run(table, "2x2:t4", "analytic:1.05", "lucid", LUCID_GIMBAL)
    assert engine.policy.cover_packs == 1 and jobs["A"].start_time == pytest.approx(10.0)
    assert len({g // 2 for g in engine.placed["A"]}) == 1
    assert set(engine.placed["A"]) == set(engine.placed["B"]) | set(engine.placed["C"])
    assert not engine.policy.members and not engine.policy.host  # the set dissolved as jobs ended
    _, default = run(table, "2x2:t4", "analytic:1.05", "lucid", None)
    assert default["A"].start_time == pytest.approx(1000.0)  # the default Lucid waits


def test_rule_b_needs_the_fewest_servers():
    # 2 servers x 2 GPUs, one free GPU on each server beside a 1-GPU job: a 2-GPU job could only
    # cover across two servers, which C2 forbids... unless one server holds it all; here it can.
    table = workloads([("B", 0, 1, 1000), ("C", 0, 1, 1000), ("A", 10, 4, 100)],
                      [("ncf", 256), ("ncf", 256), ("cifar10", 32)])
    engine, jobs = run(table, "2x2", "analytic:1.05", "lucid", LUCID_GIMBAL)
    # A (4 GPUs) needs both servers (C2: ceil(4/2) = 2): free GPUs plus B and C
    assert engine.policy.cover_packs == 1 and jobs["A"].start_time == pytest.approx(10.0)
