"""The linear programs behind the ``gavel`` policy (Gavel, OSDI'20 §3.1, §4.1, §4.2), solved with
scipy's HiGHS: the model ``scipy.optimize.milp`` would pass it with no integer variables, i.e. an LP,
handed to scipy's HiGHS bindings directly (``_Model``: same model and options, so the same answer,
without ``milp``'s Python-side checks and result conversion).

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
so a second LP keeps ``s`` at its optimum (within ``tolerance``, 1e-6 relative by default) and
maximises the GPU-weighted total throughput ``Σ_j gpus_j · thr_j``: a lexicographic refinement that is
ours, not Gavel's (its basic LP leaves the choice to the solver, ECOS, an interior-point method that
gives equal jobs equal shares; its water-filling variant is the paper's answer).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from itertools import chain

import numpy as np


@functools.cache
def _highs():
    """scipy's HiGHS bindings, the ones ``milp`` itself calls (private to scipy; None: another layout,
    ``milp`` is the fallback) and the options every solve passes; imported at the first solve, so that
    loading the policy registry does not import scipy.optimize (0.5 s in every process)."""
    try:
        from scipy.optimize._highspy import _core as highs
    except ImportError:  # pragma: no cover - another scipy layout
        return None
    options = highs.HighsOptions()  # passOptions copies them: one object serves every solve
    options.log_to_console = False  # milp's only option (``disp=False``)
    return highs, options


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
    """``combos``: tuples of job positions; ``rates``: the matching tuples of normalised throughputs.
    The entries are flattened with ``chain`` and numpy (the same values, in the same order, as a
    loop over combinations and members; a combination's GPUs are its members' maximum, exactly)."""
    job_gpus = np.asarray(job_gpus, dtype=float)
    sizes = np.fromiter(map(len, combos), dtype=np.int64, count=len(combos))
    entry_job = np.fromiter(chain.from_iterable(combos), dtype=np.int64, count=int(sizes.sum()))
    entry_rate = np.fromiter(chain.from_iterable(rates), dtype=float, count=len(entry_job))
    entry_combo = np.repeat(np.arange(len(combos), dtype=np.int64), sizes)
    starts = np.cumsum(sizes) - sizes
    combo_gpus = np.maximum.reduceat(job_gpus[entry_job], starts) if len(combos) else np.zeros(0)  # unequal: the larger
    return Problem(job_gpus, combo_gpus, entry_combo, entry_job, entry_rate, int(capacity))


def solve(problem: Problem, objective: str, remaining=None, tolerance: float = STAGE_TOLERANCE) -> Solution:
    """Solve ``objective`` (see the module docstring); ``remaining`` (solo seconds per job) for makespan;
    ``tolerance``: how far below its optimum (relative) the second stage may push ``s``."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown gavel objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if not 0 <= tolerance < 1:
        raise ValueError(f"gavel LP tolerance must be in [0, 1), got {tolerance!r}")
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
    model = _Model(_csc(rows, cols, vals, C + 1), np.concatenate([np.ones(n), [problem.capacity], np.zeros(n)]), C + 1)
    lower, upper = np.zeros(C + 1), np.ones(C + 1)
    upper[aux] = np.inf
    first = np.zeros(C + 1)
    first[aux] = -1.0
    x1, fun = model.solve(first, lower, upper)
    if x1 is None:
        raise LPError(f"gavel LP (stage 1, {objective}) failed: {fun}")
    best = float(-fun)
    lower[aux] = upper[aux] = best * (1 - tolerance)
    second = np.zeros(C + 1)
    second[:C] = -np.bincount(ec, weights=problem.job_gpus[ej] * er, minlength=C)
    x2, _ = model.solve(second, lower, upper)
    x = x2[:C] if x2 is not None else x1[:C]  # stage 2 only refines; fall back to stage 1
    return Solution(x=np.clip(x, 0.0, 1.0), value=best, seconds=time.perf_counter() - started)


class RepeatSolver:
    """:func:`solve` that remembers the last problem it solved. A re-solve of an identical problem
    (same objective, arrays and remaining times, compared exactly) returns the remembered solution:
    each solve hands HiGHS a fresh solver, the same model and the same options, so HiGHS, which is
    deterministic, would return the same ``x`` bit for bit. Gavel re-solves after any arrival or
    completion; a third of them on the Philly trace change nothing the LP sees (the jobs come and go
    outside the ``max_jobs_in_lp`` window). ``seconds`` of a repeat is the time of the comparison."""

    def __init__(self) -> None:
        self.last: tuple | None = None  # (problem, objective, remaining, tolerance, solution)

    def solve(self, problem: Problem, objective: str, remaining=None, tolerance: float = STAGE_TOLERANCE) -> Solution:
        started = time.perf_counter()
        remaining = None if remaining is None else np.asarray(remaining, dtype=float)
        if self.last is not None and self._same(problem, objective, remaining, tolerance):
            x, value = self.last[4].x, self.last[4].value
            return Solution(x=x, value=value, seconds=time.perf_counter() - started)
        solution = solve(problem, objective, remaining, tolerance)
        self.last = (problem, objective, remaining, tolerance, solution)
        return solution

    def _same(self, problem: Problem, objective: str, remaining, tolerance: float) -> bool:
        old, old_objective, old_remaining, old_tolerance, _ = self.last
        if objective != old_objective or old.capacity != problem.capacity or tolerance != old_tolerance:
            return False
        if (remaining is None) != (old_remaining is None) or (
                remaining is not None and not np.array_equal(remaining, old_remaining)):
            return False
        return all(np.array_equal(getattr(old, f), getattr(problem, f))
                   for f in ("job_gpus", "combo_gpus", "entry_combo", "entry_job", "entry_rate"))


def _csc(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, num_cols: int):
    """``(indptr, indices, data)`` of the matrix with the given (duplicate-free) entries, column-major
    with rows ascending in each column: the arrays ``csc_array(csr_matrix((vals, (rows, cols))))``
    holds, which ``milp`` passed to HiGHS (same model, same answer), sorted with numpy instead."""
    order = np.lexsort((rows, cols))
    indptr = np.zeros(num_cols + 1, dtype=np.int32)
    np.cumsum(np.bincount(cols, minlength=num_cols), out=indptr[1:])
    return indptr, rows[order].astype(np.int32), vals[order].astype(np.float64)


class _Model:
    """``min cost·x`` s.t. ``A x <= row_upper``, ``lower <= x <= upper``, for HiGHS. The LP is the one
    ``milp`` passes to HiGHS (the same arrays: costs, bounds, rows ``-inf <= A x <= row_upper``, the
    column-wise matrix, integrality all continuous; ``log_to_console`` off; a fresh solver per solve),
    so the answer is the same; it goes through the array form of scipy's ``passModel`` binding, which
    reads the numpy arrays without converting them to Python lists, and skips ``milp``'s input checks
    and its Python loop over the columns for bound duals, which we do not read."""

    def __init__(self, matrix, row_upper: np.ndarray, num_cols: int) -> None:
        self.matrix, self.row_upper, self.num_cols = matrix, row_upper, num_cols
        self.row_lower = np.full(len(row_upper), -np.inf)
        self.integrality = np.zeros(num_cols, dtype=np.int32)  # milp's integrality 0: continuous

    def solve(self, cost: np.ndarray, lower: np.ndarray, upper: np.ndarray):
        """``(x, objective)``, or ``(None, message)`` when HiGHS finds no optimum."""
        indptr, indices, data = self.matrix
        bindings = _highs()
        if bindings is None:  # pragma: no cover - the public route, same model
            from scipy.optimize import Bounds, LinearConstraint, milp
            from scipy.sparse import csc_array

            A = csc_array((data, indices, indptr), shape=(len(self.row_upper), self.num_cols))
            res = milp(cost, constraints=LinearConstraint(A, -np.inf, self.row_upper), bounds=Bounds(lower, upper))
            return (res.x, res.fun) if res.status == 0 else (None, res.message)
        highs, options = bindings
        solver = highs._Highs()
        if solver.passOptions(options) == highs.HighsStatus.kError:
            return None, "HiGHS rejected its options"
        status = solver.passModel(self.num_cols, len(self.row_upper), len(data), int(highs.MatrixFormat.kColwise),
                                  int(highs.ObjSense.kMinimize), 0.0, cost, lower, upper, self.row_lower,
                                  self.row_upper, indptr, indices, data, self.integrality)
        if status == highs.HighsStatus.kError:
            return None, "HiGHS rejected the model"
        if solver.run() == highs.HighsStatus.kError:
            return None, solver.modelStatusToString(solver.getModelStatus())
        status = solver.getModelStatus()
        if status != highs.HighsModelStatus.kOptimal:
            return None, solver.modelStatusToString(status)
        return np.array(solver.getSolution().col_value), solver.getInfo().objective_function_value


def effective_throughputs(problem: Problem, x: np.ndarray) -> np.ndarray:
    """Σ_c thr_j(c) X[c] per job (Gavel §3.1's effective throughput, normalised to solo = 1)."""
    return np.bincount(problem.entry_job, weights=problem.entry_rate * x[problem.entry_combo],
                       minlength=problem.num_jobs)
