"""Synthetic Philly-like trace: the embedded default (statistics in ``conf/synthetic.yaml``).

GPU counts are drawn from Philly's mix (sizes above the target cluster left out), durations by
inverse CDF from Philly's duration quantiles (1-GPU and multi-GPU jobs separately), and
``num_jobs`` arrivals from a Poisson process with a 24 h sinusoidal rate. The arrival span is set
so that, at load 1.0, the offered GPU-time sum(num_gpus * duration) equals
``target_cluster_gpus`` x span; ``LoadOptions.load`` then compresses submit times like for every
trace (load 2.0 halves the span). Deterministic for a given seed (``numpy.random.default_rng``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from pydantic import BaseModel, Field, model_validator

from schedlab import conf

from .common import LoadOptions, Raw, TraceError, make_loader

DEFAULT_CONFIG = conf.path("synthetic.yaml")


class Quantiles(BaseModel):
    probabilities: list[float]
    single_gpu_s: list[float]
    multi_gpu_s: list[float]

    @model_validator(mode="after")
    def _check(self) -> Quantiles:
        p = self.probabilities
        if p[0] != 0 or p[-1] != 1 or np.any(np.diff(p) <= 0):
            raise ValueError("probabilities must rise strictly from 0 to 1")
        for q in (self.single_gpu_s, self.multi_gpu_s):
            if len(q) != len(p) or q[0] <= 0 or np.any(np.diff(q) < 0):
                raise ValueError("quantiles must be positive, non-decreasing, one per probability")
        return self


class Diurnal(BaseModel):
    period_s: float = Field(86400.0, gt=0)
    amplitude: float = Field(ge=0, lt=1)
    peak_hour: float = 0.0


class SyntheticConfig(BaseModel):
    num_jobs: int = Field(ge=1)
    target_cluster_gpus: int = Field(ge=1)
    gpu_mix: dict[int, float]
    duration_quantiles: Quantiles
    diurnal: Diurnal


def load_config(path: Path | None = None) -> SyntheticConfig:
    """Read and validate the generator's YAML (default: ``conf/synthetic.yaml``)."""
    path = path or DEFAULT_CONFIG
    try:
        return SyntheticConfig.model_validate(yaml.safe_load(path.read_text()))
    except (OSError, ValueError) as exc:
        raise TraceError(path, f"bad synthetic config: {exc}") from None


def _arrivals(rng: np.random.Generator, n: int, span: float, d: Diurnal) -> np.ndarray:
    """n sorted arrival times on [0, span] with density proportional to the diurnal rate."""
    w, theta = 2 * np.pi / d.period_s, 2 * np.pi * d.peak_hour / 24
    grid = np.linspace(0.0, span, int(min(max(span / 60, 1000), 5_000_000)) + 1)
    cum = grid + d.amplitude / w * (np.sin(w * grid - theta) + np.sin(theta))  # integral of rate
    return np.sort(np.interp(rng.random(n) * cum[-1], cum, grid))


def generate(num_jobs: int, seed: int = 0, target_gpus: int | None = None,
             config: SyntheticConfig | None = None) -> pd.DataFrame:
    """Canonical table (job_id, submit_time, num_gpus, duration) of ``num_jobs`` synthetic jobs."""
    cfg = config or load_config()
    gpus_cap = target_gpus or cfg.target_cluster_gpus
    mix = {g: c for g, c in sorted(cfg.gpu_mix.items()) if g <= gpus_cap and c > 0}
    if not mix:
        raise TraceError("synthetic", f"no GPU size in gpu_mix fits {gpus_cap} GPUs")
    rng = np.random.default_rng(seed)
    sizes, weights = np.array(list(mix)), np.array(list(mix.values()), dtype=float)
    g = rng.choice(sizes, size=num_jobs, p=weights / weights.sum())
    q = cfg.duration_quantiles
    u = rng.random(num_jobs)
    single = np.exp(np.interp(u, q.probabilities, np.log(q.single_gpu_s)))
    multi = np.exp(np.interp(u, q.probabilities, np.log(q.multi_gpu_s)))
    dur = np.round(np.where(g == 1, single, multi), 1)
    span = float((g * dur).sum()) / gpus_cap
    return pd.DataFrame(
        {
            "job_id": [f"syn-{i:06d}" for i in range(num_jobs)],
            "submit_time": _arrivals(rng, num_jobs, span, cfg.diurnal),
            "num_gpus": g.astype("int64"),
            "duration": dur,
        }
    )


def read(path: Path | None, options: LoadOptions) -> Raw:
    """``path``: optional generator YAML; num_jobs/seed/max_gpus from the options."""
    cfg = load_config(path)
    n = options.num_jobs or cfg.num_jobs
    gpus = options.max_gpus or cfg.target_cluster_gpus
    df = generate(n, options.seed, gpus, cfg)
    df["_row"] = np.arange(1, n + 1)
    return Raw(df, f"synthetic(seed={options.seed}, num_jobs={n}, cluster_gpus={gpus})", n)


load = make_loader("synthetic", read)
