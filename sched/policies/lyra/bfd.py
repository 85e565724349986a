"""Best-fit-decreasing (BFD) worker placement (Lyra EuroSys'23 §5.3; docs/explanation/lyra.md).

Reusable beside ``sched/core/placement.py``; it looks only at per-server free GPU counts. A job is a
list of workers (GPUs each); workers go largest first, each on the **non-empty server that fits it
best** (fewest free GPUs that still hold it), else on an **empty server** (lowest id). Servers come
in preference ``tiers`` (Lyra: elastic jobs prefer on-loan inference servers, inelastic jobs
training servers; a flexible group of servers apart from the base group): a tier is tried in full
before the next. A job is placed whole or not at all. With ``split`` a worker no single server
can hold is spread over the servers with the most free GPUs (the engine's ``fewest-servers``
fallback, so BFD never refuses what the baselines' placement would take).
"""

from __future__ import annotations

from collections.abc import Sequence

Placement = dict[int, int]  # server -> GPUs


def workers_of(gpus: int, per_worker: int) -> list[int]:
    """``gpus`` as workers of ``per_worker`` GPUs (the last one smaller if it does not divide)."""
    full, rest = divmod(gpus, per_worker)
    return [per_worker] * full + ([rest] if rest else [])


def place(free: list[int] | dict[int, int], workers: Sequence[int], tiers: Sequence[Sequence[int]],
          gpus_per_server: int, split: bool = True, available: int | None = None) -> Placement | None:
    """Where ``workers`` go (server -> GPUs), or None. ``free`` (free GPUs by server: a list, or a
    dict over at least the tiers' servers) is updated only on success. ``available``, if known, is
    the free GPUs of the tiers' servers (saves summing them; any upper bound gives the same result)."""
    need = sum(workers)
    if need <= 0:
        return {}
    if need > (available if available is not None else sum(free[s] for tier in tiers for s in tier)):
        return None
    left = free.copy()
    placement: Placement = {}
    ordered = sorted(workers, reverse=True)
    i = 0
    while i < len(ordered):
        g = ordered[i]
        server = _best_fit(left, g, tiers, gpus_per_server)
        if server is None:
            if not split or not _spread(left, g, tiers, placement):
                return None
            i += 1
            continue
        while i < len(ordered) and ordered[i] == g and left[server] >= g:  # the best fit stays best
            left[server] -= g
            placement[server] = placement.get(server, 0) + g
            i += 1
    if isinstance(free, dict):
        free.update(left)
    else:
        free[:] = left
    return placement


def _best_fit(free: list[int] | dict[int, int], g: int, tiers: Sequence[Sequence[int]], per: int) -> int | None:
    for tier in tiers:
        best, best_free, empty = None, per + 1, None
        for s in tier:
            f = free[s]
            if f < g:
                continue
            if f < per:
                if f < best_free:
                    best, best_free = s, f
            elif empty is None or s < empty:
                empty = s
        if best is not None:
            return best
        if empty is not None:
            return empty
    return None


def _spread(free: list[int] | dict[int, int], g: int, tiers: Sequence[Sequence[int]], placement: Placement) -> bool:
    for tier in tiers:
        if sum(free[s] for s in tier) >= g:
            for s in sorted(tier, key=lambda s: (-free[s], s)):
                take = min(free[s], g)
                if take:
                    free[s] -= take
                    placement[s] = placement.get(s, 0) + take
                    g -= take
                if g == 0:
                    return True
    return False


def place_jobs(free: list[int], requests: Sequence[tuple[object, Sequence[int], Sequence[Sequence[int]]]],
               gpus_per_server: int, split: bool = True) -> dict[object, Placement]:
    """Several jobs at once, in decreasing per-worker demand (BFD's order); a job that does not fit
    is skipped. ``requests``: (key, workers, tiers)."""
    order = sorted(range(len(requests)), key=lambda i: (-max(requests[i][1], default=0), i))
    placed: dict[object, Placement] = {}
    for i in order:
        key, workers, tiers = requests[i]
        where = place(free, workers, tiers, gpus_per_server, split)
        if where is not None:
            placed[key] = where
    return placed
