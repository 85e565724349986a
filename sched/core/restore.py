"""Overheads by GPU count. The checkpoint-restore overhead: seconds a preempted job pays (holding its
GPUs, making no progress) when it restarts. One figure for every job (the default: the policy's, e.g.
63 s, Lyra §7.5), or a table by the GPU count the job restarts on, as the Helios simulator charges
(HeliosArtifact, ``framework/QSSF Service/policies/policy.py``, ``ckpt_overhead``: 7 s at 1 GPU, 30 s
up to 8, 60 s above; commit bdaae10). The allocation stall (every start and resize) takes the same
forms, by the GPU count the job starts or resizes to: the testbed measures a multi-device job's
start-up apart (its ranks meet before the first iteration). Parsed and validated here only:
:class:`~schedlab.sched.replay.ReplaySpec`, the experiment spec and the CLI call
:func:`restore_overhead`.

A table is written ``"1:7,8:30,inf:60"`` (up to 1 GPU 7 s, up to 8 GPUs 30 s, more 60 s), as a
mapping ``{1: 7, 8: 30, inf: 60}`` or by a preset name (:data:`PRESETS`); its last bound must be
``inf`` so that every GPU count has a figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: named tables
PRESETS: dict[str, str] = {"helios": "1:7,8:30,inf:60"}


@dataclass(frozen=True)
class RestoreTable:
    """Restore seconds by GPU count: ``rows`` are ``(most GPUs, seconds)``, bounds rising, the last ``inf``."""

    rows: tuple[tuple[float, float], ...]

    def seconds(self, gpus: int) -> float:
        """The overhead of a job restarting on ``gpus`` GPUs."""
        for bound, seconds in self.rows:
            if gpus <= bound:
                return seconds
        raise AssertionError("the last bound is inf")

    def __str__(self) -> str:
        return ",".join(f"{'inf' if math.isinf(bound) else int(bound)}:{seconds:g}" for bound, seconds in self.rows)


RESTORE = "checkpoint-restore overhead"
STALL = "allocation stall"


def restore_overhead(value: Any, what: str = RESTORE) -> float | RestoreTable | None:
    """``value`` as the engine takes it: None (the policy's default), seconds >= 0, or a
    :class:`RestoreTable`; ``what`` names the overhead in errors. A ValueError says what is wrong."""
    if value is None or isinstance(value, RestoreTable):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{what}: {value!r} is neither seconds nor a table")
    if isinstance(value, (int, float)):
        return _seconds(value, what)
    if isinstance(value, str):
        text = PRESETS.get(value.strip(), value)
        try:
            return _seconds(float(text), what)
        except ValueError:
            pass
        pairs = [part.split(":") for part in text.split(",")]
        if not all(len(pair) == 2 for pair in pairs):
            raise ValueError(f"{what} {value!r}: expected seconds, a table"
                             f" 'GPUS:SECONDS,...,inf:SECONDS' (e.g. {PRESETS['helios']!r}) or one of"
                             f" {sorted(PRESETS)}") from None
        return _table(pairs, value, what)
    if isinstance(value, Mapping):
        return _table(list(value.items()), value, what)
    raise ValueError(f"{what}: {value!r} is neither seconds nor a table")


def canonical(value: Any, what: str = RESTORE) -> float | str | None:
    """What a spec stores: None, seconds, or a table's canonical text."""
    parsed = restore_overhead(value, what)
    return str(parsed) if isinstance(parsed, RestoreTable) else parsed


def _seconds(value: Any, what: str) -> float:
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"{what}: {value!r} must be a finite number of seconds >= 0")
    return seconds


def _table(pairs: list, value: Any, what: str) -> RestoreTable:
    rows = []
    for bound, seconds in pairs:
        where = f"{what} {value!r}, entry {bound!r}"
        try:
            gpus = float(str(bound).strip())
        except ValueError:
            raise ValueError(f"{where}: the GPU bound must be a whole number >= 1 or inf") from None
        if not (math.isinf(gpus) and gpus > 0 or gpus >= 1 and gpus == int(gpus)):
            raise ValueError(f"{where}: the GPU bound must be a whole number >= 1 or inf")
        try:
            number = float(str(seconds).strip())
        except ValueError:
            raise ValueError(f"{where}: {seconds!r} is not a number of seconds") from None
        rows.append((gpus, _seconds(number, where)))
    bounds = [bound for bound, _ in rows]
    if bounds != sorted(set(bounds)):
        raise ValueError(f"{what} {value!r}: GPU bounds must rise, each once")
    if not math.isinf(bounds[-1]):
        raise ValueError(f"{what} {value!r}: the last bound must be inf (a figure for"
                         " every GPU count)")
    return RestoreTable(tuple(rows))
