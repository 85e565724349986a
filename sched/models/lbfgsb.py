"""Bounded L-BFGS as ``scipy.optimize.minimize(fun, x0, args, jac=True, method="L-BFGS-B", bounds=...)``
runs it with its default options, without the wrappers around scipy's L-BFGS-B routine (``setulb``):
the same calls of the routine, the same points evaluated and the same result, bit for bit, at a
fraction of the cost on the goodput fit's small problems (7 parameters, ~50 evaluations: the
wrappers cost more than the loss). Mirrors scipy 1.17's ``_minimize_lbfgsb`` loop (maxcor 10,
ftol 2.22e-9, gtol 1e-5, maxls 20, maxiter and maxfun 15000); with another scipy (another routine,
or another loop) it calls ``minimize`` itself. ``tests/test_lbfgsb.py`` checks it against ``minimize``
on the fit's own losses.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import scipy

SCIPY_LOOP = scipy.__version__.split(".")[:2] == ["1", "17"]  # the loop below is this scipy's

_MAXCOR = 10
_FACTR = 2.2204460492503131e-09 / np.finfo(float).eps  # minimize's ftol as the routine's factr
_PGTOL = 1e-5
_MAXLS = 20
_MAXITER = 15000
_MAXFUN = 15000
_FG, _NEW_X = 3, 1  # the routine's task codes: evaluate f and g at x; a new iterate


class Minimum(NamedTuple):
    """What ``minimize`` returns that the fit reads: the last point and the last value evaluated."""

    x: np.ndarray
    fun: float


def minimize_lbfgsb(fun: Callable[..., tuple[float, np.ndarray]], x0: np.ndarray, args: tuple,
                    lower: np.ndarray, upper: np.ndarray) -> Minimum:
    """Minimise ``fun(x, *args) -> (value, gradient)`` within ``[lower, upper]`` (``inf``: no bound)
    from ``x0`` (clipped into the bounds), as scipy's ``minimize`` does; ``fun`` must not change ``x``."""
    lower, upper = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    x = np.asarray(x0, dtype=float).ravel()
    n = len(x)
    if lower.shape != (n,) or upper.shape != (n,) or np.any(upper < lower):
        raise ValueError(f"bounds must be {n} pairs with lower <= upper (got {lower}, {upper})")
    if not SCIPY_LOOP:
        from scipy.optimize import minimize

        result = minimize(fun, x, args=args, jac=True, method="L-BFGS-B", bounds=list(zip(lower, upper)))
        return Minimum(result.x, result.fun)
    x = np.clip(x, lower, upper)
    has_lower, has_upper = np.isfinite(lower), np.isfinite(upper)
    nbd = np.where(has_lower, np.where(has_upper, 2, 1), np.where(has_upper, 3, 0)).astype(np.int32)
    low_bnd, upper_bnd = np.where(has_lower, lower, 0.0), np.where(has_upper, upper, 0.0)
    m = _MAXCOR
    wa = np.zeros(2 * m * n + 5 * n + 11 * m * m + 8 * m)
    iwa = np.zeros(3 * n, dtype=np.int32)
    task, ln_task = np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int32)
    lsave, isave, dsave = np.zeros(4, dtype=np.int32), np.zeros(44, dtype=np.int32), np.zeros(29)
    # scipy evaluates at the start once, then again only where the routine asks at another point (equal
    # floats: as its ``np.array_equal``, -0.0 equals 0.0 and nan equals nothing)
    evaluated = x.tolist()
    value, grad = fun(x.copy(), *args)
    nfev = 1
    f, g = np.array(0.0), np.zeros(n)
    iterations = 0
    from scipy.optimize import _lbfgsb  # here, not at the top: loading the policies imports no scipy.optimize

    setulb = _lbfgsb.setulb
    while True:
        setulb(m, x, low_bnd, upper_bnd, nbd, f, g, _FACTR, _PGTOL, wa, iwa, task, lsave, isave, dsave, _MAXLS,
               ln_task)
        if task[0] == _FG:
            point = x.tolist()
            if point != evaluated:
                evaluated = point
                value, grad = fun(x.copy(), *args)
                nfev += 1
            f, g = value, np.array(grad, dtype=float)  # (scipy passes the routine a copy of the gradient)
        elif task[0] == _NEW_X:
            iterations += 1
            if iterations >= _MAXITER:
                task[0], task[1] = 5, 504
            elif nfev > _MAXFUN:
                task[0], task[1] = 5, 502
        else:
            return Minimum(x, f)
