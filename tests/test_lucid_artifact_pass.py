"""``lucid artifact_pass: true`` walks the queue class by class (O(starts + classes) per pass); it must
decide exactly as the literal pass of Lucid's simulator, written out here as the reference: every
waiting job in priority order, each scanning the alone jobs of its GPU count in start order."""

from __future__ import annotations

import pytest
from packing import CheckedEngine
from schedlab.sched.models.annotate import annotate
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.job import jobs_from_table
from schedlab.sched.policies.lucid import Lucid
from schedlab.sched.policies.packing import workload
from schedlab.sched.models.sharing import SharingModel
from schedlab.sched.traces import LoadOptions, load_trace


class LiteralLucid(Lucid):
    """The reference: the simulator's pass as written, O(waiting x alone)."""

    def _artifact_pass(self, engine, max_pack: int) -> None:
        ratio = self.params.priority_ratio
        for job in sorted(self.waiting.token, key=lambda j: (self.priority(j), j.index)):
            partner = None
            if job.num_gpus <= max_pack:
                wl, limit = workload(job), self.priority(job) / ratio
                alone = sorted((j for j in self.alone.token if j.num_gpus == job.num_gpus), key=self._started.__getitem__)
                partner = next((j for j in alone if self.priority(j) >= limit
                                and self.fits(engine, job, wl, j, workload(j))), None)
            if partner is not None:
                engine.start(job, share_gpus=partner.gpus)
                self.waiting.remove(job)
                self.alone.remove(partner)
                self.pair[job], self.pair[partner] = partner, job
                self.packs += 1
            elif job.num_gpus <= engine.cluster.free_gpus and engine.start(job):
                self.waiting.remove(job)
                self._alone(job)
            else:
                continue
            self._starts += 1
            self._started[job] = self._starts
        self.dirty.clear()


def _schedule(policy_class, table, cluster: str, xi: str, placement: str) -> tuple[list, int]:
    spec = load_cluster(cluster)
    engine = CheckedEngine(jobs_from_table(table), ClusterState(spec), policy_class(Lucid.Params(artifact_pass=True)),
                           placement=placement, sharing=SharingModel.for_cluster(spec, xi))
    engine.run()
    return [(j.job_id, j.start_time, j.end_time) for j in engine.jobs], engine.policy.packs


@pytest.mark.parametrize("placement", ["fewest-servers", "strict-best-fit"])
@pytest.mark.parametrize("xi", ["analytic:1.0", "analytic:1.1", "analytic:1.5"])
@pytest.mark.parametrize("seed", [0, 1])
def test_class_walk_decides_as_the_literal_pass(placement: str, xi: str, seed: int) -> None:
    table, _ = load_trace(None, "synthetic", LoadOptions(num_jobs=400, max_gpus=32, load=2.5, seed=seed))
    table = annotate(table, seed=seed)
    fast, packs = _schedule(Lucid, table, "4x8", xi, placement)
    literal, literal_packs = _schedule(LiteralLucid, table, "4x8", xi, placement)
    assert fast == literal and packs == literal_packs
    assert packs > 0 or xi == "analytic:1.5"  # ξ 1.5 scores every workload 2: Lucid never packs
