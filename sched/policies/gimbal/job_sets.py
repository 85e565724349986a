"""Gimbal's job packing sets and the placement rule that keeps them stars (Gimbal §5.1; docs/explanation/gimbal.md).

C1: at most two workers per GPU. C2: a job on the fewest servers. C3 (star co-location): a smaller
job co-locates with one larger job only; equal-size jobs only on the identical GPU set. So running
jobs fall into disjoint *sets*, each with one largest job J_max that co-locates with every other
member, while the others co-locate only with J_max; at most ``max_jobset`` (5, the largest M of §7.4)
jobs per set. The operational rule for a new job N sharing GPUs (OURS, docs/explanation/gimbal.md):

(a) N joins the set of J_max L (or forms one with L running alone) when |L| > |N|: all of N's GPUs
    are GPUs L holds alone, on the fewest servers those GPUs allow (C2);
(c) |L| = |N|: N takes exactly L's GPUs and L runs alone (a balanced pair, M = 2);
(b) N becomes J_max of a new set over jobs that run alone, are strictly smaller and lie wholly inside
    N's GPUs (plus free GPUs); a J_max spread over more than ⌈|N| / GPUs per server⌉ servers is
    counted (``spread_packs``), not refused: the covered jobs and the engine's placement decide it.

Never allowed: sharing with a non-J_max member, spanning two sets. Gimbal's fallback of running
rule-breaking packs one after another (§5 intro) is not implemented: a breaking start is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schedlab.sched.core.cluster import ClusterState
    from schedlab.sched.core.job import Job


@dataclass(eq=False)
class JobSet:
    sid: int
    jmax: Job
    members: list[Job] = field(default_factory=list)  # J_max first
    generation: int = 0


def _servers(gpus, per: int) -> int:
    return len({g // per for g in gpus})


def _fewest_servers(gpus: list[int], count: int, per: int) -> int:
    """The fewest servers ``count`` of ``gpus`` can lie on (fullest servers first)."""
    sizes = sorted(_counts(gpus, per).values(), reverse=True)
    used = 0
    for size in sizes:
        if count <= 0:
            break
        count -= size
        used += 1
    return used


def _counts(gpus, per: int) -> dict[int, int]:
    out: dict[int, int] = {}
    for g in gpus:
        out[g // per] = out.get(g // per, 0) + 1
    return out


class JobSets:
    """The registry: job -> its set; what changed since the monitor last looked."""

    def __init__(self, max_jobset: int) -> None:
        self.max_jobset = max_jobset
        self.of: dict[Job, JobSet] = {}
        self.sets: dict[int, JobSet] = {}
        self.released: dict[Job, None] = {}  # jobs that left a set (their caps may need a reset, A10)
        self.unequal_packs = 0
        self.spread_packs = 0  # rule-(b) packs whose J_max spans more servers than needed (C2)
        self.sizes: list[int] = []  # M after every membership change
        self._next = 0

    def violation(self, cluster: ClusterState, job: Job, share_gpus: tuple[int, ...]) -> str | None:
        """Why starting ``job`` on ``share_gpus`` (beside their holders) breaks §5.1, or None."""
        if not share_gpus:
            return None
        per, n = cluster.gpus_per_server, job.num_gpus
        counts: dict[Job, int] = {}
        for g in share_gpus:
            on = cluster.holders[g]
            if len(on) != 1:
                return f"GPU {g} holds {len(on)} jobs (C1: sharing needs a GPU with exactly one)"
            counts[on[0]] = counts.get(on[0], 0) + 1
        if len(set(share_gpus)) != len(share_gpus):
            return "the shared GPUs repeat"
        if len(counts) == 1:
            (host,) = counts
            group = self.of.get(host)
            if host.num_gpus > n:  # (a)
                if group is not None and group.jmax is not host:
                    return f"job {host.job_id} is not the J_max of its set (C3: small jobs share only with J_max)"
                if group is not None and len(group.members) >= self.max_jobset:
                    return f"the set of job {host.job_id} already holds {self.max_jobset} jobs (max_jobset)"
                if len(share_gpus) != n:
                    return f"a smaller job must lie wholly inside job {host.job_id}'s GPUs (C3)"
                fewest = _fewest_servers([g for g in host.gpus if len(cluster.holders[g]) == 1], n, per)
                if _servers(share_gpus, per) > fewest:
                    return (f"job {job.job_id} spans {_servers(share_gpus, per)} servers of job {host.job_id},"
                            f" {fewest} suffice (C2)")
                return None
            if host.num_gpus == n:  # (c)
                if group is not None:
                    return f"equal-size job {host.job_id} is already in a set (C3: balanced pairs only)"
                if set(share_gpus) != set(host.gpus):
                    return f"equal-size jobs co-locate only on identical GPU sets (C3, job {host.job_id})"
                return None
        for host, count in counts.items():  # (b)
            if host.num_gpus >= n:
                return f"job {host.job_id} is not smaller than job {job.job_id}, which would span two jobs (C3)"
            if host in self.of:
                return f"job {host.job_id} is already in a set (a set cannot be spanned, C3)"
            if count != host.num_gpus:
                return f"job {job.job_id} covers only part of job {host.job_id}'s GPUs (C3)"
        if len(counts) + 1 > self.max_jobset:
            return f"a set of {len(counts) + 1} jobs exceeds max_jobset = {self.max_jobset}"
        return None

    def spread(self, cluster: ClusterState, job: Job, hosts: list[Job]) -> bool:
        """After the start: whether a new J_max over smaller jobs (rule b) spans more servers than
        ⌈|N| / GPUs per server⌉ (C2; its covered jobs' and the engine's free GPUs decide, so this is
        counted in ``spread_packs``, not refused)."""
        per, n = cluster.gpus_per_server, job.num_gpus
        if hosts and all(h.num_gpus < n for h in hosts) and _servers(job.gpus, per) > -(-n // per):
            self.spread_packs += 1
            return True
        return False

    def join(self, job: Job, hosts: list[Job]) -> JobSet:
        """``job`` started beside ``hosts`` (checked by :meth:`violation`): update the sets."""
        if len(hosts) == 1 and hosts[0].num_gpus >= job.num_gpus:
            host = hosts[0]
            group = self.of.get(host)
            if group is None:
                group = self._new(host, [host])
            group.members.append(job)
            self.of[job] = group
            if host.num_gpus > job.num_gpus:
                self.unequal_packs += 1
        else:
            group = self._new(job, [job, *hosts])
            self.unequal_packs += 1
        group.generation += 1
        self.sizes.append(len(group.members))
        return group

    def leave(self, job: Job) -> JobSet | None:
        """``job`` stopped. Returns its set if that set lives on with a new generation (else None)."""
        group = self.of.pop(job, None)
        if group is None:
            return None
        group.members.remove(job)
        if job is group.jmax or len(group.members) < 2:
            for other in group.members:
                del self.of[other]
                self.released[other] = None
            del self.sets[group.sid]
            return None
        group.generation += 1
        self.sizes.append(len(group.members))
        return group

    def _new(self, jmax: Job, members: list[Job]) -> JobSet:
        self._next += 1
        group = JobSet(self._next, jmax, list(members))
        self.sets[group.sid] = group
        for member in members:
            self.of[member] = group
            self.released.pop(member, None)
        return group
