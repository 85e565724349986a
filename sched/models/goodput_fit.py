"""A job's learned goodput: Pollux's throughput model fitted online to what the job has run
(Pollux OSDI'21 §4.1; its simulator study §5.3, petuum/adaptdl ``osdi21-artifact`` ``simulator/``).

The throughput model (§4.1): one pass of a micro-batch ``m`` computes in
``T_grad = alpha_grad + beta_grad m``; gradient synchronisation on ``K`` GPUs takes
``T_sync = alpha_sync + beta_sync max(K - 2, 0)``, with the ``node`` pair of parameters when the
GPUs span several nodes, the ``local`` pair on one node, nothing on one GPU; an optimiser step
overlaps the two, ``(T_grad^gamma + T_sync^gamma)^(1/gamma)``, and each of ``a`` accumulation passes
adds ``T_grad``. Statistical efficiency at global batch ``B`` comes from the job's last measured
gradient statistics (the gradient noise scale): ``(var + sqr) / (var B0 / B + sqr)``.

What the study's agent does, and this module with it: a job starts from the prior (no fit: linear
speed-up and the smallest batch ``max(B0, min per-GPU batch x GPUs)``); every time it runs a
configuration (nodes, GPUs, micro-batch) it has not run before, it records the measured pass time and
synchronisation time and refits all seven parameters by bounded L-BFGS on the root-mean-square error
of the log pass time plus that of the log step time, with a small pull of ``gamma`` towards 1 and of
each retrogression term towards 0; parameters no observation can inform stay fixed (``alpha_grad`` at
half the pass time when only one micro-batch was seen, a link's pair at its lower bound when no
configuration used that link, both ``beta_sync`` when no configuration had more than 2 GPUs), and
without a multi-node observation the ``node`` pair is held at least 1.1x the ``local`` one.

Ours: the study starts L-BFGS from one fixed point, and its square roots have a kink where a term's
errors all vanish, where the search can stop far from the minimum (on exact synthetic histories up to
10% off in the pass time and 25-49% in the iteration time). We also start from least-squares lines
(``_least_squares_start``) with the kink rounded off, polish with the study's loss, and keep the fit
of lower loss: never worse than the study's own start in its own loss.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from threadpoolctl import ThreadpoolController

from schedlab.sched.models.lbfgsb import minimize_lbfgsb

if TYPE_CHECKING:
    from schedlab.sched.models.goodput import GoodputModel

Values = Sequence[float] | np.ndarray

_LOWER = 1e-8  # the lower bound of every alpha and beta (a tiny slack above 0, as the study)
_MAX_GAMMA = 10.0  # gamma in [1, 10]: 10 is close enough to max(T_grad, T_sync)
_START = (1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3)  # the study's starting point of each fit
_GAMMA_PULL = 1e-3  # weight of (gamma - 1)^2
_RETROGRESSION_PULL = 1e-2  # weight of (beta / alpha)^2 for each link
_NODE_OVER_LOCAL = 1.1
_SMOOTH = 1e-2  # our second start: the kink rounded off at this error, then the study's loss  # without a multi-node observation, node sync >= 1.1 x local sync


class ThroughputParams(NamedTuple):
    """Pollux's system throughput parameters (§4.1), in seconds."""

    alpha_grad: float
    beta_grad: float
    alpha_sync_node: float
    beta_sync_node: float
    alpha_sync_local: float
    beta_sync_local: float
    gamma: float


def sync_time(params: ThroughputParams | np.ndarray, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    """Predicted gradient synchronisation time: the node link if ``nodes > 1``, else the local one if
    ``replicas > 1``, else (one GPU) ``_LOWER (1 + max(K - 2, 0))``, as the study."""
    p = np.asarray(params, dtype=float)
    extra = np.maximum(replicas - 2, _LOWER)
    multi, local = nodes > 1, (nodes <= 1) & (replicas > 1)
    alpha = np.where(multi, p[2], np.where(local, p[4], _LOWER))
    beta = np.where(multi, p[3], np.where(local, p[5], _LOWER))
    return alpha + beta * extra


def iteration_time(params: ThroughputParams, nodes: Values, replicas: Values, micro: Values,
                   accum: Values) -> np.ndarray:
    """Predicted seconds per iteration: ``a`` accumulation passes plus one overlapped optimiser step."""
    grad = params.alpha_grad + params.beta_grad * np.asarray(micro, dtype=float)
    sync = sync_time(params, np.asarray(nodes), np.asarray(replicas))
    g = params.gamma
    return np.asarray(accum, dtype=float) * grad + (grad ** g + sync ** g) ** (1.0 / g)


class _FitData(NamedTuple):
    """A fit's observations (n configurations) as the loss reads them; nothing here depends on a parameter.
    The loss computes pass and sync times as one array of 2n times, ``alpha + beta x`` per element."""

    n: int
    index: np.ndarray  # (4n,) each time's alpha, then its beta, in (alpha_grad, alpha_sync_node,
    #                    alpha_sync_local, _LOWER, the four betas): pass times read 0 and 4; sync times their link's
    x: np.ndarray  # (2n,) what beta multiplies: micro-batches, then max(K - 2, _LOWER)
    log_grad_obs: np.ndarray
    log_step_obs: np.ndarray
    factors: np.ndarray  # (6, n) the gradient's per-observation factors: 1, micro-batch (d pass time),
    #                      multi, multi x extra, local, local x extra (d sync time); multi / local: 1.0 where the
    #                      configuration uses the node / local link, else 0.0


def _fit_data(nodes: np.ndarray, replicas: np.ndarray, micro: np.ndarray, log_grad_obs: np.ndarray,
              log_step_obs: np.ndarray) -> _FitData:
    """The loss's data: the observations (``log_*_obs``: log pass and step times) and their links."""
    n = len(micro)
    multi, local = nodes > 1, (nodes <= 1) & (replicas > 1)
    link = np.where(multi, 1, np.where(local, 2, 3))  # alpha_sync_node, alpha_sync_local, or _LOWER (one GPU)
    alphas = np.concatenate((np.zeros(n, dtype=np.intp), link))
    extra = np.maximum(replicas - 2, _LOWER)
    multi, local = multi.astype(float), local.astype(float)
    return _FitData(n, np.concatenate((alphas, alphas + 4)), np.concatenate((micro, extra)), log_grad_obs,
                    log_step_obs, np.stack((np.ones(n), micro, multi, multi * extra, local, local * extra)))


_sum = np.add.reduce  # np.sum's own reduction, without its wrapper (the loss runs ~10^5 times a replay)


def _objective(free: np.ndarray, mask: np.ndarray, fixed: np.ndarray, data: _FitData,
               smooth: float = 0.0) -> tuple[float, np.ndarray]:
    """The fit's loss and its gradient in the free parameters (the study's loss, our derivation);
    ``smooth > 0`` rounds the square roots' kink at zero error: sqrt(mean squared error + smooth^2).

    Written for speed (it runs ~2 x 10^5 times a learned replay) with every element computed by the
    same floating-point operations as the plain formulas, so fits are bit for bit those of the plain
    code: pass and sync times share one array for each power and log; the gradient's seven sums are one
    reduction of a (7, n) array (a row's sum is that of the row alone); the retrogression terms stay
    numpy scalars (inf, not an error, on overflow)."""
    p = fixed.copy()
    p[mask] = free
    n, index, x, log_grad_obs, log_step_obs, factors = data
    a_grad, b_grad, a_node, b_node, a_local, b_local, g = p.tolist()
    coef = np.array((a_grad, a_node, a_local, _LOWER, b_grad, b_node, b_local, _LOWER))[index]
    times = coef[: 2 * n] + coef[2 * n:] * x  # pass times (T_grad), then sync times (T_sync)
    powered, log_times = times ** g, np.log(times)
    grad, grad_g, sync_g, log_grad = times[:n], powered[:n], powered[n:], log_times[:n]
    total = grad_g + sync_g
    log_total = np.log(total)
    r1, r2 = log_grad - log_grad_obs, log_total / g - log_step_obs
    e1 = math.sqrt(float(_sum(r1 ** 2)) / n + smooth ** 2)
    e2 = math.sqrt(float(_sum(r2 ** 2)) / n + smooth ** 2)
    q_node, q_local = p[3] / p[2], p[5] / p[4]
    loss = e1 + e2 + _GAMMA_PULL * (g - 1) ** 2 + _RETROGRESSION_PULL * (q_node ** 2 + q_local ** 2)
    # d loss / d grad and d loss / d sync through both errors, then times each parameter's factor
    w1 = r1 / (n * e1) if e1 > 0 else np.zeros(n)
    w2 = r2 / (n * e2) if e2 > 0 else np.zeros(n)
    via_step = w2 * (times ** (g - 1)).reshape(2, n) / total  # w2 d(step)/d(grad), then w2 d(step)/d(sync)
    terms = np.empty((7, n))
    np.multiply(w1 / grad + via_step[0], factors[:2], out=terms[:2])
    np.multiply(via_step[1], factors[2:], out=terms[2:6])
    np.multiply(w2, -log_total / g ** 2 + (grad_g * log_grad + sync_g * log_times[n:]) / (g * total), out=terms[6])
    jac = _sum(terms, 1)
    pull = 2 * _RETROGRESSION_PULL
    jac[2:] += np.array((-(pull * p[3] ** 2 / p[2] ** 3), pull * p[3] / p[2] ** 2,
                         -(pull * p[5] ** 2 / p[4] ** 3), pull * p[5] / p[4] ** 2, 2 * _GAMMA_PULL * (g - 1)))
    return float(loss), jac[mask]


def fit_throughput(nodes: Values, replicas: Values, micro: Values, pass_time: Values, step_time: Values) -> ThroughputParams:
    """Fit the throughput parameters to observations: per configuration (nodes, GPUs, micro-batch)
    the pass time (compute of one micro-batch, step minus sync) and the step time."""
    nodes, replicas, micro = (np.asarray(x, dtype=float) for x in (nodes, replicas, micro))
    pass_time, step_time = np.asarray(pass_time, dtype=float), np.asarray(step_time, dtype=float)
    if not (len(nodes) == len(replicas) == len(micro) == len(pass_time) == len(step_time) > 0):
        raise ValueError("fit_throughput needs one or more observations, each with all five values")
    if np.any(pass_time <= 0) or np.any(step_time <= 0):
        raise ValueError("observed pass and step times must be positive")
    return _fit(tuple(x.tobytes() for x in (nodes, replicas, micro, pass_time, step_time)))


@functools.lru_cache(maxsize=1 << 14)
def _fit(history: tuple[bytes, ...]) -> ThroughputParams:
    """``fit_throughput`` of a history given as its five float64 arrays' bytes. The fit is a pure
    function of the history, so an identical one (jobs of one application that ran the same
    configurations in the same order: about half the fits of a study workload) is fitted once."""
    nodes, replicas, micro, pass_time, step_time = (np.frombuffer(x) for x in history)
    start = np.array(_START)
    lower = np.array([_LOWER] * 6 + [1.0])
    upper = np.array([np.inf] * 6 + [_MAX_GAMMA])
    mask = np.ones(7, dtype=bool)

    def fix(i: int, value: float) -> None:
        start[i] = lower[i] = upper[i] = value
        mask[i] = False

    if len(np.unique(micro)) == 1:
        fix(0, float(np.mean(pass_time)) / 2)
    if not np.any(nodes > 1):
        fix(2, _LOWER)
        fix(3, _LOWER)
    if not np.any((nodes == 1) & (replicas > 1)):
        fix(4, _LOWER)
        fix(5, _LOWER)
    if not np.any(replicas > 2):
        fix(3, _LOWER)
        fix(5, _LOWER)
    data = _fit_data(nodes, replicas, micro, np.log(pass_time), np.log(step_time))
    low, high = lower[mask], upper[mask]
    guess = _least_squares_start(start, mask, nodes, replicas, micro, pass_time, step_time - pass_time)
    best = None
    # L-BFGS-B's tiny BLAS calls cost 2-3x more with BLAS threads on a busy machine: fit on one thread
    with _blas().limit(limits=1, user_api="blas"):
        smoothed = minimize_lbfgsb(_objective, np.clip(guess, lower, upper)[mask], (mask, start, data, _SMOOTH),
                                   low, high)
        for point in (start[mask], smoothed.x):
            result = minimize_lbfgsb(_objective, point, (mask, start, data), low, high)
            if best is None or result.fun < best.fun:
                best = result
    params = start.copy()
    params[mask] = np.clip(best.x, lower[mask], upper[mask])
    if not np.any(nodes > 1):
        params[2] = max(params[2], params[4] * _NODE_OVER_LOCAL)
        params[3] = max(params[3], params[5] * _NODE_OVER_LOCAL)
    return ThroughputParams(*(float(x) for x in params))


@functools.cache
def _blas() -> ThreadpoolController:
    """The loaded BLAS libraries, scanned once per process (a scan per fit cost ~7% of a learned replay)."""
    return ThreadpoolController()


def _least_squares_start(start: np.ndarray, mask: np.ndarray, nodes: np.ndarray, replicas: np.ndarray,
                         micro: np.ndarray, pass_time: np.ndarray, sync_obs: np.ndarray) -> np.ndarray:
    """Our second starting point: the pass-time line and each link's sync line by least squares, with
    the study's gamma (about 1: no overlap)."""
    guess = start.copy()
    if mask[0]:
        guess[0], guess[1] = np.linalg.lstsq(np.column_stack([np.ones_like(micro), micro]), pass_time, rcond=None)[0]
    elif mask[1]:
        guess[1] = float(np.mean((pass_time - guess[0]) / micro))
    extra = np.maximum(replicas - 2, _LOWER)
    for a, b, used in ((2, 3, nodes > 1), (4, 5, (nodes <= 1) & (replicas > 1))):
        if not (mask[a] and used.any()):
            continue
        if mask[b]:
            guess[a], guess[b] = np.linalg.lstsq(np.column_stack([np.ones(used.sum()), extra[used]]), sync_obs[used],
                                                 rcond=None)[0]
        else:
            guess[a] = float(np.mean(sync_obs[used] - guess[b] * extra[used]))
    return guess


class Observation(NamedTuple):
    """What a job's agent measures while it runs one configuration (the study's profile entry)."""

    nodes: int
    replicas: int
    micro_batch: int
    step_time: float  # one pass with gradient synchronisation
    sync_time: float  # the synchronisation part of it
    grad_sqr: float  # gradient statistics at the batch and epoch being trained
    grad_var: float


@dataclass
class GoodputEstimate:
    """One job's estimate of its goodput: its observations, the parameters fitted to them and its
    last gradient statistics (None before its first observation: the prior)."""

    min_batch: int  # B0, the batch the efficiency is relative to
    profile: dict[tuple[int, int, int], tuple[float, float]] = field(default_factory=dict)
    params: ThroughputParams | None = None
    grad: tuple[float, float] | None = None
    fits: int = 0

    @property
    def max_replicas(self) -> int:
        """The most GPUs among the configurations observed (0 before the first)."""
        return max((key[1] for key in self.profile), default=0)

    def observe(self, obs: Observation) -> bool:
        """Record ``obs``: the gradient statistics always; the times (and a refit) only for a
        configuration not seen before, as the study's agent. True if the parameters were refitted."""
        self.grad = (obs.grad_sqr, obs.grad_var)
        key = (obs.nodes, obs.replicas, obs.micro_batch)
        if key in self.profile:
            return False
        self.profile[key] = (obs.step_time, obs.sync_time)
        keys = np.array(list(self.profile), dtype=float)
        times = np.array(list(self.profile.values()))
        self.params = fit_throughput(keys[:, 0], keys[:, 1], keys[:, 2], times[:, 0] - times[:, 1], times[:, 0])
        self.fits += 1
        return True

    def goodput(self, nodes: int, replicas: int, micro: np.ndarray, accum: np.ndarray, trained: np.ndarray) -> np.ndarray:
        """Estimated progress per second of each configuration (micro-batch, accumulation passes,
        global batch trained) on ``replicas`` GPUs over ``nodes`` nodes; needs an observation."""
        return self.efficiency(trained) / self.iteration_times(nodes, replicas, micro, accum)

    def efficiency(self, trained: np.ndarray) -> np.ndarray:
        """Estimated statistical efficiency of each global batch ``trained`` (the last gradient
        statistics); needs an observation."""
        if self.params is None or self.grad is None:
            raise ValueError("no observation yet: the estimate is the prior (linear speed-up)")
        sqr, var = self.grad
        scale = np.asarray(trained, dtype=float) / self.min_batch
        denom = var / scale + sqr
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(denom > 0, (var + sqr) / denom, 1.0)

    def iteration_times(self, nodes: int, replicas: int, micro: np.ndarray, accum: np.ndarray) -> np.ndarray:
        """Estimated seconds per iteration of each configuration (micro-batch, accumulation passes) on
        ``replicas`` GPUs over ``nodes`` nodes (the fitted parameters only); needs an observation."""
        if self.params is None:
            raise ValueError("no observation yet: the estimate is the prior (linear speed-up)")
        return iteration_time(self.params, np.full(len(micro), nodes), np.full(len(micro), replicas), micro, accum)


def measure(model: GoodputModel, placement: tuple[int, ...], batch: int, epoch: int) -> Observation:
    """What the agent of a job of application ``model`` (a ``GoodputModel``, the truth) measures
    while it trains global ``batch`` on ``placement`` (GPUs per node) in 0-based ``epoch``: the only
    place the learned mode reads the truth (the study's ``Job.step`` feeding ``update_params``)."""
    replicas = sum(placement)
    micro, _, trained = model.config(replicas, batch)
    step, sync = model.step_sync(placement, micro)
    sqr, var = model.grad_stats(trained, epoch)
    return Observation(len(placement), replicas, micro, step, sync, sqr, var)
