"""Per-worker calibration in the engine (Gimbal §4, specs/gimbal.md §1.5, §7.2 items 1-6): LISS pace
and lossless batches, the LGRR stall, ξ of both holders after a cap change, joins and leaves, the
checks, and the share-aware ξ sources (MpsCap, PairsTable with share_b and restricted-solo rows)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from helpers import make_table
from schedlab.sched.core import calibration
from schedlab.sched.core.calibration import CalibrationError, liss_split
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.models.interference import Analytic, InterferenceError, MpsCap, PairsTable, make_interference
from schedlab.sched.core.job import Job, jobs_from_table
from schedlab.sched.policies.base import Policy
from schedlab.sched.models.sharing import SharingModel


class Script(Policy):
    """Starts jobs as ``plan`` says (job id -> id of the job whose GPUs it shares, or None) and runs
    ``actions`` (time -> callable(engine)) on timers. Every job is tracked (as Gimbal does)."""

    name = "script-test"  # never registered: defined in a test module
    summary = paper = ""
    capabilities = (calibration.Calibration,)

    def __init__(self, plan: dict, actions: dict | None = None, gpus: dict | None = None) -> None:
        super().__init__()
        self.plan, self.actions, self.gpus = plan, actions or {}, gpus or {}
        self.waiting: list[Job] = []
        self.by_id: dict[str, Job] = {}
        self.armed = False

    def on_arrival(self, engine, job):
        calibration.track(job)
        self.waiting.append(job)
        self.by_id[job.job_id] = job

    def on_timer(self, engine, payload):
        payload(engine)

    def schedule(self, engine):
        if not self.armed:
            self.armed = True
            for at, action in self.actions.items():
                engine.set_timer(at, action)
        for job in list(self.waiting):
            host = self.plan.get(job.job_id)
            if host is None:
                ok = engine.start(job)
            else:
                alone = [g for g in self.by_id[host].gpus if len(engine.cluster.holders[g]) == 1]
                gpus = self.gpus.get(job.job_id) or alone[: job.num_gpus]
                ok = engine.start(job, share_gpus=tuple(gpus), mode="mps")
            if ok:
                self.waiting.remove(job)


def build(rows, models, plan, source, cluster="1x4:a40", actions=None, gpus=None):
    table = make_table(rows)
    table["model"] = [m for m, _ in models]
    table["batch_size"] = [float(b) for _, b in models]
    spec = load_cluster(cluster)
    engine = Engine(jobs_from_table(table), ClusterState(spec), Script(plan, actions, gpus),
                    sharing=SharingModel.for_cluster(spec, source))
    return engine, {j.job_id: j for j in engine.jobs}


def two_small_beside_a_large(actions=None, xi=2.0):
    """J (4 GPUs) alone; P1 and P2 (1 GPU each) on its GPUs: ξ_J = (2, 2, 1, 1) under a constant ξ."""
    return build(
        [("J", 0, 4, 1000), ("P1", 1, 1, 5000), ("P2", 1, 1, 5000)],
        [("cifar10", 32), ("ncf", 256), ("ncf", 256)],
        {"P1": "J", "P2": "J"}, Analytic(timeslice=xi, mps=xi),
        actions=actions,
    )


def test_liss_split_closed_form_is_the_harmonic_mean():
    alpha, beta, bbar = 0.017, 0.0007, 32.0
    xis = [2.0, 2.0, 1.0, 1.0]
    split = liss_split(xis, alpha, beta, 4 * bbar, integer=False)
    assert sum(split) == pytest.approx(4 * bbar)
    pace = max(x * (alpha + beta * b) for x, b in zip(xis, split)) / (alpha + beta * bbar)
    assert pace == pytest.approx(4 / 3, rel=1e-9)
    assert pace == pytest.approx(len(xis) / sum(1 / x for x in xis))
    rounded = liss_split(xis, alpha, beta, 4 * bbar)
    assert sum(rounded) == 4 * bbar and all(float(b).is_integer() and b >= 1 for b in rounded)


def test_liss_split_respects_memory_caps():
    split = liss_split([2.0, 2.0, 1.0, 1.0], 0.0, 1.0, 128.0, his=[100, 100, 40, 40])
    assert sum(split) == 128 and max(split[2:]) <= 40


def test_engine_liss_pace_four_thirds_and_lossless():
    seen = {}

    def rebalance(engine):
        job = next(j for j in engine.running if j.job_id == "J")
        view = engine.worker_view(job)
        seen["xi"] = sorted(x for *_, x, _ in view)
        seen["pace_before"] = job.pace
        seen["remaining"] = engine.remaining(job)
        batches = calibration.liss_batches(engine, job)
        engine.calibrate(job, batches=batches)
        seen["pace_after"] = job.pace
        seen["sum"] = sum(b for _, _, _, b, _, _ in engine.worker_view(job))
        seen["remaining_after"] = engine.remaining(job)
        seen["overhead"] = job.overhead_left

    engine, jobs = two_small_beside_a_large({10.0: rebalance})
    engine.run()
    assert seen["xi"] == [1.0, 1.0, 2.0, 2.0]
    assert seen["pace_before"] == 2.0
    assert seen["pace_after"] == pytest.approx(4 / 3, rel=0.03)  # integer local batches
    assert seen["sum"] == 4 * 32  # Σ b_w = B
    assert seen["remaining_after"] == seen["remaining"]  # LISS changes no work (M5)
    assert seen["overhead"] == 0.0  # and costs no stall


def test_lgrr_switch_stalls_exactly_3_6_s_and_partner_runs_on():
    # A (1 GPU, 100 s) alone under mpscap: capped to 50 % at t=10 it stalls 3.6 s, then runs at 1/σ
    def squeeze(engine):
        a = next(j for j in engine.running if j.job_id == "A")
        engine.calibrate(a, shares={a.gpus[0]: 0.5}, stall_s=3.6)

    engine, jobs = build([("A", 0, 1, 100)], [("cifar10", 32)], {}, MpsCap(Analytic(1.2)), "1x1", {10.0: squeeze})
    engine.run()
    assert jobs["A"].end_time == pytest.approx(10 + 3.6 + 90 * 0.5 ** -0.5)


def test_cap_change_recomputes_both_holders():
    seen = {}

    def squeeze(engine):
        a, b = (next(j for j in engine.running if j.job_id == x) for x in "AB")
        seen["before"] = (a.pace, b.pace)
        engine.calibrate(b, shares={b.gpus[0]: 0.6}, stall_s=3.6)
        seen["after"] = (a.pace, b.pace, a.overhead_left, b.overhead_left)

    source = MpsCap(Analytic(timeslice=2.2, mps=2.2))
    engine, jobs = build([("A", 0, 1, 1000), ("B", 1, 1, 1000)], [("cifar10", 32), ("ncf", 256)], {"B": "A"},
                         source, "1x1", {10.0: squeeze})
    engine.run()
    assert seen["before"] == (2.2, 2.2)
    xa, xb, stall_a, stall_b = seen["after"]
    assert xa == pytest.approx(1 + 1.2 * 0.36) and xb == pytest.approx(0.6 ** -0.5 * 2.2)
    assert 1 / xa + 1 / xb == pytest.approx(1.05, abs=0.005)  # spec M6: 0.91 -> 1.05
    assert stall_a == 0.0 and stall_b == pytest.approx(3.6)  # the partner runs on (M7)


def test_leave_restores_unshared_gpu_to_sigma():
    seen = {}

    def squeeze(engine):
        j = next(x for x in engine.running if x.job_id == "J")
        engine.calibrate(j, shares=dict.fromkeys(j.gpus, 0.25), stall_s=3.6)

    def look(engine):
        j = next(x for x in engine.running if x.job_id == "J")
        seen["xi"] = [x for *_, x, _ in engine.worker_view(j)]
        seen["partners"] = j.partners

    engine, jobs = build(
        [("J", 0, 2, 1000), ("P", 1, 1, 20)], [("cifar10", 32), ("ncf", 256)], {"P": "J"},
        MpsCap(Analytic(1.5)), "1x2", {5.0: squeeze, 100.0: look},
    )
    engine.run()
    assert seen["xi"] == pytest.approx([2.0, 2.0])  # σ(0.25) = 0.25^-0.5 on both GPUs after P left
    assert not seen["partners"]


def test_checks_refuse_bad_configurations_before_changing_anything():
    errors = []

    def bad(engine):
        j = next(x for x in engine.running if x.job_id == "J")
        version = j.version
        for kwargs in ({"batches": dict.fromkeys(j.gpus, 10.0)},  # Σ b_w != B
                       {"batches": {j.gpus[0]: 128.0}},  # not every GPU
                       {"shares": {j.gpus[0]: 0.0}}, {"shares": {99: 0.5}}, {"stall_s": -1.0},
                       {"batches": dict(zip(j.gpus, (4000.0, 1.0, 1.0, -3869.0)))}):
            with pytest.raises(CalibrationError):
                engine.calibrate(j, **kwargs)
            errors.append(kwargs)
        assert j.version == version and j.workers.batches is None

    engine, jobs = two_small_beside_a_large({10.0: bad})
    engine.run()
    assert len(errors) == 6


def test_memory_check_names_the_gpu():
    def big(engine):
        j = next(x for x in engine.running if x.job_id == "J")
        total = 4 * j.batch_size
        with pytest.raises(CalibrationError, match="GPU"):
            engine.calibrate(j, batches=dict(zip(j.gpus, (total - 3, 1.0, 1.0, 1.0))))

    # bert at batch 12 needs 15 GiB on a 16 GiB T4: 45 samples on one worker cannot fit
    engine, jobs = build([("J", 0, 4, 100)], [("bert", 12)], {}, Analytic(1.2), "1x4:t4", {1.0: big})
    engine.run()


def test_untracked_jobs_keep_none_fields():
    from schedlab.sched.policies import make_policy

    table = make_table([("A", 0, 1, 100), ("B", 5, 1, 100)])
    table["model"], table["batch_size"] = ["cifar10", "ncf"], [32.0, 256.0]
    spec = load_cluster("1x1")
    engine = Engine(jobs_from_table(table), ClusterState(spec), make_policy("lucid"),
                    sharing=SharingModel.for_cluster(spec, "analytic:1.1"))
    engine.run()
    assert engine.jobs[1].shared_seconds > 0  # they shared
    assert all(j.workers is None for j in engine.jobs)


def test_mpscap_conditions_and_parsing():
    a = Job("a", 0, 1, 1, model="cifar10", batch_size=32.0)
    b = Job("b", 0, 1, 1, model="ncf", batch_size=256.0)
    cap = MpsCap(Analytic(timeslice=2.0, mps=1.8))
    assert cap.ratio(a, b, "mps") == (1.8, 1.8)  # (i) free competition is the base's ξ⁰
    assert cap.ratio(a, b, "mps", (100.0, 100.0)) == (1.8, 1.8)
    assert cap.ratio(a, b, "timeslice", (50.0, 50.0)) == (2.0, 2.0)
    lo, hi = cap.ratio(a, b, "mps", (100.0, 40.0)), cap.ratio(a, b, "mps", (100.0, 80.0))
    assert lo[0] < hi[0] < 1.8 and lo[1] > hi[1] > 1.8  # (ii)
    assert cap.ratio(a, b, "mps", (100.0, 1e-6))[0] == pytest.approx(1.0)  # (iii)
    assert cap.ratio(a, b, "mps", (0.0, 100.0))[0] == math.inf  # (iv)
    assert cap.restricted_solo(a, 1.0) == 1.0 and cap.restricted_solo(a, 0.5) > cap.restricted_solo(a, 0.9)  # (v)
    parsed = make_interference("mpscap:rho=1:eta=3:analytic:1.2")
    assert isinstance(parsed, MpsCap) and (parsed.rho, parsed.eta) == (1.0, 3.0)
    assert parsed.name.startswith("mpscap:rho=1:eta=3:analytic")
    assert make_interference("mpscap:analytic").rho == 0.5
    for bad in ("mpscap", "mpscap:rho=x:analytic", "mpscap:rho=0:analytic", "mpscap:rho=1"):
        with pytest.raises(InterferenceError):
            make_interference(bad)


def test_pairs_table_share_b_and_restricted_solo_rows(tmp_path):
    rows = [
        ("cifar10", 32, "ncf", 256, "mps", 100, 100, 2.0, 2.0),
        ("cifar10", 32, "ncf", 256, "mps", 100, 50, 1.3, 3.1),
        ("cifar10", 32, "ncf", 256, "mps", 50, 100, 3.0, 1.2),
        ("cifar10", 32, None, None, "mps", 50, None, 1.4, None),
        ("cifar10", 32, None, None, "mps", 80, None, 1.1, None),
    ]
    frame = pd.DataFrame(rows, columns=["model_a", "batch_a", "model_b", "batch_b", "mode", "share_a", "share_b",
                                        "xi_a", "xi_b"])
    path = tmp_path / "pairs.csv"
    frame.to_csv(path, index=False)
    table = PairsTable(path)
    a = Job("a", 0, 1, 1, model="cifar10", batch_size=32.0)
    b = Job("b", 0, 1, 1, model="ncf", batch_size=256.0)
    assert table.ratio(a, b, "mps") == (2.0, 2.0)
    assert table.ratio(a, b, "mps", (100.0, 60.0)) == (1.3, 3.1)  # nearest in both shares
    assert table.ratio(a, b, "mps", (40.0, 100.0)) == (3.0, 1.2)
    assert table.restricted_solo(a, 0.5) == 1.4 and table.restricted_solo(a, 0.9) == 1.1
    assert table.restricted_solo(b, 0.5) is None
    spec = load_cluster("1x1")
    assert SharingModel.for_cluster(spec, table).restricted_solo(b, 0.25) == pytest.approx(2.0)  # default p^-0.5
    frame.loc[3, "share_a"] = 0
    frame.to_csv(path, index=False)
    with pytest.raises(InterferenceError, match="row 4"):
        PairsTable(path)


def test_pairs_table_share_ties_go_to_the_nearest_ratio_not_row_order(tmp_path):
    """(100, 100) is as near (L1) 30/70 and 70/30 as 50/50: the ratio asked (1) decides, in any row order."""
    shares = [(30, 70, 3.6, 1.05), (70, 30, 1.2, 2.5), (50, 50, 2.1, 1.4), (40, 40, 2.6, 1.7), (60, 40, 1.5, 1.9),
              (80, 20, 1.1, 2.9)]
    a = Job("a", 0, 1, 1, model="bert", batch_size=16.0)
    b = Job("b", 0, 1, 1, model="yolov3", batch_size=8.0)
    for order in (shares, shares[::-1], shares[2:] + shares[:2]):
        frame = pd.DataFrame([("bert", 16, "yolov3", 8, "mps", sa, sb, xa, xb) for sa, sb, xa, xb in order],
                             columns=["model_a", "batch_a", "model_b", "batch_b", "mode", "share_a", "share_b",
                                      "xi_a", "xi_b"])
        frame.to_csv(tmp_path / "pairs.csv", index=False)
        table = PairsTable(tmp_path / "pairs.csv")
        assert table.ratio(a, b, "mps") == (2.1, 1.4)  # 50/50, not the 30/70 row first in file order
        assert table.ratio(a, b, "mps", (100.0, 100.0)) == (2.1, 1.4)
        assert table.ratio(a, b, "mps", (80.0, 40.0)) == (1.2, 2.5)  # 70/30, 60/40, 80/20 at L1 20: ratio 2.33 nearest 2
        assert table.ratio(a, b, "mps", (45.0, 45.0)) == (2.6, 1.7)  # 40/40 and 50/50, same ratio: lower shares
        assert table.ratio(a, b, "mps", (30.0, 70.0)) == (3.6, 1.05)  # an exact row is no tie
