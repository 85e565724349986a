"""Sweep definitions and the resumable sweep loop (Castor §7: offline profiling over
job configurations; §6.2: every pair of jobs labelled with its interference ratio ξ).

A sweep YAML (``conf/sweeps/NAME.yaml``) has a ``solo`` grid (workloads x batch x
accumulation x GPUs) and a ``pair`` grid (workload pairs x batch x mode x MPS split).
Gimbal's MPS-cap curves (spec ``gimbal.md`` §5, M6): ``solo.mps_caps`` adds, for every one-GPU
solo configuration, a run alone under each active-thread cap (σ(p)); ``pair.mps_caps`` adds the
splits ``(100, p)`` and ``(p, 100)`` for each cap p (Gimbal squeezes one side only, §4.1).
Every configuration has a key hashed from what it measures and where; configurations
already in the store are skipped unless ``force``.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import yaml

from schedlab import conf
from schedlab.checks import load_yaml

SWEEP_DIR = conf.path("sweeps")


@dataclass(frozen=True)
class SoloConfig:
    """One job configuration (a solo run, or one member of a pair)."""

    workload: str
    batch: int
    accum: int = 1
    gpus: int = 1
    size: str = "tiny"
    amp: bool = False
    warmup: int = 3
    iters: int = 10
    threads: Optional[int] = None
    min_seconds: float = 0.0

    def spec(self, device: str) -> dict[str, Any]:
        return {"workload": self.workload, "batch": self.batch, "accum": self.accum, "size": self.size,
                "amp": self.amp, "warmup": self.warmup, "iters": self.iters, "threads": self.threads,
                "min_seconds": self.min_seconds, "device": device}


@dataclass(frozen=True)
class PairConfig:
    """Two jobs co-located on the same GPU(s)."""

    a: SoloConfig
    b: SoloConfig
    mode: str = "timeslice"  # timeslice | mps
    share: tuple[Optional[float], Optional[float]] = (None, None)


@dataclass(frozen=True)
class CappedSoloConfig:
    """A solo run alone on its GPU(s) under an MPS active-thread cap (percent): Gimbal's squeezed
    worker on an unshared GPU, σ(p) (docs/explanation/gimbal.md; kind ``solo-mps`` in the store)."""

    solo: SoloConfig
    share: float

    @property
    def workload(self) -> str:
        return self.solo.workload


Config = Union[SoloConfig, PairConfig, CappedSoloConfig]


class SweepError(ValueError):
    """A bad sweep definition; the message names the field."""


@dataclass
class Sweep:
    name: str
    configs: list[Config] = field(default_factory=list)
    timeout_s: float = 600.0
    interval_s: float = 1.0
    device: str = "auto"


def config_key(cfg: Config, device: str, gpus: list[str], host: Optional[str] = None) -> str:
    """Stable hash of what is measured and where (host, device, GPU ids)."""
    kind = "pair" if isinstance(cfg, PairConfig) else "solo-mps" if isinstance(cfg, CappedSoloConfig) else "solo"
    body = {"kind": kind, "cfg": asdict(cfg), "device": device,
            "host": host or socket.gethostname(), "gpus": gpus if device == "cuda" or gpus != ["0"] else ["0"]}
    return hashlib.sha1(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _whole(v: Any, where: str, minimum: int = 1) -> int:
    """A count from a sweep file: an integer >= ``minimum`` (YAML ``true`` is not a number)."""
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise SweepError(f"{where}: a whole number >= {minimum}, got {v!r}")
    return v


def _seconds(v: Any, where: str, minimum: float = 0.0) -> float:
    """A duration from a sweep file: a finite number >= ``minimum`` (YAML ``true`` is not a number)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < minimum:
        raise SweepError(f"{where}: a finite number >= {minimum:g}, got {v!r}")
    return float(v)


def _settings(d: dict[str, Any], where: str) -> None:
    """Check the common settings present in ``d`` (a sweep or one of its phases)."""
    for key, minimum in (("warmup", 0), ("iters", 1), ("threads", 1)):
        if d.get(key) is not None:
            _whole(d[key], f"{where}{key}", minimum)
    for key, minimum in (("min_seconds", 0.0), ("timeout_s", 1e-9)):
        if key in d:
            _seconds(d[key], f"{where}{key}", minimum)


def _per_workload(v: Any, w: str) -> list[Any]:
    """Grid values given as a list, a scalar, or a {workload: list, default: list} map."""
    if isinstance(v, dict):
        v = v.get(w, v.get("default"))
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _solo_grid(g: dict[str, Any], common: dict[str, Any]) -> Iterator[SoloConfig]:
    for w in g["workloads"]:
        for b, acc, n in itertools.product(_per_workload(g.get("batch", 8), w), _per_workload(g.get("accum", 1), w),
                                           _per_workload(g.get("gpus", 1), w)):
            yield SoloConfig(w, _whole(b, f"solo.batch ({w})"), _whole(acc, f"solo.accum ({w})"),
                             _whole(n, f"solo.gpus ({w})"), **common)


def _pair_grid(g: dict[str, Any], common: dict[str, Any], solo_workloads: list[str]) -> Iterator[PairConfig]:
    pairs = g.get("workloads", "all")
    if pairs == "all":
        pairs = list(itertools.combinations_with_replacement(solo_workloads, 2))
    for wa, wb in pairs:
        for b in _pair_batches(g.get("batch", 8), wa, wb):
            ba, bb = (b, b) if not isinstance(b, (list, tuple)) else b
            n, accum = _whole(g.get("gpus", 1), "pair.gpus"), _whole(g.get("accum", 1), "pair.accum")
            a = SoloConfig(wa, _whole(ba, f"pair.batch ({wa}+{wb})"), accum, n, **common)
            bcfg = SoloConfig(wb, _whole(bb, f"pair.batch ({wa}+{wb})"), accum, n, **common)
            for mode in g.get("modes", ["timeslice"]):
                splits = _splits(g) if mode == "mps" else [[None, None]]
                for sa, sb in splits:
                    yield PairConfig(a, bcfg, mode, (sa, sb))


def _pair_batches(v: Any, wa: str, wb: str) -> list[Any]:
    """A pair's batch sizes: a list or scalar for every pair; a map by ``"a+b"`` (then ``default``);
    or, when the map names neither, each workload's own list (``{cifar10: [128], bert: [16]}``: the pair
    cifar10+bert runs at (128, 16), so both sides match a solo configuration of the same map)."""
    if isinstance(v, dict) and f"{wa}+{wb}" not in v and "default" not in v:
        if wa not in v or wb not in v:
            raise SweepError(f"pair.batch: no entry for {wa}+{wb}, {wa} and {wb}, or default")
        return [[x, y] for x in _per_workload(v, wa) for y in _per_workload(v, wb)]
    return _per_workload(v, f"{wa}+{wb}")


def _caps(g: dict[str, Any], where: str) -> list[float]:
    caps = g.get("mps_caps") or []
    if not isinstance(caps, (list, tuple)) or not all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and 0 < c <= 100 for c in caps):
        raise SweepError(f"{where}.mps_caps: a list of active-thread percentages in (0, 100], got {caps!r}")
    return list(caps)


def _splits(g: dict[str, Any]) -> list[list[Any]]:
    """``mps_split`` (default [[50, 50]] unless ``mps_caps`` is given) plus (100, p), (p, 100) per cap;
    values kept as written (they enter the configuration keys)."""
    caps = _caps(g, "pair")
    splits = [list(x) for x in g.get("mps_split", [] if caps else [[50, 50]])]
    for split in splits:
        if len(split) != 2 or not all(isinstance(c, (int, float)) and 0 < c <= 100 for c in split):
            raise SweepError(f"pair.mps_split: pairs of percentages in (0, 100], got {split!r}")
    for c in caps:
        splits += [[100, c], [c, 100]]
    out: list[list[Any]] = []
    seen: set[tuple[float, float]] = set()
    for split in splits:
        if (key := (float(split[0]), float(split[1]))) not in seen:
            seen.add(key)
            out.append(split)
    return out


def _capped_grid(g: dict[str, Any], solos: list[SoloConfig]) -> Iterator[CappedSoloConfig]:
    caps = [c for c in _caps(g, "solo") if c < 100]  # 100 % is the plain solo run
    for cfg in solos:
        if cfg.gpus == 1:
            for c in caps:
                yield CappedSoloConfig(cfg, c)


def find(name_or_path: str) -> Path:
    """A sweep file path, or the name of one in ``conf/sweeps/``."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    cand = SWEEP_DIR / f"{name_or_path}.yaml"
    if cand.exists():
        return cand
    known = sorted(x.stem for x in SWEEP_DIR.glob("*.yaml"))
    raise FileNotFoundError(f"no sweep {name_or_path!r} (a YAML path, or one of {known})")


_COMMON = ("size", "amp", "warmup", "iters", "threads", "min_seconds")


def _grids(d: dict[str, Any], common: dict[str, Any], solo_workloads: list[str]) -> list[Config]:
    """One phase's configurations: its solo grid, its capped solos, then its pair grid."""
    configs: list[Config] = []
    solo = d.get("solo") or {}
    if solo:
        solos = list(_solo_grid(solo, common))
        configs += solos
        configs += list(_capped_grid(solo, solos))
    if d.get("pair"):
        configs += list(_pair_grid(d["pair"], common, list(solo.get("workloads", solo_workloads))))
    return configs


def parse(d: dict[str, Any], name: str = "sweep") -> Sweep:
    """Build a sweep from its YAML mapping.  ``phases`` (a list of ``{solo, pair}`` grids, each may
    override the common settings) orders the measurements: phase 1's configurations run first, so a sweep
    stopped by a deadline has measured what its author valued most.  A phase's ``pair: {workloads: all}``
    pairs the workloads of its own solo grid, else those of every phase's solo grid."""
    _settings(d, "")
    common = {k: d[k] for k in _COMMON if k in d}
    phases = d.get("phases")
    if phases is not None and (not isinstance(phases, list) or not all(isinstance(p, dict) for p in phases)):
        raise SweepError(f"phases: a list of mappings with solo/pair grids, got {phases!r}")
    every_solo = [w for p in (phases or [d]) for w in ((p.get("solo") or {}).get("workloads") or [])]
    every_solo = list(dict.fromkeys(every_solo))
    configs: list[Config] = []
    for i, phase in enumerate(phases or [d]):
        unknown = set(phase) - {"name", "solo", "pair", *_COMMON} if phases else set()
        if unknown:
            raise SweepError(f"phases[{i}]: unknown keys {sorted(unknown)} (allowed: name, solo, pair, {', '.join(_COMMON)})")
        if phases:
            _settings(phase, f"phases[{i}].")
        configs += _grids(phase, {**common, **{k: phase[k] for k in _COMMON if k in phase}}, every_solo)
    seen: set[str] = set()
    unique = [c for c in configs if not (repr(c) in seen or seen.add(repr(c)))]  # type: ignore[func-returns-value]
    interval = _seconds((d.get("collect") or {}).get("interval_s", 1.0), "collect.interval_s", 0.1)
    return Sweep(d.get("name", name), unique, float(d.get("timeout_s", 600)), interval, d.get("device", "auto"))


def mapping(text: str, source: str | Path) -> dict[str, Any]:
    """A sweep's YAML text as a mapping (empty text: ``{}``); a key given twice or bad YAML is a
    SweepError naming ``source`` and the line."""
    try:
        raw = load_yaml(text) or {}
    except yaml.YAMLError as err:
        raise SweepError(f"{source}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise SweepError(f"{source}: a sweep is a mapping of fields, got {type(raw).__name__}")
    return raw


def load(name_or_path: str) -> Sweep:
    path = find(name_or_path)
    return parse(mapping(path.read_text(), path), path.stem)
