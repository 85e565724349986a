"""A fast optimiser for Pollux's allocation problem (``problem.py``; Pollux OSDI'21 §4.2).

``solve`` (ours; the study uses a genetic algorithm, ``genetic.py``):
1. for every job and GPU count r, its best option: keep its allocation (no restart factor) or a
   move to the best placement of r GPUs on the fewest nodes or one more, or balanced on more nodes;
2. an exact dynamic programme over GPU counts (the objective is separable: min sum of costs with
   sum r <= GPUs) — the optimum of the problem without node packing, a bound;
3. packing: kept jobs stay, the others go largest first, best fit on one node or over the emptiest
   nodes that hold no other multi-node job (one GPU fewer until it fits);
4. local search: add / remove one GPU, revert a job to its current allocation, move one GPU from a
   job to another on a full node; where none of these improves, wider moves: a job's GPUs re-placed
   in another shape (same count) or a job taking a whole node (its free GPUs, evicting the node's
   other holders); apply the best improving move until none is left.
"""

from __future__ import annotations

import bisect

import numpy as np

from schedlab.sched.policies.pollux.problem import (
    EPS,
    Alloc,
    Problem,
    candidate_shapes,
    min_node_shapes,
    nonzero,
    spread_shapes,
)

VECTOR_MIN = 2048  # jobs x nodes from which the local search prices moves with numpy (same moves)
BOUND_MARGIN = 1e-6  # a move is priced exactly unless a bound (rounded otherwise) misses best by this
PERMANENT = -1  # the local search's stamp of a kept move that no change of the other jobs alters


def solve(problem: Problem) -> Alloc:
    """Greedy-exact counts, packing and local search (see the module docstring)."""
    jobs, G, N = problem.jobs, problem.gpus_per_node, problem.nodes
    if not jobs:
        return []
    capacity = N * G
    options: list[list[tuple[float, tuple[int, ...] | None]]] = []  # per job, per r: (cost, shape or None=keep)
    for j, job in enumerate(jobs):
        cur = sum(job.current)
        row = [(1.0 / EPS, ())]
        top = min(job.max_gpus, capacity, problem.max_nodes_per_job * G)
        for r in range(1, top + 1):
            best = (np.inf, ())
            # every shape prices the same when only the GPU count matters, and every shape on one node, and
            # every one over several, when only the count and the spread do; the first one wins ties
            if job.by_spread:
                shapes = spread_shapes(r, G, problem.max_nodes_per_job)
            else:
                shapes = candidate_shapes(r, G, problem.max_nodes_per_job)
            for shape in shapes[:1] if job.by_count else shapes:
                # a by-count job: ``speed``'s value, not kept (one shape per count; the memo costs more)
                speed = job.speedup(shape) * problem.scale if job.by_count else problem.speed(j, shape)
                s = speed * job.restart_factor
                if 1.0 / (s + EPS) < best[0]:
                    best = (1.0 / (s + EPS), shape)
            if r == cur:
                keep = problem.cost(j, job.current)
                if keep <= best[0]:
                    best = (keep, None)
            row.append(best)
        options.append(row)
    counts, bound = _dp_counts([[c for c, _ in row] for row in options], capacity)
    alloc = _pack(problem, counts, options)
    if sum(problem.cost(j, a) for j, a in enumerate(alloc)) <= bound * (1 + 1e-12):
        return alloc  # the packing reached the bound: optimal
    searched: dict[tuple, Alloc] = {}  # start -> where the (deterministic) local search ends

    def search(start: Alloc) -> Alloc:
        """``_local_search`` from ``start``, once per start (an end is its own end: no move improves it)."""
        key = tuple(start)
        end = searched.get(key)
        if end is None:
            end = searched[key] = _local_search(problem, start)
            searched.setdefault(tuple(end), end)
        return list(end)

    alloc = search(alloc)
    value = problem.value(alloc)
    current = [job.current for job in jobs]
    if problem.feasible(current):  # a second start: where the jobs are now
        trial = search(current)
        if problem.value(trial) > value:
            alloc, value = trial, problem.value(trial)
    for j, job in enumerate(jobs):  # perturb: put a job back where it is, evicting what is in the way
        if alloc[j] != job.current and 0 < sum(job.current) <= job.max_gpus:
            trial = _force(problem, alloc, j, job.current)
            if not problem.feasible(trial):
                continue
            trial = search(trial)
            trial_value = problem.value(trial)
            if trial_value > value:
                alloc, value = trial, trial_value
    return alloc


def _force(problem: Problem, alloc: Alloc, j: int, target: tuple[int, ...]) -> Alloc:
    """``alloc`` with job ``j`` on ``target``; other jobs give up what conflicts (cheapest GPU first)."""
    G, N = problem.gpus_per_node, problem.nodes
    out = list(alloc)
    out[j] = target
    target_multi = sum(1 for c in target if c) > 1
    for k, a in enumerate(out):  # at most one multi-node job per node
        if k != j and target_multi and sum(1 for c in a if c) > 1 and any(a[n] and target[n] for n in range(N)):
            out[k] = tuple(0 if target[n] else c for n, c in enumerate(a))
    used = [0] * N
    for a in out:
        for n, c in nonzero(a):
            used[n] += c
    for n in range(N):
        while used[n] > G:
            holders = [k for k in range(len(out)) if k != j and out[k][n]]
            k = min(holders, key=lambda k: problem.cost(k, out[k][:n] + (out[k][n] - 1,) + out[k][n + 1:]) - problem.cost(k, out[k]))
            out[k] = out[k][:n] + (out[k][n] - 1,) + out[k][n + 1:]
            used[n] -= 1
    return out


def _dp_counts(costs: list[list[float]], capacity: int) -> tuple[list[int], float]:
    """min sum_j costs[j][r_j] subject to sum r_j <= capacity (exact; ties: fewer GPUs): the counts
    and the minimum.

    ``dp[c]`` (the best cost with at most ``c`` GPUs) never increases with ``c``, so a count ``r``
    whose cost is no lower than that of a smaller count never wins (nor ties first): only the counts
    where a row's cost reaches a new low are tried, smallest first, a later one replacing an earlier
    one only when strictly lower: the same sums, minimum and tie-break as trying every count."""
    C = capacity
    lows_per_row = [_new_lows(row, C) for row in costs]
    fast = _dp_unconstrained(lows_per_row, C)
    if fast is not None:
        return fast
    dp = np.zeros(C + 1)
    choices = []
    for lows in lows_per_row:
        if not lows:  # no finite cost: nothing fits
            dp, choice = np.full(C + 1, np.inf), np.zeros(C + 1, dtype=np.intp)
            choices.append(choice)
            continue
        r, c = lows[0]
        new = dp + c
        choice = np.zeros(C + 1, dtype=np.intp)
        if r:  # a row whose first finite cost is not at r = 0: counts below r cannot be used
            new[:] = np.inf
            new[r:] = dp[: C + 1 - r] + c
            choice[r:] = r
        for r, c in lows[1:]:
            cand = dp[: C + 1 - r] + c
            better = cand < new[r:]
            new[r:][better] = cand[better]
            choice[r:][better] = r
        dp = new
        choices.append(choice)
    out = []
    c = C
    for choice in reversed(choices):
        r = int(choice[c])
        out.append(r)
        c -= r
    return out[::-1], float(dp[C])


def _new_lows(row: list[float], capacity: int) -> list[tuple[int, float]]:
    """(count, cost) where a row's cost reaches a new low, smallest count first (counts <= capacity)."""
    best = np.inf
    lows = []
    for r in range(min(len(row), capacity + 1)):
        c = row[r]
        if c < best:
            best = c
            lows.append((r, c))
    return lows


def _dp_unconstrained(lows_per_row: list[list[tuple[int, float]]], capacity: int) -> tuple[list[int], float] | None:
    """``_dp_counts``'s answer without the table when every row's lowest cost fits at once (the rows'
    lowest-cost counts sum to at most ``capacity``; else None). Rows are ``_new_lows``.

    Then ``dp`` before row j is, at every count it is read at, the running sum ``P`` of the earlier
    rows' picks (float addition is monotone, so no other choice sums lower), and the programme keeps
    the first new-low count ``r`` of row j where ``P + cost[r]`` equals ``P + lowest`` (a rounding
    tie included): the same counts and minimum as the table."""
    if not all(lows_per_row) or sum(lows[-1][0] for lows in lows_per_row) > capacity:
        return None
    counts = []
    P = 0.0
    for lows in lows_per_row:
        target = P + lows[-1][1]
        counts.append(next(r for r, c in lows if P + c == target))
        P = target
    return counts, float(P)


def _pack(problem: Problem, counts: list[int], options) -> Alloc:
    jobs, G, N = problem.jobs, problem.gpus_per_node, problem.nodes
    free = [G] * N
    multi = [False] * N
    alloc: Alloc = [(0,) * N] * len(jobs)
    movers = []
    for j, r in enumerate(counts):
        if r and options[j][r][1] is None:
            alloc[j] = jobs[j].current
            held = nonzero(jobs[j].current)
            for n, c in held:
                free[n] -= c
                multi[n] |= len(held) > 1
        elif r:
            movers.append(j)
    movers.sort(key=lambda j: (-counts[j], j))
    for j in movers:
        for r in range(counts[j], 0, -1):
            shape = options[j][r][1] if r == counts[j] else None
            placed = _place_shape(free, multi, shape) if shape else None
            if placed is None:
                placed = _place(free, multi, r, G, problem.max_nodes_per_job)
            if placed is not None:
                alloc[j] = placed
                held = nonzero(placed)
                for n, c in held:
                    free[n] -= c
                    multi[n] |= len(held) > 1
                break
    return alloc


def _place_shape(free: list[int], multi: list[bool], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """``shape`` part by part, best fit (a multi-node shape only on nodes without a multi-node job)."""
    out = [0] * len(free)
    for part in shape:
        fits = [n for n in range(len(free)) if not out[n] and free[n] >= part and (len(shape) == 1 or not multi[n])]
        if not fits:
            return None
        n = min(fits, key=lambda n: (free[n], n))
        out[n] = part
    return tuple(out)


def _place(free: list[int], multi: list[bool], r: int, G: int, max_nodes: int) -> tuple[int, ...] | None:
    """``r`` GPUs: best fit on one node, else over the emptiest nodes without a multi-node job."""
    N = len(free)
    if r <= G:
        fits = [n for n in range(N) if free[n] >= r]
        if fits:
            n = min(fits, key=lambda n: (free[n], n))
            return tuple(r if i == n else 0 for i in range(N))
    cand = [n for n in range(N) if free[n] > 0 and not multi[n]]
    if sum(free[n] for n in cand) < r:
        return None
    out = [0] * N
    rem, used = r, 0
    while rem > 0:
        tail = [n for n in cand if free[n] >= rem]
        n = min(tail, key=lambda n: (free[n], n)) if tail else max(cand, key=lambda n: (free[n], -n))
        take = min(free[n], rem)
        out[n] = take
        rem -= take
        cand.remove(n)
        used += 1
    return tuple(out) if used <= max_nodes else None


def _local_search(problem: Problem, alloc: Alloc) -> Alloc:
    jobs, G, N = problem.jobs, problem.gpus_per_node, problem.nodes
    alloc = list(alloc)
    cost = [problem.cost(j, a) for j, a in enumerate(alloc)]
    cost_now = np.array(cost)
    vector = len(alloc) * N >= VECTOR_MIN  # price moves with numpy, caching a job's prices while it stays
    # cost(j, alloc[j] + one GPU on node n), filled when needed; rows kept on the problem per (job,
    # allocation) across the local searches of one solve (a row's prices depend on nothing else)
    rows = problem._gain_rows
    gain_cost = np.full((len(alloc), N), np.nan)
    if vector:
        for j, a in enumerate(alloc):
            row = rows.get((j, a))
            if row is None:
                row = rows[(j, a)] = _count_row(problem, j, a)
            gain_cost[j] = row
    used = [0] * N
    holders: list[list[int]] = [[] for _ in range(N)]  # each node's holders (ascending)
    for j, a in enumerate(alloc):
        for n, c in nonzero(a):
            used[n] += c
            holders[n].append(j)

    def spread(a: tuple[int, ...]) -> int:
        return len(nonzero(a))

    # each node's holders and multi-node holders, kept as moves apply; vector path: a job's
    # best single move (delta < -1e-12, the scan's order) kept while its allocation, the open nodes and
    # the nodes' multi-node holders stay (``stamp`` changes with either of the latter two)
    width = [spread(a) for a in alloc]  # nodes per job (a multi-node job: > 1)
    capped = np.array([sum(a) >= job.max_gpus for a, job in zip(alloc, jobs)])  # jobs that may not grow
    mcount = [sum(1 for k in holders[n] if width[k] > 1) for n in range(N)]
    single: list[tuple[int, float, tuple[int, ...] | None] | None] = [None] * len(alloc)
    stamp = 0  # (a kept move stamped PERMANENT holds until its job moves: no one-GPU move of it gains)
    back_cost = problem.current_costs()  # cost(j, jobs[j].current)
    lose_delta: list[dict[int, float]] = [{} for _ in alloc]  # job -> node -> cost change of one GPU fewer there

    def multi_owner(n: int, skip: int) -> bool:
        """Does a multi-node job other than ``skip`` hold node ``n``?"""
        return mcount[n] - (width[skip] > 1 and alloc[skip][n] > 0) > 0

    def pair_allowed(k: int, j: int, n: int) -> bool:
        """Job ``k`` gives one GPU on node ``n`` to job ``j`` (node loads stay): j's cap and node count,
        and no node of a multi-node ``j`` holds another multi-node job (k as it would be)."""
        aj, ak = alloc[j], alloc[k]
        j_width = width[j] + (aj[n] == 0)
        if capped[j] or j_width > problem.max_nodes_per_job:
            return False
        if j_width == 1:
            return True
        k_multi_after = width[k] - (ak[n] == 1) > 1
        for m in [m for m, _ in nonzero(aj)] + ([n] if aj[n] == 0 else []):
            c = mcount[m] - (width[j] > 1 and aj[m] > 0) - (width[k] > 1 and ak[m] > 0)
            if c + (k_multi_after and ak[m] - (m == n) > 0) > 0:
                return False
        return True

    def best_single(j: int, a: tuple[int, ...], open_list: list[int]) -> tuple[int, float, tuple[int, ...] | None]:
        """Job ``j``'s lowest allowed one-GPU move below the search's threshold (first on ties), stamped
        PERMANENT where no move of ``j`` from ``a`` can gain whatever the other jobs hold."""
        if (j, a) in problem._no_gain:
            return PERMANENT, np.inf, None
        if jobs[j].by_count and _count_floor(problem, j, a) - cost[j] >= -1e-12:
            problem._no_gain.add((j, a))  # no move can gain, whatever the other jobs hold
            return PERMANENT, np.inf, None  # (most fixed-duration jobs)
        moves = _single_moves(problem, j, a, cost[j], open_list, gain_cost[j], problem._move_rows.setdefault((j, a), {}))
        rows[(j, a)] = gain_cost[j].copy()  # what it priced, for the next local search
        if not moves:
            return stamp, np.inf, None
        block = N + 2
        for delta, index in moves:  # the scan's order: lowest, then first
            n, code = divmod(index, block)  # +1 on n (code 0), -1 on n (1), -1 on n and +1 on code - 2
            new = list(a)
            if code != 0:
                new[n] -= 1
            if code != 1:
                new[n if code == 0 else code - 2] += 1
            new = tuple(new)
            if allowed(j, new):
                return stamp, float(delta), new
        return stamp, np.inf, None

    def allowed(j: int, new: tuple[int, ...]) -> bool:
        """Job ``j`` moved to ``new``: its cap and node count, node loads, and (multi-node) no node of
        it holding another multi-node job."""
        held = nonzero(new)
        if sum(new) > jobs[j].max_gpus or len(held) > problem.max_nodes_per_job:
            return False
        a = alloc[j]
        if any(used[n] + c - a[n] > G for n, c in held if c > a[n]):
            return False  # (a node the job leaves or shrinks on only gets lighter)
        return len(held) == 1 or not any(multi_owner(n, j) for n, _ in held)

    def takeover_allowed(moves: list[tuple[int, tuple[int, ...]]]) -> bool:
        """Job ``moves[0]`` grows on one node whose other holders (the rest of ``moves``) leave it:
        node loads fit, the grown job's cap and node count, and no node of it holds another
        multi-node job."""
        j, new = moves[0]
        held = nonzero(new)
        if len(held) > problem.max_nodes_per_job or sum(new) > jobs[j].max_gpus:
            return False
        for n, _ in held:
            if used[n] + sum(b[n] - alloc[k][n] for k, b in moves) > G:
                return False
        if len(held) == 1:
            return True
        for n, _ in held:  # multi-node holders of n other than j, the evicted ones as they would be
            others = mcount[n] - (width[j] > 1 and alloc[j][n] > 0)
            for k, b in moves[1:]:
                others += (b[n] > 0 and spread(b) > 1) - (alloc[k][n] > 0 and width[k] > 1)
            if others > 0:
                return False
        return True

    while True:
        best = (-1e-12, None)
        open_list = [n for n in range(N) if used[n] < G]
        for j in range(len(alloc)):  # one job: back to its allocation, +1 GPU, -1 GPU, or one GPU moved
            a = alloc[j]
            if a != jobs[j].current:
                delta = back_cost[j] - cost[j]
                if delta < best[0] and allowed(j, jobs[j].current):
                    best = (delta, [(j, jobs[j].current)])
            if not vector:  # small problems: the plain scan (numpy's overhead would dominate)
                for new in _scan_moves(a, used, G):
                    delta = problem.cost(j, new) - cost[j]
                    if delta < best[0] and allowed(j, new):
                        best = (delta, [(j, new)])
                continue
            kept = single[j]
            if kept is None or kept[0] != stamp and kept[0] != PERMANENT:
                kept = single[j] = best_single(j, a, open_list)
            if kept[1] < best[0]:  # the first allowed move below best, as the scan finds it
                best = (kept[1], [(j, kept[2])])
        lows = None  # per node: the job with the lowest +1 GPU gain there, that gain and the second lowest
        for n in range(N):  # one GPU from a holder k of node n to a job j (every j for each k)
            on_n = holders[n]
            if not on_n:
                continue
            if not vector:
                for k in on_n:
                    ak = alloc[k]
                    lose = ak[:n] + (ak[n] - 1,) + ak[n + 1:]
                    d_lose = problem.cost(k, lose) - cost[k]
                    for j in range(len(alloc)):
                        if j != k:
                            aj = alloc[j]
                            gain = aj[:n] + (aj[n] + 1,) + aj[n + 1:]
                            delta = d_lose + problem.cost(j, gain) - cost[j]
                            if delta < best[0] and pair_allowed(k, j, n):
                                best = (delta, [(k, lose), (j, gain)])
                continue
            if lows is None:
                lows = _pair_bounds(problem, alloc, holders, gain_cost, cost_now, capped, rows)
            col = gain_cost[:, n]
            first, low, second = lows[0][n], lows[1][n], lows[2][n]
            for k in on_n:
                d_lose = lose_delta[k].get(n)
                if d_lose is None:
                    ak = alloc[k]
                    d_lose = lose_delta[k][n] = problem.cost(k, ak[:n] + (ak[n] - 1,) + ak[n + 1:]) - cost[k]
                if d_lose + (second if k == first else low) >= best[0] + BOUND_MARGIN:
                    continue
                ak = alloc[k]
                lose = ak[:n] + (ak[n] - 1,) + ak[n + 1:]
                delta = (d_lose + col) - cost_now  # as d_lose + cost(j, gain) - cost[j], per j
                delta[k] = np.inf
                delta[capped] = np.inf
                cand = (delta < best[0]).nonzero()[0]  # (1-d: flatnonzero without its wrappers)
                # the scan's answer: the lowest allowed delta, the first j on ties
                for j in cand[np.lexsort((cand, delta[cand]))].tolist():
                    if pair_allowed(k, j, n):
                        aj = alloc[j]
                        best = (float(delta[j]), [(k, lose), (j, aj[:n] + (aj[n] + 1,) + aj[n + 1:])])
                        break
        if best[1] is None:  # wider moves only where single-GPU moves are exhausted
            evicted = None
            for j in range(len(alloc)):
                a = alloc[j]
                if sum(a):  # the same number of GPUs in another shape, on free GPUs or its own
                    free = multi = None
                    shapes = candidate_shapes(sum(a), G, problem.max_nodes_per_job)
                    if jobs[j].by_count and shapes and problem.moved_cost(j, shapes[0]) - cost[j] >= best[0]:
                        shapes = ()  # a by-count job: one price for every shape, and it does not gain
                    for shape in shapes:
                        if problem.moved_cost(j, shape) - cost[j] < best[0]:
                            if free is None:
                                free = [G - used[n] + a[n] for n in range(N)]
                                multi = [multi_owner(n, j) for n in range(N)]
                            new = _place_shape(free, multi, shape)
                            if new is not None and new != a and problem.cost(j, new) - cost[j] < best[0]:
                                best = (problem.cost(j, new) - cost[j], [(j, new)])
                room = jobs[j].max_gpus - sum(a)
                nodes = range(N) if room > 0 else ()
                if vector and room > 0 and jobs[j].by_count:
                    if evicted is None:
                        evicted = _evict_costs(problem, alloc, cost, holders)
                    nodes = _takeover_nodes(problem, j, a, room, cost[j], used, evicted, best[0])
                for n in nodes:  # take a whole node: its free GPUs, evicting its other holders
                    take = min(G - a[n], room)
                    if take <= 0 or take == 1 and used[n] < G:
                        continue  # nothing to take, or a single-GPU add (above)
                    new = a[:n] + (a[n] + take,) + a[n + 1:]
                    on_n = holders[n]
                    evict = [] if take <= G - used[n] else [k for k in on_n if k != j]
                    moves = [(j, new)] + [(k, alloc[k][:n] + (0,) + alloc[k][n + 1:]) for k in evict]
                    delta = sum(problem.cost(k, b) - cost[k] for k, b in moves)
                    if delta < best[0] and takeover_allowed(moves):
                        best = (delta, moves)
        if best[1] is None:
            return alloc
        before = list(mcount)
        for j, new in best[1]:
            old = alloc[j]
            new_width = spread(new)
            for n in range(N):
                used[n] += new[n] - old[n]
                if (old[n] > 0) != (new[n] > 0):
                    if new[n]:
                        bisect.insort(holders[n], j)
                    else:
                        holders[n].remove(j)
                mcount[n] += (new_width > 1 and new[n] > 0) - (width[j] > 1 and old[n] > 0)
            single[j] = None
            lose_delta[j] = {}
            width[j], capped[j] = new_width, sum(new) >= jobs[j].max_gpus
            alloc[j] = new
            cost[j] = cost_now[j] = problem.cost(j, new)
            if vector:
                row = rows.get((j, new))
                gain_cost[j] = _count_row(problem, j, new) if row is None else row
        if vector and (mcount != before or [n for n in range(N) if used[n] < G] != open_list):
            stamp += 1  # the open nodes or multi-node holders changed: every kept best move is stale


def _count_row(problem: Problem, j: int, a: tuple[int, ...]) -> np.ndarray:
    """cost(j, a + one GPU on node n) for every n, for a job priced by its GPU count (``by_count``):
    one price for every node, but for the node (if any) that makes it its current allocation (no
    restart factor there); unknown (nan, priced when needed) for other jobs."""
    N = len(a)
    row = np.full(N, np.nan)
    if not problem.jobs[j].by_count:
        return row
    current = problem.jobs[j].current
    back = -1  # the node where one GPU more makes ``a`` the current allocation (one GPU short on one node)
    if sum(current) == sum(a) + 1:
        diff = [n for n in range(N) if a[n] != current[n]]
        if len(diff) == 1:
            back = diff[0]
    other = 0 if back != 0 else (1 if N > 1 else None)
    if other is not None:
        row[:] = problem.cost(j, a[:other] + (a[other] + 1,) + a[other + 1:])
    if back >= 0:
        row[back] = problem.cost(j, current)
    return row


def _pair_bounds(problem: Problem, alloc: Alloc, holders: list[list[int]], gain_cost: np.ndarray,
                 cost_now: np.ndarray, capped: np.ndarray, rows: dict) -> tuple[list[int], list[float], list[float]]:
    """Per node n: the job whose gain ``cost(j, alloc[j] + one GPU on n) - cost[j]`` is lowest (the first
    on ties; jobs at their cap excluded), that gain and the second lowest: they bound every pair move
    onto n. Prices not known yet are filled first on the nodes with holders (except for a node's sole
    holder), into ``gain_cost`` and the kept ``rows``."""
    N = problem.nodes
    for n in np.flatnonzero(np.isnan(gain_cost).any(axis=0)).tolist():
        on_n = holders[n]
        if not on_n:
            continue
        col = gain_cost[:, n]
        for j in np.flatnonzero(np.isnan(col)).tolist():
            if on_n != [j]:
                aj = alloc[j]
                col[j] = problem.cost(j, aj[:n] + (aj[n] + 1,) + aj[n + 1:])
                rows.setdefault((j, aj), np.full(N, np.nan))[n] = col[j]
    gains = gain_cost - cost_now[:, None]
    gains[np.isnan(gains) | capped[:, None]] = np.inf  # (a job at its cap takes no GPU)
    first = np.argmin(gains, axis=0)
    nodes = np.arange(N)
    low = gains[first, nodes]
    gains[first, nodes] = np.inf
    second = gains.min(axis=0)
    return first.tolist(), low.tolist(), second.tolist()


def _evict_costs(problem: Problem, alloc: Alloc, cost: list[float], holders: list[list[int]]):
    """Per node: each holder's cost change when it leaves the node, and their sum."""
    per_node = [{k: problem.cost(k, alloc[k][:n] + (0,) + alloc[k][n + 1:]) - cost[k] for k in on_n}
                for n, on_n in enumerate(holders)]
    return per_node, np.array([sum(d.values()) for d in per_node])


def _takeover_nodes(problem: Problem, j: int, a: tuple[int, ...], room: int, cost_j: float, used: list[int],
                    evicted, below: float) -> list[int]:
    """The nodes where by-count job ``j`` taking the node (``take`` GPUs, evicting the other holders
    if it needs their GPUs) may cost less than ``below``: a bound up to rounding (BOUND_MARGIN), so
    the local search prices exactly the same moves that can win."""
    G, N = problem.gpus_per_node, len(a)
    per_node, total = evicted
    have, free = np.array(a), G - np.array(used)
    take = np.minimum(G - have, room)
    ok = (take > 0) & ~((take == 1) & (free > 0))
    if not ok.any():
        return []
    current = problem.jobs[j].current
    diff = [n for n in range(N) if a[n] != current[n]]
    back = diff[0] if len(diff) == 1 and current[diff[0]] - a[diff[0]] == take[diff[0]] else -1
    gain = np.full(N, np.inf)
    for t in np.unique(take[ok]).tolist():
        at = np.flatnonzero(ok & (take == t)).tolist()
        n = next((n for n in at if n != back), None)
        if n is not None:
            gain[at] = problem.cost(j, a[:n] + (a[n] + t,) + a[n + 1:]) - cost_j
    if back >= 0 and ok[back]:
        gain[back] = problem.cost(j, current) - cost_j
    own = np.array([per_node[n].get(j, 0.0) if a[n] else 0.0 for n in range(N)])
    bound = gain + np.where(take > free, total - own, 0.0)
    return np.flatnonzero(ok & (bound < below + BOUND_MARGIN)).tolist()


def _count_floor(problem: Problem, j: int, a: tuple[int, ...]) -> float:
    """No one-GPU move of a by-count job ``j`` from ``a`` (+1 within its cap, -1, or one GPU moved)
    costs less than this: the moved cost at each count reached, and its current allocation's cost."""
    job, r, G = problem.jobs[j], sum(a), problem.gpus_per_node
    values = [problem.cost(j, job.current)] if abs(sum(job.current) - r) <= 1 else []
    if r + 1 <= job.max_gpus:
        values.append(problem.moved_cost(j, min_node_shapes(r + 1, G)[0]))
    if r >= 1:
        values.append(problem.moved_cost(j, min_node_shapes(r, G)[0]))
        values.append(problem.moved_cost(j, min_node_shapes(r - 1, G)[0]) if r > 1 else 1.0 / EPS)
    return min(values, default=np.inf)


def _scan_moves(a: tuple[int, ...], used: list[int], G: int) -> list[tuple[int, ...]]:
    """A job's one-GPU moves in scan order: per node n, +1 on n (if it has room), -1 on n, -1 on n
    and +1 on each other node with room."""
    N, cands = len(a), []
    for n in range(N):
        if used[n] < G:
            cands.append(a[:n] + (a[n] + 1,) + a[n + 1:])
        if a[n]:
            less = a[:n] + (a[n] - 1,) + a[n + 1:]
            cands.append(less)
            cands.extend(less[:m] + (less[m] + 1,) + less[m + 1:] for m in range(N) if m != n and used[m] < G)
    return cands


def _single_moves(problem: Problem, j: int, a: tuple[int, ...], cost_j: float, open_list: list[int],
                  add: np.ndarray, other: dict[int, np.ndarray]) -> list[tuple[float, int]]:
    """Job ``j``'s one-GPU moves that lower its cost by more than 1e-12, as (delta, scan index)
    sorted: the local search's scan order is, for each node n (index n x (nodes + 2)), +1 on n (+0;
    if n has room and the job is under its cap), -1 on n (+1), -1 on n and +1 on each other node m
    with room (``open_list``; +2 + m). Prices are filled into ``add`` / ``other`` (cached while the job stays) only
    where needed; a by-count job's -1/+1 prices come as a row (``_count_row``)."""
    N = len(a)
    block = N + 2  # scan index: per node, +1, -1, then -1/+1 to each m
    out = []
    if sum(a) < problem.jobs[j].max_gpus:
        for n in open_list:
            price = add[n]
            if price != price:  # nan: not priced yet
                price = add[n] = problem.cost(j, a[:n] + (a[n] + 1,) + a[n + 1:])
            if price - cost_j < -1e-12:
                out.append((price - cost_j, n * block))
    for n, _ in nonzero(a):
        less = a[:n] + (a[n] - 1,) + a[n + 1:]
        row = other.get(n)
        if row is None:
            row = other[n] = np.concatenate(([np.nan], _count_row(problem, j, less)))
        if row[0] != row[0]:
            row[0] = problem.cost(j, less)
        if row[0] - cost_j < -1e-12:
            out.append((row[0] - cost_j, n * block + 1))
        for m in open_list:
            if m != n:
                price = row[1 + m]
                if price != price:
                    price = row[1 + m] = problem.cost(j, less[:m] + (less[m] + 1,) + less[m + 1:])
                if price - cost_j < -1e-12:
                    out.append((price - cost_j, n * block + 2 + m))
    out.sort()
    return out
