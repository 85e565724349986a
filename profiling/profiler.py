"""The sweep loop (Castor §7 offline profiling): solo runs, then co-located pairs with
ξ = t_coloc / t_solo per job (Castor §6.2 labels), and solo runs under an MPS cap with
σ = t_capped / t_solo (Gimbal's restricted worker, spec gimbal.md §5).  Each configuration's records are
written atomically as soon as it finishes, so a killed sweep resumes where it stopped.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Optional

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


class Profiler:
    """Runs a sweep's configurations into a store."""

    def __init__(self, store: ProfileStore, ctx: Context, timeout_s: float = 600.0, sweep_name: str = "adhoc") -> None:
        self.store, self.ctx, self.timeout_s, self.sweep = store, ctx, timeout_s, sweep_name
        digest = hashlib.sha1(str(store.root.resolve()).encode()).hexdigest()[:8]
        self.mps_root = ctx.mps_root or Path(tempfile.gettempdir()) / f"schedlab-mps-{os.getuid()}-{digest}"

    def key(self, cfg: Config) -> str:
        n = cfg.gpus if isinstance(cfg, SoloConfig) else cfg.solo.gpus if isinstance(cfg, CappedSoloConfig) else cfg.a.gpus
        return config_key(cfg, self.ctx.device, _gpus_for(self.ctx, n) or self.ctx.gpus)

    def solo(self, cfg: SoloConfig) -> list[ProfileRecord]:
        key, t0 = self.key(cfg), time.time()
        gpus = _gpus_for(self.ctx, cfg.gpus)
        rec = _base(cfg, key, self.sweep, self.ctx, gpus or self.ctx.gpus)
        if gpus is None:
            rec.status, rec.message = "error", f"needs {cfg.gpus} GPUs, --gpus gives {len(self.ctx.gpus)}"
            return [rec]
        (res,), cols, src = run_jobs([Job(cfg.spec(self.ctx.device), cfg.gpus)], self.ctx, self.timeout_s, gpus)
        rec = fill(rec, res, cols)
        rec.indicator_source, rec.wall_s = src, time.time() - t0
        return [rec]

    def t_solo(self, cfg: SoloConfig) -> Optional[float]:
        """Solo mean iteration time from the store, measuring (and storing) it if absent."""
        key = self.key(cfg)
        t = self.store.solo_time(key)
        if t is None and not self.store.has(key):
            self.store.write(self.solo(cfg))
            t = self.store.solo_time(key)
        return t

    def capped_solo(self, cfg: CappedSoloConfig) -> list[ProfileRecord]:
        """The solo configuration alone under MPS with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = the cap;
        ``xi`` = σ(p) = its mean iteration time over the uncapped solo run's."""
        key, t0 = self.key(cfg), time.time()
        gpus = _gpus_for(self.ctx, cfg.solo.gpus)
        rec = _base(cfg.solo, key, self.sweep, self.ctx, gpus or self.ctx.gpus, mode="mps", share=cfg.share)
        rec.kind = "solo-mps"
        fail = None
        if gpus is None:
            fail = f"needs {cfg.solo.gpus} GPUs, --gpus gives {len(self.ctx.gpus)}"
        elif self.ctx.device != "cuda":
            fail = "an MPS cap needs a CUDA device"
        if fail:
            rec.status, rec.message = "error", fail
            return [rec]
        assert gpus is not None
        t_solo = self.t_solo(cfg.solo)
        try:
            with MpsDaemon(self.mps_root, gpus) as daemon:
                extra = [{k: v for k, v in daemon.env(cfg.share).items() if k.startswith("CUDA_")}]
                (res,), cols, src = run_jobs([Job(cfg.solo.spec(self.ctx.device), cfg.solo.gpus)], self.ctx,
                                             self.timeout_s, gpus, extra)
        except MpsError as exc:
            rec.status, rec.message = "error", str(exc)
            return [rec]
        rec = fill(rec, res, cols)
        rec.indicator_source, rec.wall_s, rec.t_solo_s = src, time.time() - t0, t_solo
        if rec.status == "ok" and t_solo and rec.iter_time_mean_s:
            rec.xi = rec.iter_time_mean_s / t_solo
        return [rec]

    def pair(self, cfg: PairConfig) -> list[ProfileRecord]:
        key, t0 = self.key(cfg), time.time()
        gpus = _gpus_for(self.ctx, cfg.a.gpus)
        recs = [_base(c, key, self.sweep, self.ctx, gpus or self.ctx.gpus, job=i, partner=o.workload,
                      partner_batch_size=o.batch, mode=cfg.mode, share=s)
                for i, (c, o, s) in enumerate([(cfg.a, cfg.b, cfg.share[0]), (cfg.b, cfg.a, cfg.share[1])])]
        fail = None
        if gpus is None:
            fail = f"needs {cfg.a.gpus} GPUs, --gpus gives {len(self.ctx.gpus)}"
        elif cfg.mode == "mps" and self.ctx.device != "cuda":
            fail = "mode mps needs a CUDA device"
        elif cfg.mode not in ("timeslice", "mps"):
            fail = f"unknown mode {cfg.mode!r}"
        if fail:
            for r in recs:
                r.status, r.message = "error", fail
            return recs
        assert gpus is not None
        solo_t = [self.t_solo(cfg.a), self.t_solo(cfg.b)]
        jobs = [Job(cfg.a.spec(self.ctx.device), cfg.a.gpus), Job(cfg.b.spec(self.ctx.device), cfg.b.gpus)]
        try:
            if cfg.mode == "mps":
                daemon = MpsDaemon(self.mps_root, gpus)
                with daemon:
                    extra = [{k: v for k, v in daemon.env(s).items() if k.startswith("CUDA_")} for s in cfg.share]
                    results, cols, src = run_jobs(jobs, self.ctx, self.timeout_s, gpus, extra)
            else:
                results, cols, src = run_jobs(jobs, self.ctx, self.timeout_s, gpus)
        except MpsError as exc:
            for r in recs:
                r.status, r.message = "error", str(exc)
            return recs
        for r, res, ts in zip(recs, results, solo_t):
            fill(r, res, cols)
            r.indicator_source, r.wall_s, r.t_solo_s = src, time.time() - t0, ts
            if r.status == "ok" and ts and r.iter_time_mean_s:
                r.xi = r.iter_time_mean_s / ts
        return recs

    def run(self, sweep: Sweep, force: bool = False, progress: bool = True) -> Counter[str]:
        """Measure every configuration not yet in the store; returns status counts."""
        from tqdm import tqdm

        counts: Counter[str] = Counter()
        bar = tqdm(sweep.configs, desc=f"profile {sweep.name}", unit="cfg", disable=not progress)
        for cfg in bar:
            if not force and self.store.has(self.key(cfg)):
                counts["skipped"] += 1
                continue
            label = (f"{cfg.workload} b{cfg.batch}" if isinstance(cfg, SoloConfig)
                     else f"{cfg.workload} b{cfg.solo.batch} cap {cfg.share:g}%" if isinstance(cfg, CappedSoloConfig)
                     else f"{cfg.a.workload}+{cfg.b.workload} {cfg.mode}")
            bar.set_postfix_str(label)
            recs = (self.solo(cfg) if isinstance(cfg, SoloConfig) else self.capped_solo(cfg)
                    if isinstance(cfg, CappedSoloConfig) else self.pair(cfg))
            self.store.write(recs)
            counts.update(r.status for r in recs[:1])
        return counts
