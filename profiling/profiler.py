"""The sweep loop (Castor §7 offline profiling): solo runs, then co-located pairs with
ξ = t_coloc / t_solo per job (Castor §6.2 labels), and solo runs under an MPS cap with
σ = t_capped / t_solo (Gimbal's restricted worker, docs/explanation/gimbal.md).  Each configuration's records are
written atomically as soon as it finishes, so a killed sweep resumes where it stopped.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional

from .collectors import Collector
from .execute import Context, Job, fill, run_jobs
from .mps import MpsDaemon, MpsError
from .store import ProfileRecord, ProfileStore
from .sweep import CappedSoloConfig, Config, PairConfig, SoloConfig, Sweep, config_key


def _gpus_for(ctx: Context, n: int) -> Optional[list[str]]:
    """The GPUs a run uses: the first n of ``--gpus`` on CUDA; all of them on the CPU
    (whose indicators a CPU run records).  None when there are too few."""
    if ctx.device != "cuda":
        return list(ctx.gpus)
    return list(ctx.gpus[:n]) if len(ctx.gpus) >= n else None


def _base(cfg: SoloConfig, key: str, sweep: str, ctx: Context, gpus: list[str], **kw: object) -> ProfileRecord:
    return ProfileRecord(config_key=key, sweep=sweep, kind="pair" if kw.get("partner") else "solo",
                         workload=cfg.workload, size=cfg.size, batch_size=cfg.batch, accum_steps=cfg.accum,
                         num_gpus=cfg.gpus, device=ctx.device, amp=cfg.amp, warmup_iters=cfg.warmup,
                         gpu_indices=",".join(gpus), **kw)  # type: ignore[arg-type]


Sink = Callable[[Config, list[ProfileRecord]], None]


def _batch_kind(cfg: Config) -> Optional[tuple[object, ...]]:
    """Configurations of one kind share a runner process (one-GPU solos; capped solos of one cap; pairs
    of one mode and split); None: runs alone (multi-GPU)."""
    if any(s.gpus != 1 for s in _sides(cfg)):
        return None
    if isinstance(cfg, PairConfig):
        return ("pair", cfg.mode, cfg.share)
    return ("solo-mps", cfg.share) if isinstance(cfg, CappedSoloConfig) else ("solo",)


def _sides(cfg: Config) -> list[SoloConfig]:
    """The job configuration(s) a configuration runs: a pair's two, else its one."""
    return [cfg.a, cfg.b] if isinstance(cfg, PairConfig) else [cfg.solo] if isinstance(cfg, CappedSoloConfig) else [cfg]


def _gang(cfg: Config) -> int:
    """How many copies of its partner a pair runs: one on each device of a multi-device ``a`` beside a
    one-device ``b`` (its ranks meet at every all-reduce, so a partner on any device slows all of it:
    the testbed's case, docs/how-to/testbed.md), else one."""
    if isinstance(cfg, PairConfig) and cfg.a.gpus > 1 and cfg.b.gpus == 1:
        return cfg.a.gpus
    return 1


def _merged(copies: list[Optional[dict[str, Any]]]) -> Optional[dict[str, Any]]:
    """The partner's result from its copies' (one per device of a gang pair): None until all are in, the
    first that is not ``ok``, else the first's with every copy's iterations (their mean is the partner's
    time) and the window that spans them."""
    if any(c is None for c in copies):
        return None
    failed = [c for c in copies if c.get("status") != "ok"]
    if failed:
        return failed[0]
    out = dict(copies[0])
    out["iter_times_s"] = [t for c in copies for t in c.get("iter_times_s", [])]
    starts = [c["window_start"] for c in copies if c.get("window_start") is not None]
    ends = [c["window_end"] for c in copies if c.get("window_end") is not None]
    if starts and ends:
        out["window_start"], out["window_end"] = min(starts), max(ends)
    return out


def _uses_mps(cfg: Config) -> bool:
    return isinstance(cfg, CappedSoloConfig) or (isinstance(cfg, PairConfig) and cfg.mode == "mps")


class Profiler:
    """Runs a sweep's configurations into a store.  Configurations of one kind run in batches of up to
    ``batch_size`` in one runner process per job (one interpreter and CUDA start for the batch); each
    finished configuration is stored as soon as its indicator window is complete."""

    def __init__(self, store: ProfileStore, ctx: Context, timeout_s: float = 600.0, sweep_name: str = "adhoc",
                 batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.store, self.ctx, self.timeout_s, self.sweep = store, ctx, timeout_s, sweep_name
        self.batch_size = batch_size
        digest = hashlib.sha1(str(store.root.resolve()).encode()).hexdigest()[:8]
        self.mps_root = ctx.mps_root or Path(tempfile.gettempdir()) / f"schedlab-mps-{os.getuid()}-{digest}"
        self.stop_at: Optional[float] = None  # no configuration starts after this (epoch s)
        self.deadline: Optional[float] = None  # runners still working then are killed (epoch s)

    def key(self, cfg: Config) -> str:
        n = _sides(cfg)[0].gpus
        return config_key(cfg, self.ctx.device, _gpus_for(self.ctx, n) or self.ctx.gpus, host=self.ctx.key_host)

    # -- one configuration, records returned (not stored) -------------------------------------------
    def solo(self, cfg: SoloConfig) -> list[ProfileRecord]:
        return self._one(cfg)

    def capped_solo(self, cfg: CappedSoloConfig) -> list[ProfileRecord]:
        """The solo configuration alone under MPS with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = the cap;
        ``xi`` = σ(p) = its mean iteration time over the uncapped solo run's."""
        return self._one(cfg)

    def pair(self, cfg: PairConfig) -> list[ProfileRecord]:
        return self._one(cfg)

    def _one(self, cfg: Config) -> list[ProfileRecord]:
        got: list[list[ProfileRecord]] = []
        self._batch([cfg], lambda _c, recs: got.append(recs))
        return got[0] if got else []

    def t_solo(self, cfg: SoloConfig) -> Optional[float]:
        """Solo mean iteration time from the store, measuring (and storing) it if absent."""
        key = self.key(cfg)
        if not self.store.has(key):
            self._batch([cfg], lambda _c, recs: self.store.write(recs))
        return self.store.solo_time(key)

    # -- records -------------------------------------------------------------------------------------
    def _records(self, cfg: Config) -> tuple[list[ProfileRecord], Optional[list[str]], Optional[str]]:
        """The configuration's empty records, its GPUs, and why it cannot run here (or None)."""
        key = self.key(cfg)
        first = _sides(cfg)[0]
        gpus = _gpus_for(self.ctx, first.gpus)
        on = gpus or self.ctx.gpus
        if isinstance(cfg, PairConfig):
            recs = [_base(c, key, self.sweep, self.ctx, on, job=i, partner=o.workload, partner_batch_size=o.batch,
                          mode=cfg.mode, share=s)
                    for i, (c, o, s) in enumerate([(cfg.a, cfg.b, cfg.share[0]), (cfg.b, cfg.a, cfg.share[1])])]
        elif isinstance(cfg, CappedSoloConfig):
            recs = [_base(cfg.solo, key, self.sweep, self.ctx, on, mode="mps", share=cfg.share)]
            recs[0].kind = "solo-mps"
        else:
            recs = [_base(cfg, key, self.sweep, self.ctx, on)]
        fail = None
        if gpus is None:
            fail = f"needs {first.gpus} GPUs, --gpus gives {len(self.ctx.gpus)}"
        elif isinstance(cfg, CappedSoloConfig) and self.ctx.device != "cuda":
            fail = "an MPS cap needs a CUDA device"
        elif isinstance(cfg, PairConfig) and cfg.mode == "mps" and self.ctx.device != "cuda":
            fail = "mode mps needs a CUDA device"
        elif isinstance(cfg, PairConfig) and cfg.mode not in ("timeslice", "mps"):
            fail = f"unknown mode {cfg.mode!r}"
        return recs, gpus, fail

    @staticmethod
    def _failed(recs: list[ProfileRecord], status: str, message: str) -> list[ProfileRecord]:
        for r in recs:
            r.status, r.message = status, message
        return recs

    def _needed_solos(self, cfgs: list[Config]) -> list[SoloConfig]:
        """The solo runs the ratios of these capped solos and pairs divide by, not yet in the store."""
        out: list[SoloConfig] = []
        for cfg in cfgs:
            for s in _sides(cfg) if not isinstance(cfg, SoloConfig) else []:
                if s not in out and not self.store.has(self.key(s)):
                    out.append(s)
        return out

    # -- a batch ---------------------------------------------------------------------------------------
    def _batch(self, cfgs: list[Config], sink: Sink) -> list[Config]:
        """Measure ``cfgs`` (one kind, see :func:`_batch_kind`) and hand each configuration's records to
        ``sink`` as soon as they are complete; returns the configurations left unmeasured (the deadline
        came, or the batch ended early)."""
        runnable: list[tuple[Config, list[ProfileRecord]]] = []
        gpus: Optional[list[str]] = None
        for cfg in cfgs:
            recs, cfg_gpus, fail = self._records(cfg)
            if fail:
                sink(cfg, self._failed(recs, "error", fail))
            else:
                runnable.append((cfg, recs))
                gpus = cfg_gpus
        if not runnable:
            return []
        assert gpus is not None
        solos = self._needed_solos([c for c, _ in runnable])
        for n in dict.fromkeys(s.gpus for s in solos):  # one batch per kind (a gang pair's sides differ)
            self._batch([s for s in solos if s.gpus == n], lambda _c, recs: self.store.write(recs))
        first = runnable[0][0]
        solo_t = [[self.store.solo_time(self.key(s)) for s in _sides(c)] for c, _ in runnable]
        jobs = [Job([_sides(c)[i].spec(self.ctx.device) for c, _ in runnable], s.gpus)
                for i, s in enumerate(_sides(first))]
        copies = _gang(first)  # a multi-device job's partner: one copy on each of its devices
        if copies > 1:
            jobs[1:] = [Job(jobs[1].specs, 1, first_device=d) for d in range(copies)]
        shares = ([first.share] if isinstance(first, CappedSoloConfig) else
                  list(first.share) if isinstance(first, PairConfig) and first.mode == "mps" else None)
        stored: set[int] = set()

        def deliver(results: list[list[Optional[dict[str, Any]]]], cols: list[Collector], src: str,
                    final: bool) -> None:
            now = time.time()
            for k, (cfg, recs) in enumerate(runnable):
                got = [r[k] for r in results]
                got = got[:1] + [_merged(got[1:])] if copies > 1 else got
                if k in stored or (not final and any(x is None for x in got)):
                    continue
                if all(x is None for x in got):
                    continue  # never started: stays unmeasured
                ends = [x.get("window_end") for x in got if x]
                if not final and any(e is not None and now < e + self.ctx.interval_s for e in ends):
                    continue  # the sample covering the window's end is not taken yet
                for rec, res, ts in zip(recs, got, solo_t[k]):
                    fill(rec, res or {"status": "error", "message": "PartnerFailed: the partner's runner ended"},
                         cols)
                    rec.indicator_source, rec.t_solo_s = src, ts
                    if rec.status == "ok" and ts and rec.iter_time_mean_s:
                        rec.xi = rec.iter_time_mean_s / ts
                stored.add(k)
                sink(cfg, recs)

        def measure(extra: Optional[list[dict[str, str]]]) -> None:
            if extra is not None and copies > 1:  # each copy of the partner under the partner's share
                extra = extra[:1] + extra[1:2] * copies
            results, cols, src = run_jobs(jobs, self.ctx, self.timeout_s, gpus, extra, self.stop_at, self.deadline,
                                          lambda r, c, s: deliver(r, c, s, False))
            deliver(results, cols, src, True)

        try:
            if shares is None:
                measure(None)
            else:
                with MpsDaemon(self.mps_root, gpus) as daemon:
                    measure([{k: v for k, v in daemon.env(s).items() if k.startswith("CUDA_")} for s in shares])
        except MpsError as exc:
            for k, (cfg, recs) in enumerate(runnable):
                if k not in stored:
                    sink(cfg, self._failed(recs, "error", str(exc)))
            return []
        return [cfg for k, (cfg, _) in enumerate(runnable) if k not in stored]

    # -- the sweep -------------------------------------------------------------------------------------
    def run(self, sweep: Sweep, force: bool = False, progress: bool = True,
            deadline: Optional[float] = None, stop_margin_s: float = 30.0,
            echo: Optional[Callable[[str], None]] = None) -> Counter[str]:
        """Measure every configuration not yet in the store, in the sweep's order; returns status counts
        (``skipped``: in the store already; ``pending``: left for a later run by ``deadline``, epoch s: no
        configuration starts within ``stop_margin_s`` of it and runners still working at it are killed;
        ``no-mps``: MPS configurations left unmeasured where MPS cannot run).  ``echo`` gets one line per
        stored configuration (a log without a progress bar)."""
        from tqdm import tqdm

        counts: Counter[str] = Counter()
        queue: list[Config] = []
        for cfg in sweep.configs:
            if not force and self.store.has(self.key(cfg)):
                counts["skipped"] += 1
            elif _uses_mps(cfg) and not self.ctx.mps:
                counts["no-mps"] += 1
            else:
                queue.append(cfg)
        self.deadline = deadline
        self.stop_at = None if deadline is None else deadline - stop_margin_s
        bar = tqdm(total=len(queue), desc=f"profile {sweep.name}", unit="cfg", disable=not progress)

        started = time.time()

        def store(cfg: Config, recs: list[ProfileRecord]) -> None:
            self.store.write(recs)
            counts[recs[0].status] += 1
            bar.update(1)
            if echo:
                what = " ".join(f"{r.status} {r.iter_time_mean_s * 1e3:.1f}ms" if r.iter_time_mean_s else r.status
                                for r in recs) + "".join(f" xi={r.xi:.2f}" for r in recs if r.xi)
                echo(f"[{time.time() - started:6.1f}s] {_label(cfg)}{_share(cfg)}: {what}")

        try:
            while queue:
                if self.stop_at is not None and time.time() >= self.stop_at:
                    break
                batch = self._take_batch(queue)
                bar.set_postfix_str(_label(batch[0]) + (f" +{len(batch) - 1}" if len(batch) > 1 else ""))
                left = self._batch(batch, store)
                if len(left) == len(batch) and self.stop_at is None:
                    raise RuntimeError(f"a batch of {len(batch)} measured nothing: {_label(batch[0])}")
                queue[:0] = left
        finally:
            self.stop_at = self.deadline = None
            bar.close()
        if queue:
            counts["pending"] += len(queue)
        return counts

    def _take_batch(self, queue: list[Config]) -> list[Config]:
        """Pop the queue's head and up to ``batch_size - 1`` configurations of its kind from the next
        ``4 x batch_size`` (the sweep's order is kept within a few batches)."""
        head = queue.pop(0)
        kind = _batch_kind(head)
        batch = [head]
        if kind is None:
            return batch
        window = queue[: 4 * self.batch_size]
        for cfg in window:
            if len(batch) >= self.batch_size:
                break
            if _batch_kind(cfg) == kind:
                batch.append(cfg)
        for cfg in batch[1:]:
            queue.remove(cfg)
        return batch


def _share(cfg: Config) -> str:
    share = getattr(cfg, "share", None)
    return "" if share is None or share == (None, None) else f" {share}"


def _label(cfg: Config) -> str:
    return (f"{cfg.workload} b{cfg.batch}" if isinstance(cfg, SoloConfig)
            else f"{cfg.workload} b{cfg.solo.batch} cap {cfg.share:g}%" if isinstance(cfg, CappedSoloConfig)
            else f"{cfg.a.workload}+{cfg.b.workload} {cfg.mode}")
