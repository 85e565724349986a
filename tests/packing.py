"""Shared by the packing-policy tests (Lucid, Gandiva): an engine that logs and checks every start."""

from __future__ import annotations

from collections import Counter

import pandas as pd
from helpers import make_table
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.policies import make_policy
from schedlab.sched.models.sharing import SharingModel


class CheckedEngine(Engine):
    """Records every start as (time, job, partner or None) and checks the invariants as it goes."""

    packs_only_under_overload = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[float, object, object]] = []
        self.completions: Counter = Counter()

    def start(self, job, placement=None, *, share_gpus=(), **kwargs) -> bool:
        partners = {self.cluster.holders[g][0] for g in share_gpus}
        assert len(partners) <= 1
        partner = next(iter(partners), None)
        if partner is not None:
            assert self.sharing.fits_together(job, partner), "packed beyond GPU memory"
            if self.packs_only_under_overload:
                assert self.cluster.free_gpus < job.num_gpus, "packed although it fitted on free GPUs"
        ok = super().start(job, placement, share_gpus=share_gpus, **kwargs)
        if ok:
            self.log.append((self.now, job, partner))
            assert all(len(self.cluster.holders[g]) <= 2 for g in job.gpus)
        return ok

    def _complete(self, job) -> None:
        self.completions[job.job_id] += 1
        super()._complete(job)


def run(table: pd.DataFrame, cluster: str, xi: str, policy: str, params=None, overhead=None,
        packs_only_under_overload: bool = False):
    spec = load_cluster(cluster)
    engine = CheckedEngine(
        jobs_from_table(table), ClusterState(spec), make_policy(policy, params),
        preemption_overhead_s=overhead, sharing=SharingModel.for_cluster(spec, xi),
    )
    engine.packs_only_under_overload = packs_only_under_overload
    engine.run()
    jobs = {j.job_id: j for j in engine.jobs}
    assert all(engine.completions[j] == 1 for j in jobs), "every job completes exactly once"
    return engine, jobs


def workloads(rows, models):
    """A job table from (job_id, submit, gpus, duration) rows and per-row (model, per-GPU batch)."""
    table = make_table(rows)
    table["model"] = [m for m, _ in models]
    table["batch_size"] = [float(b) for _, b in models]
    return table


