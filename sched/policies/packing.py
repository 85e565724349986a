"""What the packing policies (Lucid, Gandiva) share: a queue indexed by GPU count and workload class,
and a packing pass that only revisits what changed since the last one.

With ``unequal`` (off by default; Gimbal §5.1's relaxation, spec ``gimbal.md`` §2.1) a waiting job may
also join a *job set* around a running job with more GPUs: the star rule (C3; a smaller job shares GPUs
with one larger job, its J_max, and only with it), at most ``max_jobset`` jobs per set, and the smaller
job on the fewest servers among the GPUs J_max holds alone (C2). Equal-size pairs stay balanced (the
same GPU set). And (spec rule 2.1(b)) a waiting job that does not fit on the free GPUs may become the
J_max of a new set: it takes free GPUs plus the GPUs of running jobs that are alone, smaller than it
and each on one server, on exactly the fewest servers its size needs (C2); every covered job must be
a pair the policy's ``fits`` allows, and is then treated as a member packed beside it.
"""

from __future__ import annotations

from bisect import insort
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Callable

from schedlab.sched.core.job import Job
from schedlab.sched.policies.base import Policy

if TYPE_CHECKING:
    from schedlab.sched.core.protocol import PolicyEngine


def workload(job: Job) -> tuple:
    return (job.model, job.batch_size)


def fewest_servers(gpus: list[int], count: int, per_server: int) -> tuple[int, ...]:
    """``count`` of ``gpus`` on the fewest servers (Gimbal §5.1, C2): fullest servers first, lower id
    first on ties, lowest GPU ids within a server."""
    by_server: dict[int, list[int]] = {}
    for g in sorted(gpus):
        by_server.setdefault(g // per_server, []).append(g)
    chosen: list[int] = []
    for _, group in sorted(by_server.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        chosen.extend(group[: count - len(chosen)])
        if len(chosen) == count:
            break
    return tuple(chosen)


class ClassQueue:
    """Jobs in two lazily-cleaned heap indexes on ``(key, index)``: per GPU count, and per class
    ``(GPU count, workload)``. Finding the best job that fits, or the head of every class of one
    GPU count, looks at a handful of heap heads, never at every job."""

    def __init__(self, key: Callable[[Job], float]) -> None:
        self.key = key
        self.token: dict[Job, int] = {}
        self._seq = 0
        self.by_gpus: dict[int, list] = {}
        self.by_class: dict[int, dict[tuple, list]] = {}

    def push(self, job: Job) -> None:
        self._seq += 1
        self.token[job] = self._seq
        entry = (self.key(job), job.index, self._seq, job)
        heappush(self.by_gpus.setdefault(job.num_gpus, []), entry)
        heappush(self.by_class.setdefault(job.num_gpus, {}).setdefault(workload(job), []), entry)

    def remove(self, job: Job) -> None:
        del self.token[job]

    def _head(self, heap: list):
        token = self.token
        while heap and token.get(heap[0][3]) != heap[0][2]:
            heappop(heap)
        return heap[0] if heap else None

    def best(self, max_gpus: int, skip: frozenset[int] | set[int] = frozenset()) -> Job | None:
        """The lowest-key job needing at most ``max_gpus`` GPUs and a GPU count not in ``skip``."""
        best = None
        for gpus, heap in self.by_gpus.items():
            if gpus <= max_gpus and gpus not in skip and (entry := self._head(heap)) is not None \
                    and (best is None or entry < best):
                best = entry
        return None if best is None else best[3]

    def class_heads(self) -> list[tuple[tuple, list]]:
        """``(entry, heap)`` of the head of every non-empty class, all GPU counts (for a merged walk in
        key order that advances a class only after its head left: :meth:`next_in`)."""
        return [(e, heap) for classes in self.by_class.values() for heap in classes.values()
                if (e := self._head(heap)) is not None]

    def next_in(self, heap: list):
        """The current head of one class's heap (after its previous head was removed), or ``None``."""
        return self._head(heap)

    def heads(self, gpus: int) -> list:
        """``(entry, workload)`` of the head of each non-empty class of ``gpus`` GPUs."""
        return [(e, wl) for wl, heap in self.by_class.get(gpus, {}).items() if (e := self._head(heap)) is not None]

    def head(self, gpus: int, wl: tuple):
        heap = self.by_class.get(gpus, {}).get(wl)
        return None if heap is None else self._head(heap)


class AloneQueue(ClassQueue):
    """The running jobs alone on their GPUs (packing targets), plus two indexes kept up to date as
    jobs come and go, so that an unequal pass never rescans every alone job: ``multi``, those with
    more than one GPU (rule (a) hosts), and per server the jobs of at most one server's size lying on
    that server only (rule (b)'s coverable jobs), largest first then by index. Result-identical: a job
    keeps its GPUs while it is alone (these policies never resize or move one), so the predicates give
    what a rescan would, and the per-server order is the rescan's sort key, a total order."""

    def __init__(self, key: Callable[[Job], float]) -> None:
        super().__init__(key)
        self.multi: dict[Job, None] = {}
        self._unindexed: dict[Job, None] = {}  # pushed since the last covering pass (GPUs per server unknown here)
        self._on_server: dict[int, list[Job]] = {}
        self._server: dict[Job, int] = {}
        self.coverable_classes: dict[tuple, dict[Job, None]] = {}  # (GPUs, workload) -> its indexed coverable jobs
        self.classes_added = 0  # how many times a class appeared in ``coverable_classes``

    def push(self, job: Job) -> None:
        super().push(job)
        self._unindex(job)  # pushed again (not expected): indexed afresh, as a rescan would see it now
        if job.num_gpus > 1:
            self.multi[job] = None
        self._unindexed[job] = None

    def remove(self, job: Job) -> None:
        super().remove(job)
        self.multi.pop(job, None)
        self._unindex(job)

    def _unindex(self, job: Job) -> None:
        if self._unindexed.pop(job, 0) is None:
            return
        if (server := self._server.pop(job, None)) is not None:
            jobs = self._on_server[server]
            jobs.remove(job)
            if not jobs:  # as a rescan would: no entry for a server without coverable jobs
                del self._on_server[server]
            same = self.coverable_classes[cls := (job.num_gpus, workload(job))]
            del same[job]
            if not same:
                del self.coverable_classes[cls]

    def coverable(self, per: int) -> dict[int, list[Job]]:
        """Server -> alone jobs held on it only (at most ``per`` GPUs), largest first then by index:
        a new dict over the index's lists (a covered job leaves its list, the server keeps its key)."""
        for job in self._unindexed:
            if (gpus := job.gpus) and job.num_gpus <= per and gpus[0] // per == gpus[-1] // per:  # running, one server
                server = self._server[job] = gpus[0] // per
                insort(self._on_server.setdefault(server, []), job, key=_largest_first)
                if (same := self.coverable_classes.get(cls := (job.num_gpus, workload(job)))) is None:
                    same = self.coverable_classes[cls] = {}
                    self.classes_added += 1
                same[job] = None
        self._unindexed.clear()
        return dict(self._on_server)


def _largest_first(job: Job) -> tuple[int, int]:
    return (-job.num_gpus, job.index)


class PackingPolicy(Policy):
    """What Lucid and Gandiva share: a waiting queue, the running jobs that are alone on their GPUs
    (packing targets), pairs, and a packing pass that only revisits what changed: ``dirty`` maps a
    GPU count to the waiting classes and the target classes that gained a job since the last pass;
    only waiting classes that are new or compatible with a new target class are tried again."""

    shares_gpus = True

    def __init__(self, params, waiting_key: Callable[[Job], float], target_key: Callable[[Job], float]) -> None:
        super().__init__(params)
        self.waiting = ClassQueue(waiting_key)
        self.alone = AloneQueue(target_key)
        self.pair: dict[Job, Job] = {}
        self.dirty: dict[int, tuple[set, set]] = {}
        self.packs = 0
        self.unequal = bool(getattr(self.params, "unequal", False))
        self.max_jobset = int(getattr(self.params, "max_jobset", 5))
        self.members: dict[Job, list[Job]] = {}  # unequal sets: J_max -> its smaller members
        self.host: dict[Job, Job] = {}  # smaller member -> its J_max
        self.new_hosts: set[Job] = set()  # jobs that became (or regained room as) J_max candidates since the last pass
        self.free_seen = 0  # free GPUs after the last covering pass (more since: covering may succeed)
        self.cover_due = False
        self.cover_packs = 0
        self._no_cover: dict[tuple, int] = {}  # (GPUs, workload) of a head no coverable class fits -> classes_added then
        self.unequal_packs = 0

    def choose(self, engine: PolicyEngine, entry: tuple, wl: tuple, targets: list) -> int | None:
        """Index in ``targets`` (``(entry, workload)`` class heads) of the partner for ``entry``'s job."""
        raise NotImplementedError

    def fits(self, engine: PolicyEngine, job: Job, wl: tuple, target: Job, twl: tuple) -> bool:
        """Whether the two workload classes may ever be packed (cached by the subclass)."""
        raise NotImplementedError

    def on_packed(self, engine: PolicyEngine, job: Job, partner: Job) -> None:
        """Called after ``job`` was packed beside ``partner``."""

    def on_arrival(self, engine: PolicyEngine, job: Job) -> None:
        self._enqueue(job)

    def on_finish(self, engine: PolicyEngine, job: Job) -> None:
        if self.members or self.host:
            if (host := self.host.get(job)) is not None:
                self._leave_set(job, host)
                return
            if (members := self.members.pop(job, None)) is not None:
                for member in members:  # they keep running, now alone on their GPUs
                    del self.host[member]
                    self._alone(member)
                return
        partner = self.pair.pop(job, None)
        if partner is None:
            self.alone.remove(job)
        else:
            del self.pair[partner]
            self._alone(partner)

    def _leave_set(self, job: Job, host: Job) -> None:
        """``job`` (a smaller member) left ``host``'s set; the host runs alone again when it was the last."""
        del self.host[job]
        members = self.members[host]
        members.remove(job)
        if not members:
            del self.members[host]
            self._alone(host)
        else:
            self.new_hosts.add(host)

    def _enqueue(self, job: Job) -> None:
        self.waiting.push(job)
        self.dirty.setdefault(job.num_gpus, (set(), set()))[0].add(workload(job))

    def _alone(self, job: Job) -> None:
        self.alone.push(job)
        self.dirty.setdefault(job.num_gpus, (set(), set()))[1].add(workload(job))
        if self.unequal and job.num_gpus > 1:  # a 1-GPU job never hosts a smaller one
            self.new_hosts.add(job)

    def _start_free(self, engine: PolicyEngine) -> None:
        """Start waiting jobs on free GPUs, best key first; a job that does not fit blocks no one. A
        strict placement (``strict-best-fit``) may refuse a GPU count although enough GPUs are free: the
        jobs of that count wait for the next pass (refusals depend on the count only, and starts only
        take GPUs, so none of them could start later in this pass)."""
        refused: set[int] = set()
        while (job := self.waiting.best(engine.cluster.free_gpus, refused)) is not None:
            if not engine.start(job):
                refused.add(job.num_gpus)
                continue
            self.waiting.remove(job)
            self._alone(job)

    def _pack(self, engine: PolicyEngine, max_pack: int, cover: bool = True) -> None:
        """Pack waiting class heads (best key first) beside targets of the same GPU count. A class
        whose head finds no partner is done for this pass: within a class later jobs rank no better,
        and targets are only used up."""
        for gpus, (new_waiting, new_targets) in self.dirty.items():
            if gpus > max_pack or self.waiting._head(self.waiting.by_gpus.get(gpus, [])) is None:
                continue  # nothing of this size waits
            if not (targets := self.alone.heads(gpus)):
                continue
            if new_targets:
                fresh = [(e[3], twl) for e, twl in targets if twl in new_targets]
                heads = [(e, wl) for e, wl in self.waiting.heads(gpus) if wl in new_waiting or any(
                    self.fits(engine, e[3], wl, target, twl) for target, twl in fresh)]
            else:
                heads = [(e, wl) for wl in new_waiting if (e := self.waiting.head(gpus, wl)) is not None]
            heads.sort()
            for entry, wl in heads:
                while entry is not None and targets and (i := self.choose(engine, entry, wl, targets)) is not None:
                    job, partner, twl = entry[3], targets[i][0][3], targets[i][1]
                    engine.start(job, share_gpus=partner.gpus)
                    self.waiting.remove(job)
                    self.alone.remove(partner)
                    self.pair[job], self.pair[partner] = partner, job
                    self.packs += 1
                    self.on_packed(engine, job, partner)
                    if (nxt := self.alone.head(gpus, twl)) is not None:
                        targets[i] = (nxt, twl)
                    else:
                        del targets[i]
                    entry = self.waiting.head(gpus, wl)
        if self.unequal:
            self._pack_unequal(engine, max_pack, cover)
        self.dirty.clear()

    # ---- unequal packing (Gimbal §5.1, C2-C3) -----------------------------------------------
    def _pack_unequal(self, engine: PolicyEngine, max_pack: int, cover: bool = True) -> None:
        """Pack waiting class heads (best key first) into job sets around larger running jobs: a job
        alone on its GPUs, or a J_max whose set is not full, with enough GPUs it holds alone. Only
        what changed is retried: classes new this pass against every host, the others against the
        hosts that are new or gained room (a class head that fits no host is done, as in ``_pack``)."""
        new_hosts, self.new_hosts = self.new_hosts, set()
        new_classes = {(gpus, wl) for gpus, (new_waiting, _) in self.dirty.items() for wl in new_waiting}
        # rule (b) is retried when GPUs were freed or a new class waits (remembered across passes
        # that do not cover)
        self.cover_due |= bool(new_classes) or engine.cluster.free_gpus > self.free_seen
        if cover and self.cover_due:
            self._cover(engine, max_pack)
            self.cover_due = False
        if cover:
            self.free_seen = engine.cluster.free_gpus
        if not new_hosts and not new_classes:
            return
        # J_max of sets with room, then the multi-GPU jobs running alone: the running jobs a scan of
        # engine.running would keep (both kinds run: only a set's member or a pair's job is ever
        # preempted); their order differs, which changes nothing, as ``choose`` takes the least of
        # a total order (as it already must for the set ``new_hosts``)
        members, cap = self.members, self.max_jobset - 1
        hosts = [job for job in members if job.num_gpus <= max_pack and len(members[job]) < cap]
        hosts += [job for job in self.alone.multi if job.num_gpus <= max_pack]
        if not hosts:
            return
        largest = max(h.num_gpus for h in hosts)
        heads = [(e, wl) for gpus in self.waiting.by_gpus if gpus < largest
                 for e, wl in self.waiting.heads(gpus) if new_hosts or (gpus, wl) in new_classes]
        if not heads:
            return
        # GPUs each host holds alone: its GPUs less its members' (a member lies wholly inside its
        # J_max's GPUs, one worker per GPU beside it, and a job alone has none), which is what
        # ``single_count`` would count; and each host's target entry (its key never changes)
        room: dict[Job, int] = {h: h.num_gpus for h in hosts}
        for h, its in members.items():
            if h in room:
                room[h] -= sum(m.num_gpus for m in its)
        key, entries = self.alone.key, {}

        def entry_of(h: Job) -> tuple:
            if (e := entries.get(h)) is None:
                e = entries[h] = ((key(h), h.index, 0, h), workload(h))
            return e

        heads.sort()
        for entry, wl in heads:
            candidates = room if (entry[3].num_gpus, wl) in new_classes else [h for h in new_hosts if h in room]
            while entry is not None and (job := entry[3]).num_gpus <= max_pack:
                n = job.num_gpus
                targets = [entries[h] if h in entries else entry_of(h) for h in candidates
                           if h.num_gpus > n and room.get(h, 0) >= n]
                if not targets or (i := self.choose(engine, entry, wl, targets)) is None:
                    break
                host = targets[i][0][3]
                if not self.join(engine, job, host):  # the engine (or a wrapper) refused: not this host
                    del room[host]
                    continue
                if len(self.members[host]) < self.max_jobset - 1:
                    room[host] -= job.num_gpus
                else:
                    del room[host]
                entry = self.waiting.head(job.num_gpus, wl)

    def _cover(self, engine: PolicyEngine, max_pack: int) -> None:
        """Rule 2.1(b): waiting class heads (best key first) that do not fit on the free GPUs become
        J_max of a new set over free GPUs and smaller single-server jobs running alone. One try per
        GPU count per pass (the best-ranked head of that size), so a pass stays O(servers + jobs)."""
        cluster = engine.cluster
        per = cluster.gpus_per_server
        free = cluster.free_gpus
        # the best-ranked head of each GPU count: the head of its by-GPU-count index
        heads = [(e, workload(e[3])) for gpus, heap in self.waiting.by_gpus.items()
                 if max(free, 1) < gpus <= max_pack and (e := self.waiting._head(heap)) is not None]
        if not heads:
            return
        coverable = self.alone.coverable(per)  # server -> alone jobs held on it only, largest first
        if not coverable:
            return
        heads.sort()
        tried: set[int] = set()
        bounds: list[tuple[int, int]] | None = None  # recomputed after a start changed the servers
        for entry, wl in heads:
            job = entry[3]
            if job.num_gpus in tried or job.num_gpus <= cluster.free_gpus:
                continue
            tried.add(job.num_gpus)
            if not self._may_cover(engine, job, wl):
                continue  # _cover_plan would return None: it covers only smaller jobs that fit
            if bounds is None:
                bounds = self._cover_bounds(engine, coverable)
            plan = self._cover_plan(engine, job, wl, coverable, bounds)
            if plan is None:
                continue
            placement, covered = plan
            share = tuple(g for c in covered for g in c.gpus)
            if not engine.start(job, placement or None, share_gpus=share):
                continue
            bounds = None
            self.waiting.remove(job)
            self.members[job] = list(covered)
            for c in covered:
                self.alone.remove(c)  # also leaves its list in ``coverable``
                self.host[c] = job
            self.packs += 1
            self.unequal_packs += 1
            self.cover_packs += 1
            for c in covered:
                self.on_packed(engine, c, job)

    def _may_cover(self, engine: PolicyEngine, job: Job, wl: tuple) -> bool:
        """Whether some coverable job is smaller than ``job`` and ``fits`` beside it (one job per class
        asked: ``fits`` depends on the two workload classes only, which its caches already assume)."""
        n, added = job.num_gpus, self.alone.classes_added
        # a "no" stays valid until a coverable class appears: ``fits`` of two classes is fixed (Lucid)
        # or can only turn False (Gandiva's failed pairs), and classes that leave only remove options
        if self._no_cover.get(key := (n, wl)) == added:
            return False
        if any(gpus < n and self.fits(engine, job, wl, next(iter(jobs)), cwl)
               for (gpus, cwl), jobs in self.alone.coverable_classes.items()):
            return True
        self._no_cover[key] = added
        return False

    @staticmethod
    def _cover_bounds(engine: PolicyEngine, coverable: dict[int, list[Job]]) -> list[tuple[int, int]]:
        """``(most GPUs a covering plan can take on the server, -server)``, best first: its free GPUs
        plus every coverable job on it (an upper bound on its offer in ``_cover_plan``)."""
        free = engine.cluster.free_by_server
        bounds = [(len(free[s]) + sum(c.num_gpus for c in jobs), -s) for s, jobs in coverable.items()]
        bounds += [(len(f), -s) for s, f in enumerate(free) if f and s not in coverable]
        bounds.sort(reverse=True)
        return bounds

    def _cover_plan(self, engine: PolicyEngine, job: Job, wl: tuple, coverable: dict[int, list[Job]],
                    bounds: list[tuple[int, int]]):
        """``([(server, free GPUs taken)], covered jobs)`` for ``job`` on exactly ceil(n / per)
        servers, fullest first, free GPUs before covered jobs (largest first, at most max_jobset - 1
        in all); None if impossible. Servers are visited by ``bounds`` (best first) and the visit
        stops once no later server can beat the ceil(n / per) best offers found."""
        cluster = engine.cluster
        per, n = cluster.gpus_per_server, job.num_gpus
        need, slots = -(-n // per), self.max_jobset - 1
        free = cluster.free_by_server
        offers: list = []  # the best ``need`` offers so far, best first: (GPUs offered, -server, jobs to cover)
        for bound, neg in bounds:
            if len(offers) == need and (bound, neg) < (offers[-1][0], offers[-1][1]):
                break  # an offer never exceeds its bound, and the bounds come best first
            if (jobs := coverable.get(-neg)) is None:
                offer = (bound, neg, [])  # free GPUs only
            else:
                allowed = [c for c in jobs if c.num_gpus < n][:slots]
                if not allowed:
                    continue  # as before: a server with coverable jobs offers nothing without an allowed one
                offer = (len(free[-neg]) + sum(c.num_gpus for c in allowed), neg, allowed)
            offers.append(offer)
            if len(offers) > 1:
                offers.sort(key=lambda o: (o[0], o[1]), reverse=True)
                del offers[need:]
        if sum(o[0] for o in offers) < n:
            return None
        placement, covered, left = [], [], n
        for _, neg, allowed in offers[:need]:
            server = -neg
            take = min(len(free[server]), left)
            if take:
                placement.append((server, take))
                left -= take
            for c in allowed:
                if c.num_gpus <= left and len(covered) < slots and self.fits(engine, job, wl, c, workload(c)):
                    covered.append(c)
                    left -= c.num_gpus
            if left == 0:
                break
        return (placement, covered) if left == 0 and covered else None

    @staticmethod
    def single_gpus(engine: PolicyEngine, host: Job) -> list[int]:
        """The GPUs of ``host`` that it holds alone."""
        holders = engine.cluster.holders
        return [g for g in host.gpus if len(holders[g]) == 1]

    @staticmethod
    def single_count(engine: PolicyEngine, host: Job) -> int:
        """How many GPUs ``host`` holds alone (``len(single_gpus(...))`` without a Python-level loop)."""
        return list(map(len, map(engine.cluster.holders.__getitem__, host.gpus))).count(1)

    def join(self, engine: PolicyEngine, job: Job, host: Job) -> bool:
        """Start waiting ``job`` inside ``host``'s GPUs (fewest servers) as a member of its set;
        False (nothing changed) if the engine refuses the start."""
        gpus = fewest_servers(self.single_gpus(engine, host), job.num_gpus, engine.cluster.gpus_per_server)
        if not engine.start(job, share_gpus=gpus):
            return False
        self.waiting.remove(job)
        if host not in self.members:
            self.alone.remove(host)
            self.members[host] = []
        self.members[host].append(job)
        self.host[job] = host
        self.packs += 1
        self.unequal_packs += 1
        self.on_packed(engine, job, host)
        return True
