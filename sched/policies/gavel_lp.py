"""The linear programs behind the ``gavel`` policy (Gavel, OSDI'20 §3.1, §4.1, §4.2), solved with
scipy's HiGHS through ``scipy.optimize.milp`` with no integer variables, i.e. an LP (``milp`` calls
HiGHS with less input checking than ``linprog``: ~2 ms less per solve).

A problem is a set of jobs and a set of *combinations*: each job alone, and pairs of jobs that
space-share the same GPUs (Gavel §3.1, "space sharing"; pairs only, of equal scale factor, or with
Gimbal's relaxation of different ones: a pair then holds the larger job's GPUs). The
variables are ``X[c]``, the fraction of wall time combination ``c`` runs, and one auxiliary ``s``:

- each job's time fractions sum to at most 1 (Gavel §3.1, constraint "Σ X ≤ 1" per job);
- ``Σ_c X[c] · gpus(c) ≤ G`` (Gavel §3.1, capacity; a pair holds its GPUs once);
- ``a_j · s ≤ v_j · Σ_c thr_j(c) X[c]`` for every job ``j``, where ``thr_j(c)`` is ``j``'s normalised
  throughput in ``c``: 1 alone, ``1/ξ_j`` paired (Gavel §3.1, effective throughput).

``max_min_fairness`` (Gavel §4.1, LAS with equal weights): ``a_j = 1``, ``v_j = gpus_j`` -- the
throughput is multiplied by the scale factor, as Gavel's policies do, so a k-GPU job is entitled to
1/k of a 1-GPU job's time (equal GPU share); maximise ``s``, the minimum.
``makespan`` (Gavel §4.2, min-makespan): ``a_j = remaining_j / max remaining``, ``v_j = 1``; maximising
``s`` maximises ``min_j thr_j / remaining_j`` = 1/T, the same optimum Gavel finds by binary search on T.

Both objectives leave ties (the max-min LP says nothing about capacity the minimum does not need),
so a second LP keeps ``s`` at its optimum (within 1e-6 relative) and maximises the GPU-weighted
total throughput ``Σ_j gpus_j · thr_j``: a lexicographic refinement that is ours, not Gavel's (its
basic LP leaves the choice to the solver; its water-filling variant is the paper's answer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix

OBJECTIVES = ("max_min_fairness", "makespan")
STAGE_TOLERANCE = 1e-6  # how far below its optimum the second stage may push s (relative)


@dataclass
class Problem:
    """Flattened combinations: entry ``e`` says job ``entry_job[e]`` runs at ``entry_rate[e]`` in
    combination ``entry_combo[e]``. ``job_gpus`` per job, ``combo_gpus`` per combination."""

    job_gpus: np.ndarray
    combo_gpus: np.ndarray
    entry_combo: np.ndarray
    entry_job: np.ndarray
    entry_rate: np.ndarray
    capacity: int

    @property
    def num_jobs(self) -> int:
        return len(self.job_gpus)

    @property
    def num_combos(self) -> int:
        return len(self.combo_gpus)


@dataclass
class Solution:
    x: np.ndarray  # time fraction per combination
    value: float  # optimal s (max-min: min GPU-weighted throughput; makespan: max remaining / T)
    seconds: float  # wall time of both LP stages


class LPError(RuntimeError):
    pass


def build_problem(job_gpus, combos, rates, capacity: int) -> Problem:
    """``combos``: tuples of job positions; ``rates``: the matching tuples of normalised throughputs."""
    entry_combo, entry_job, entry_rate = [], [], []
    for c, (members, member_rates) in enumerate(zip(combos, rates)):
        for j, r in zip(members, member_rates):
            entry_combo.append(c)
            entry_job.append(j)
            entry_rate.append(r)
    job_gpus = np.asarray(job_gpus, dtype=float)
    entry_job_arr = np.asarray(entry_job, dtype=np.int64)
    combo_gpus = np.array([max(job_gpus[j] for j in m) for m in combos], dtype=float)  # unequal: the larger
    return Problem(job_gpus, combo_gpus, np.asarray(entry_combo, np.int64), entry_job_arr,
                   np.asarray(entry_rate, float), int(capacity))


def solve(problem: Problem, objective: str, remaining=None) -> Solution:
    """Solve ``objective`` (see the module docstring); ``remaining`` (solo seconds per job) for makespan."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown gavel objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    started = time.perf_counter()
    n, C = problem.num_jobs, problem.num_combos
    if objective == "max_min_fairness":
        a = np.ones(n)
        v = problem.job_gpus
    else:
        rem = np.maximum(np.asarray(remaining, dtype=float), 1e-9)
        a = rem / rem.max()
        v = np.ones(n)
    ej, ec, er = problem.entry_job, problem.entry_combo, problem.entry_rate
    aux = C  # column of s
    rows = np.concatenate([ej, np.full(C, n), n + 1 + ej, n + 1 + np.arange(n)])
    cols = np.concatenate([ec, np.arange(C), ec, np.full(n, aux)])
    vals = np.concatenate([np.ones(len(ej)), problem.combo_gpus, -v[ej] * er, a])
    A = csr_matrix((vals, (rows, cols)), shape=(2 * n + 1, C + 1))
    rows_ub = LinearConstraint(A, -np.inf, np.concatenate([np.ones(n), [problem.capacity], np.zeros(n)]))
    lower, upper = np.zeros(C + 1), np.ones(C + 1)
    upper[aux] = np.inf
    first = np.zeros(C + 1)
    first[aux] = -1.0
    res = milp(first, constraints=rows_ub, bounds=Bounds(lower, upper))  # no integrality: an LP (HiGHS)
    if res.status != 0:
        raise LPError(f"gavel LP (stage 1, {objective}) failed: {res.message}")
    best = float(-res.fun)
    lower[aux] = upper[aux] = best * (1 - STAGE_TOLERANCE)
    second = np.zeros(C + 1)
    second[:C] = -np.bincount(ec, weights=problem.job_gpus[ej] * er, minlength=C)
    res2 = milp(second, constraints=rows_ub, bounds=Bounds(lower, upper))
    x = res2.x[:C] if res2.status == 0 else res.x[:C]  # stage 2 only refines; fall back to stage 1
    return Solution(x=np.clip(x, 0.0, 1.0), value=best, seconds=time.perf_counter() - started)


def effective_throughputs(problem: Problem, x: np.ndarray) -> np.ndarray:
    """Σ_c thr_j(c) X[c] per job (Gavel §3.1's effective throughput, normalised to solo = 1)."""
    return np.bincount(problem.entry_job, weights=problem.entry_rate * x[problem.entry_combo],
                       minlength=problem.num_jobs)
