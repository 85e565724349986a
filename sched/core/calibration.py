"""Per-worker calibration of shared jobs (Gimbal §4, docs/explanation/gimbal.md).

A *tracked* job (``job.workers`` is a :class:`Workers`, its extension state; only Gimbal's policies
track jobs) keeps, per GPU it holds, an MPS cap ``shares[g]`` (fraction of the GPU, 0.1 … 1.0), a local
batch ``batches[g]`` (``None``: every worker at the nominal per-GPU batch b̄) and its worker slowdown
``xi[g]``:

- M1: ξ_w = the pair's ξ under MPS caps ``(p_w, p_partner)`` when the GPU is shared, else the
  restricted-solo slowdown σ(p_w) (1 at 100 %). Tracked jobs share under MPS (``mode="mps"``).
- M2-M3: t_w = ξ_w · g(b_w) with g(b) = α + β·b (catalog eq. 1); the job's pace is the slowest
  worker's, ``max_w t_w / g(b̄)`` (with nominal batches simply ``max_w ξ_w``: the engine's rule).
- M4 (LISS, lossless): :func:`liss_split` moves samples between a job's workers so that all finish at
  once, keeping Σ_w b_w = B; remaining work is never touched (M5), only the rate.
- M7 (LGRR): a cap change stalls the job ``stall_s`` (3.6 s, Gimbal §7.4) while its partners run on.

Untracked jobs never reach this module: the engine calls it only behind ``job.workers is not None``
checks, so replays that do not calibrate are bit-identical. Costs are O(GPUs of the jobs touched).

The engine reaches this module only through :class:`Calibration`, a capability (``sched/core/protocol.py``)
that a policy declares (``Policy.capabilities``); a policy calls it as ``engine.calibration``. Here the
engine is a :class:`~schedlab.sched.core.protocol.CapabilityHost`: progress is settled and rates are
refreshed through its public ``settle`` and ``refresh_rate``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, ClassVar

from schedlab.sched.core.protocol import Capability

if TYPE_CHECKING:
    from schedlab.sched.core.job import Job
    from schedlab.sched.core.protocol import CapabilityHost as Engine

SWITCH_CONTEXT_GIB = 200 / 1024  # Gimbal §6: one extra 200 MB CUDA context alive while switching
_SUM_TOLERANCE = 1e-6


class CalibrationError(RuntimeError):
    pass


@dataclass(slots=True, eq=False)
class Workers:
    """A tracked job's per-worker state (its calibration extension state, ``job.workers``)."""

    shares: dict[int, float] | None = None  # GPU -> MPS cap of this job's worker there; None before its start
    batches: dict[int, float] | None = None  # GPU -> local batch (LISS); None: every worker at ``batch_size``
    xi: dict[int, float] = field(default_factory=dict)  # GPU -> ξ of this job's worker there


def track(job: Job) -> None:
    """Mark ``job`` as calibratable: from its next start the engine keeps its per-GPU state."""
    if job.workers is None:
        job.workers = Workers()


def reset_worker(job: Job) -> None:
    """A (re)started tracked job: every worker at 100 % and the nominal batch (ξ filled by :func:`refresh`)."""
    w = job.workers
    if w is None:
        w = job.workers = Workers()
    w.shares = dict.fromkeys(job.gpus, 1.0)
    w.batches = None
    w.xi = dict.fromkeys(job.gpus, 1.0)


def share_of(job: Job, gpu: int) -> float:
    """The MPS cap of ``job`` on ``gpu`` (1.0 for an untracked job: free competition)."""
    return w.shares.get(gpu, 1.0) if (w := job.workers) is not None and w.shares is not None else 1.0


def refresh(engine: Engine, job: Job) -> None:
    """Re-compute ``job``'s per-GPU ξ from the current holders and caps (M1), and keep
    ``job.partners[partner][1]`` = its largest ξ beside that partner. Does not touch the rate."""
    source, holders = engine.sharing.interference, engine.cluster.holders  # workloads checked at the start
    if job.workers.shares is None:
        reset_worker(job)
    w = job.workers
    xi, shares = w.xi, w.shares
    beside: dict[Job, float] = {}
    # ξ of a worker is a function of (partner, p, q) (the sources are deterministic and cache by
    # workload), so each distinct triple is asked once per refresh: same values, fewer calls
    known: dict[tuple, float] = {}
    for g in job.gpus:
        p = shares.setdefault(g, 1.0)
        on = holders[g]
        if len(on) == 2:
            other = on[0] if on[1] is job else on[1]
            q = ow.shares.get(g, 1.0) if (ow := other.workers) is not None and ow.shares is not None else 1.0  # share_of
            if (value := known.get(key := (other, p, q))) is None:
                value = known[key] = source.ratio(job, other, "mps", None if p == q == 1.0 else (100.0 * p, 100.0 * q))[0]
            if value > beside.get(other, 0.0):
                beside[other] = value
        elif p == 1.0:
            value = 1.0
        elif (value := known.get(p)) is None:
            value = known[p] = engine.sharing.restricted_solo(job, p)
        xi[g] = value
    if len(xi) != len(job.gpus):  # workers it no longer has (xi holds every GPU of the job, each once)
        for g in xi.keys() - set(job.gpus):
            del xi[g]
    if job.partners:
        for other, entry in job.partners.items():
            if other in beside:
                entry[1] = beside[other]


def pace(engine: Engine, job: Job) -> float:
    """M2-M3: the slowest worker's iteration time over the nominal one."""
    w = job.workers
    xi, batches = w.xi, w.batches
    if batches is None:
        return max(map(xi.get, job.gpus, repeat(1.0)), default=1.0)  # xi.get(g, 1.0) for each g
    compute = engine.sharing.compute_time
    nominal = compute(job, job.batch_size)
    return max(xi.get(g, 1.0) * compute(job, batches[g]) for g in job.gpus) / nominal


def worker_view(engine: Engine, job: Job) -> list[tuple[int, Job | None, float, float, float, float]]:
    """``[(gpu, partner or None, cap p, local batch b_w, ξ_w, t_w seconds)]`` of a running job."""
    if not job.running:
        return []
    if job.workers is None or job.workers.shares is None:
        track(job)
        reset_worker(job)
        refresh(engine, job)
    w = job.workers
    compute = engine.sharing.compute_time
    out = []
    for g in job.gpus:
        on = engine.cluster.holders[g]
        partner = next((o for o in on if o is not job), None)
        b = job.batch_size if w.batches is None else w.batches[g]
        xi = w.xi[g]
        out.append((g, partner, w.shares[g], b, xi, xi * compute(job, b)))
    return out


def worker_times(engine: Engine, job: Job) -> list[tuple[int, float]]:
    """``[(gpu, t_w seconds)]`` of a running job: :func:`worker_view`'s first and last columns
    without building the others (same floats: ξ_w · g(b_w), g computed once when b_w is nominal)."""
    w = job.workers
    if not job.running or w is None or w.shares is None:
        return [(view[0], view[5]) for view in worker_view(engine, job)]
    xi = w.xi
    compute = engine.sharing.compute_time
    if w.batches is None:
        nominal = compute(job, job.batch_size)
        return [(g, xi[g] * nominal) for g in job.gpus]
    batches = w.batches
    return [(g, xi[g] * compute(job, batches[g])) for g in job.gpus]


def _ensure(engine: Engine, job: Job) -> None:
    if (w := job.workers) is None or w.shares is None or len(w.shares) != len(job.gpus):
        track(job)
        reset_worker(job)
        refresh(engine, job)


def check(engine: Engine, job: Job, shares: dict[int, float] | None, batches: dict[int, float] | None,
          switching: bool) -> str | None:
    """Why the configuration cannot be applied (caps in (0, 1], Σ b_w = B, memory per GPU at b_w
    beside the partner, + 200 MB while switching), or None."""
    gpus = set(job.gpus)
    if shares is not None:
        if not set(shares) <= gpus:
            return f"shares name GPUs {sorted(set(shares) - gpus)} that job {job.job_id} does not hold"
        bad = [p for p in shares.values() if not 0.0 < p <= 1.0]
        if bad:
            return f"MPS caps must be in (0, 1], got {bad[0]!r}"
    if batches is not None:
        if set(batches) != gpus:
            return f"batches must name exactly the GPUs of job {job.job_id} {sorted(gpus)}, got {sorted(batches)}"
        if any(not b > 0 for b in batches.values()):
            return f"local batches must be > 0, got {sorted(batches.values())}"
        total = job.batch_size * len(job.gpus)
        if abs(sum(batches.values()) - total) > _SUM_TOLERANCE * total:
            return f"local batches sum to {sum(batches.values()):g}, the global batch is {total:g} (LISS is lossless)"
    sharing = engine.sharing
    extra = SWITCH_CONTEXT_GIB if switching else 0.0
    for g in (batches or {}) if not switching else job.gpus:
        b = batches[g] if batches is not None else local_batch(job, g)
        need = sharing.memory_at(job, b) + extra
        for other in engine.cluster.holders[g]:
            if other is not job:
                need += sharing.memory_at(other, local_batch(other, g))
        if need > sharing.gpu_memory_gib:
            return f"GPU {g}: {need:.2f} GiB needed at local batch {b:g}, the GPU has {sharing.gpu_memory_gib:g}"
    return None


def local_batch(job: Job, gpu: int) -> float:
    """The local batch of ``job``'s worker on ``gpu`` (the nominal per-GPU batch unless LISS changed it)."""
    return w.batches[gpu] if (w := job.workers) is not None and w.batches is not None else job.batch_size


def calibrate(engine: Engine, job: Job, shares: dict[int, float] | None = None,
              batches: dict[int, float] | None = None, stall_s: float = 0.0, checked: bool = False) -> None:
    """Apply new MPS caps (``shares``, fraction per GPU, only the GPUs named change) and/or local
    batches (``batches``, every GPU of the job) to running ``job``: settle it and the other holder of
    every GPU whose cap changed, re-compute ξ for both holders (M1), charge ``stall_s`` to ``job`` (M7),
    and re-schedule their completions. Raises :class:`CalibrationError` before changing anything.
    ``checked``: the caller has just had :func:`check` pass on these arguments (it is not repeated)."""
    if not job.running:
        raise CalibrationError(f"calibrate: job {job.job_id} is not running")
    if engine.sharing is None:
        raise CalibrationError("calibrate needs a sharing model")
    if not 0.0 <= stall_s < math.inf:
        raise CalibrationError(f"calibrate: stall_s must be a finite number >= 0, got {stall_s!r}")
    _ensure(engine, job)
    w = job.workers
    changed = [g for g, p in (shares or {}).items() if p != w.shares.get(g)] if shares is not None else []
    reason = None if checked else check(engine, job, shares, batches, switching=bool(changed))
    if reason is not None:
        raise CalibrationError(f"calibrate job {job.job_id}: {reason}")
    others: dict[Job, None] = {}
    for g in changed:
        for other in engine.cluster.holders[g]:
            if other is not job:
                others[other] = None
    engine.settle(job)
    for other in others:
        engine.settle(other)
        _ensure(engine, other)
    for g in changed:
        w.shares[g] = float(shares[g])
    if batches is not None:
        w.batches = None if all(b == job.batch_size for b in batches.values()) else {g: float(b) for g, b in batches.items()}
    engine.add_stall(job, stall_s)
    refresh(engine, job)
    engine.refresh_rate(job, force=True)
    for other in others:
        refresh(engine, other)
        engine.refresh_rate(other)


def liss_split(xis: list[float], alpha: float, beta: float, total: float, lo: float = 1.0,
               his: list[float] | None = None, integer: bool = True) -> list[float]:
    """M4: local batches b_w = clamp((T/ξ_w − α)/β, lo, hi_w) with T such that Σ b_w = ``total``
    (bisection; the sum is monotone in T), rounded by largest remainder so the sum stays exact.
    Without clamps this gives pace n / Σ 1/ξ_w (the harmonic mean of the ξ_w)."""
    n = len(xis)
    his = his if his is not None else [math.inf] * n
    if beta <= 0:
        raise CalibrationError("LISS needs an iteration time that grows with the batch (β > 0)")
    if n * lo > total or sum(min(h, total) for h in his) < total:
        raise CalibrationError(f"LISS: a global batch of {total:g} does not fit the local bounds")

    def split(t: float) -> list[float]:
        # min(max(v, lo), h) written out (max keeps v unless lo > v, min keeps it unless h < v): same floats
        out = []
        for x, h in zip(xis, his):
            v = (t / x - alpha) / beta
            if lo > v:  # noqa: PLR1730 (the calls written out, see above)
                v = lo
            out.append(h if h < v else v)  # noqa: FURB136
        return out

    low, high = 0.0, max(xis) * (alpha + beta * total) * 2
    while sum(split(high)) < total:
        high *= 2
    for _ in range(200):  # stops early at the fixed point: a step that changes neither end changes nothing after it
        mid = (low + high) / 2
        if sum(split(mid)) < total:
            if mid == low:
                break
            low = mid
        else:
            if mid == high:
                break
            high = mid
    raw = split(high)
    scale = total / sum(raw)
    raw = [min(max(b * scale, lo), h) for b, h in zip(raw, his)]
    if not integer:
        return raw
    floors = [max(math.floor(b), math.ceil(lo)) for b in raw]
    short = round(total - sum(floors))
    order = sorted(range(n), key=lambda i: (-(raw[i] - math.floor(raw[i])), i))
    i = 0
    while short > 0 and i < 4 * n:
        w = order[i % n]
        if floors[w] + 1 <= his[w]:
            floors[w] += 1
            short -= 1
        i += 1
    while short < 0:  # lo clamps pushed the floors over the total: take from the largest
        w = max(range(n), key=lambda j: (floors[j], -j))
        floors[w] -= 1
        short += 1
    return [float(b) for b in floors]


def liss_batches(engine: Engine, job: Job) -> dict[int, float]:
    """The one-shot LISS rebalance of running ``job`` from its workers' current ξ (Gimbal §4.1-4.2)."""
    _ensure(engine, job)
    sharing = engine.sharing
    alpha, beta = sharing.compute_params(job)
    gpus = list(job.gpus)
    his = []
    for g in gpus:
        partner_gib = sum(sharing.memory_at(o, local_batch(o, g)) for o in engine.cluster.holders[g] if o is not job)
        his.append(sharing.max_batch(job, partner_gib))
    total = job.batch_size * len(gpus)
    split = liss_split([job.workers.xi[g] for g in gpus], alpha, beta, total, 1.0, his,
                       integer=float(job.batch_size).is_integer())
    return dict(zip(gpus, split))


class Calibration(Capability):
    """Per-worker calibration as an engine capability. The engine calls :meth:`on_start`,
    :meth:`on_partners_changed` and :meth:`pace` for tracked jobs only; a policy calls the rest as
    ``engine.calibration.<method>`` (Gimbal's coordinator and runtime monitor)."""

    role: ClassVar[str] = "calibration"

    # ---- the engine's hooks (tracked jobs) --------------------------------------------------------
    def on_start(self, job: Job) -> None:
        """A tracked job (re)started: every worker at 100 % and the nominal batch."""
        reset_worker(job)

    def on_partners_changed(self, job: Job) -> None:
        """A partner joined or left one of the job's GPUs: its per-GPU ξ again (M1)."""
        refresh(self.engine, job)

    def pace(self, job: Job) -> float:
        """The slowest worker's iteration time over the nominal one (M2-M3)."""
        return pace(self.engine, job)

    # ---- what a policy calls --------------------------------------------------------------------
    track = staticmethod(track)
    share_of = staticmethod(share_of)
    local_batch = staticmethod(local_batch)

    def worker_view(self, job: Job) -> list[tuple[int, Job | None, float, float, float, float]]:
        """See :func:`worker_view`."""
        return worker_view(self.engine, job)

    def worker_times(self, job: Job) -> list[tuple[int, float]]:
        """See :func:`worker_times`."""
        return worker_times(self.engine, job)

    def check(self, job: Job, shares: dict[int, float] | None, batches: dict[int, float] | None,
              switching: bool) -> str | None:
        """See :func:`check`."""
        return check(self.engine, job, shares, batches, switching)

    def liss_batches(self, job: Job) -> dict[int, float]:
        """See :func:`liss_batches`."""
        return liss_batches(self.engine, job)

    def calibrate(self, job: Job, shares: dict[int, float] | None = None, batches: dict[int, float] | None = None,
                  stall_s: float = 0.0, checked: bool = False) -> None:
        """See :func:`calibrate`."""
        calibrate(self.engine, job, shares, batches, stall_s, checked)
