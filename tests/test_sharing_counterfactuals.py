"""The sharing counterfactuals study (``schedlab.studies.sharing_counterfactuals``): every variant restores what it patched, ``actual`` is
the configured replay bit for bit, ``acc_free`` frees only the engine's accumulation (the policy still
decides on the real speed), and ``mem_h200`` reads the H200 solos' memory."""

from __future__ import annotations

import json

import pytest
from schedlab.sched.core.engine import Engine
from schedlab.sched.models.sharing import SharingModel
from schedlab.sched.models.workloads import WorkloadCatalog, default_catalog
from schedlab.sched.policies.sharing import policy as sharing_sjf
from schedlab.sched.replay import run
from schedlab.sched.spec import ReplaySpec
from schedlab.studies import sharing_counterfactuals as cf
from helpers import table_digest
from test_replay_digests import COLUMNS, DIGESTS

PATCHED = [(SharingModel, "accumulation_speed"), (SharingModel, "ratio"), (sharing_sjf._SharingSJF, "options"),
           (sharing_sjf._SharingSJF, "ratio"), (Engine, "_refresh_rate"), (Engine, "refresh_rate"),
           (sharing_sjf, "algorithm2"), (WorkloadCatalog, "memory_gib")]


def _replay(cluster: str, log: list | None = None):
    def with_log(policy):
        policy.decision_log = log
        return policy

    spec = ReplaySpec(format="synthetic", options={"num_jobs": 400, "load": 3.0, "seed": 7}, annotate=True,
                      cluster=cluster, policies=[{"name": "sjf-bsbf"}], seed=7, interference="analytic")
    [result] = run(spec, wrap_policy=with_log if log is not None else None)
    return result.jobs


def test_variants_restore_everything_and_actual_is_bit_identical():
    before = [getattr(owner, attr) for owner, attr in PATCHED]
    for name in cf.VARIANTS:
        with cf.variant(name):
            pass
        assert [getattr(owner, attr) for owner, attr in PATCHED] == before, name
    with pytest.raises(ValueError, match="unknown variant"):
        with cf.variant("free"):
            pass
    with cf.variant("actual"):
        jobs = _replay("16x4")
    assert table_digest(jobs[COLUMNS]) == json.loads(DIGESTS.read_text())["sjf-bsbf"]


def test_acc_free_frees_the_engine_not_the_decision():
    real, free = [], []
    actual = _replay("sjf-bsbf-sim", real)
    with cf.variant("acc_free"):
        freed = _replay("sjf-bsbf-sim", free)
    halved = [r for r in free if r["steps"] > 1]
    assert any(r["steps"] > 1 for r in real) and halved, "the 11 GB cluster makes Alg. 2 halve"
    assert all(r["speed"] < 1.0 for r in halved)  # the policy still sees the accumulation cost
    assert freed["jct_s"].mean() != actual["jct_s"].mean()


def test_mem_h200_reads_the_h200_solos():
    fits = cf.h200_memory()
    assert set(fits) >= {"cifar10", "imagenet", "yolov3", "bert", "deepspeech2", "ncf"}
    static, per_sample = fits["cifar10"]
    assert 0 < static < 0.5 and 0 < per_sample < 0.01  # 0.47 / 0.75 / 1.32 GiB at batch 64 / 128 / 256
    catalog = default_catalog()
    upper = catalog.memory_gib("cifar10", 128)
    with cf.variant("mem_h200"):
        assert catalog.memory_gib("cifar10", 128) == pytest.approx(static + 128 * per_sample)
        assert catalog.memory_gib("cifar10", 128) < upper / 2
    assert catalog.memory_gib("cifar10", 128) == upper
