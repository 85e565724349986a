"""``minimize_lbfgsb`` (sched/models/lbfgsb.py) against ``scipy.optimize.minimize(method="L-BFGS-B",
jac=True)``: the same point and value, bit for bit, on the goodput fit's losses and on bounded test
functions of every bound kind (the fit's results, and so every learned replay's digest, rest on it)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy
from scipy.optimize import minimize

from schedlab.sched.models.goodput_fit import _LOWER, _MAX_GAMMA, _SMOOTH, _START, _fit_data, _objective
from schedlab.sched.models import lbfgsb
from schedlab.sched.models.lbfgsb import minimize_lbfgsb


def scipy_minimum(fun, x0, args, lower, upper) -> tuple[np.ndarray, float]:
    result = minimize(fun, x0, args=args, jac=True, method="L-BFGS-B", bounds=list(zip(lower, upper)))
    return result.x, result.fun


def noisy_history(rng: np.random.Generator, n: int):
    """``n`` configurations (nodes, GPUs, micro-batch) with noisy log pass and step times."""
    replicas = rng.integers(1, 17, size=n).astype(float)
    nodes = np.minimum(replicas, rng.integers(1, 5, size=n)).astype(float)
    micro = rng.choice([8.0, 16.0, 32.0, 64.0, 128.0], size=n)
    pass_time = 0.02 + 0.003 * micro * rng.uniform(0.8, 1.2, size=n)
    step = pass_time + np.where(replicas > 1, 0.05 + 0.01 * replicas, 0.0) * rng.uniform(0.7, 1.3, size=n)
    return _fit_data(nodes, replicas, micro, np.log(pass_time), np.log(step))


@pytest.mark.parametrize("seed", range(12))
def test_the_fit_loss_minimised_as_scipy_does(seed):
    rng = np.random.default_rng(seed)
    data = noisy_history(rng, int(rng.integers(1, 21)))
    mask = np.ones(7, dtype=bool)
    mask[rng.choice(6, size=int(rng.integers(0, 5)), replace=False)] = False  # gamma always free, as in a fit
    fixed = np.array(_START)
    lower = np.array([_LOWER] * 6 + [1.0])[mask]
    upper = np.array([np.inf] * 6 + [_MAX_GAMMA])[mask]
    for args in ((mask, fixed, data, _SMOOTH), (mask, fixed, data)):
        for x0 in (fixed[mask], rng.uniform(0.0, 0.5, size=mask.sum())):  # a start below a bound: clipped
            ours = minimize_lbfgsb(_objective, x0, args, lower, upper)
            x, fun = scipy_minimum(_objective, x0, args, lower, upper)
            assert np.array_equal(ours.x, x) and ours.fun == fun


def rosenbrock(x: np.ndarray) -> tuple[float, np.ndarray]:
    value = float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))
    grad = np.zeros_like(x)
    grad[:-1] = -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    grad[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return value, grad


@pytest.mark.parametrize("own_loop", [True, False])
def test_every_kind_of_bound_as_scipy(own_loop, monkeypatch):
    """Unbounded, lower only, both, upper only; a start outside its bounds; with scipy's loop or its own
    (another scipy version: minimize itself)."""
    if own_loop and not lbfgsb.SCIPY_LOOP:  # the copied loop is scipy 1.17's; another scipy runs minimize itself
        pytest.skip(f"scipy {scipy.__version__}: minimize_lbfgsb falls back to minimize (its loop mirrors 1.17)")
    monkeypatch.setattr(lbfgsb, "SCIPY_LOOP", own_loop)
    lower = np.array([-np.inf, 0.5, -1.0, -np.inf])
    upper = np.array([np.inf, np.inf, 0.8, 2.0])
    x0 = np.array([-1.2, 0.0, 1.5, 3.0])
    ours = minimize_lbfgsb(rosenbrock, x0, (), lower, upper)
    x, fun = scipy_minimum(rosenbrock, x0, (), lower, upper)
    assert np.array_equal(ours.x, x) and ours.fun == fun
    assert ours.x[2] <= 0.8


def test_bounds_checked():
    with pytest.raises(ValueError, match="lower <= upper"):
        minimize_lbfgsb(rosenbrock, np.zeros(2), (), np.array([0.0, 1.0]), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="2 pairs"):
        minimize_lbfgsb(rosenbrock, np.zeros(2), (), np.zeros(3), np.ones(3))
