"""Activity logs: what happened to each job of a run, one record per event, as the testbed and the
replay both write them (JSON lines), so that the comparison (``compare.py``) reads two logs alike.

Events (``t`` in trace seconds, the replay's clock):

- ``submit``: the trace's submit time (``seen``: when the engine handed the job to the policy);
- ``start``: a (re)start: ``gpus``, ``partners`` (jobs already on those GPUs), ``accumulation_steps``,
  ``micro_batch``, ``mode`` and ``shares`` as decided; the testbed adds ``devices``, ``attempt`` and
  ``launched`` (when its processes were started);
- ``progress``: (testbed) a sample the training process reported: ``done`` of ``iterations``; the first
  of each start has ``ready`` (its model built, before its first iteration), ``cores`` and ``threads``;
- ``preempt``: a stop; the testbed adds ``done`` (iterations checkpointed) and ``stopped`` (when its
  processes had saved and exited);
- ``end``: completion (the testbed adds ``done``).

:class:`Recorder` is what a replay runs in place of its policy to write the same log
(``sched.replay.run``'s ``wrap_policy``): the policy, unchanged, sees an engine that records its
``start`` and ``preempt`` calls.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from schedlab.sched.core.job import Job
from schedlab.sched.policies.base import Policy, PolicyWrapper

EVENTS = ("submit", "start", "progress", "preempt", "end")
DECISIONS = ("start", "preempt")


def start_fields(job: Job, mode: str, shares: tuple[float, float] | None) -> dict[str, Any]:
    """What a start decided, read from the job just started (the same for the testbed and the replay)."""
    partners = sorted(p.job_id for p in job.partners) if job.partners else []
    steps = job.accumulation_steps
    return {"gpus": sorted(job.gpus), "partners": partners, "accumulation_steps": steps,
            "micro_batch": job.batch_size / steps if job.batch_size == job.batch_size else None,
            "mode": mode if partners else None, "shares": list(shares) if partners and shares else None}


class ActivityLog:
    """One run's events in the order they happened."""

    def __init__(self, records: Iterable[dict[str, Any]] = ()) -> None:
        self.records: list[dict[str, Any]] = list(records)

    def add(self, t: float, event: str, job: str, **fields: Any) -> dict[str, Any]:
        if event not in EVENTS:
            raise ValueError(f"unknown activity {event!r}; known: {', '.join(EVENTS)}")
        record = {"t": float(t), "event": event, "job": job, **fields}
        self.records.append(record)
        return record

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def of(self, *events: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["event"] in events]

    def decisions(self) -> list[dict[str, Any]]:
        """The scheduling decisions (starts and preemptions), in the order they were taken."""
        return self.of(*DECISIONS)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as f:
            for record in self.records:
                f.write(json.dumps(record, allow_nan=False, default=_plain) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def read(cls, path: str | Path) -> ActivityLog:
        records = []
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}, line {number}: not JSON ({err.msg})") from None
                missing = [k for k in ("t", "event", "job") if k not in record]
                if missing or record.get("event") not in EVENTS:
                    raise ValueError(f"{path}, line {number}: an activity needs t, event (one of {', '.join(EVENTS)})"
                                     f" and job; {'missing ' + ', '.join(missing) if missing else 'got ' + repr(record['event'])}")
                records.append(record)
        return cls(records)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON: {value!r}")


def completeness(log: ActivityLog, job_ids: Iterable[str]) -> list[str]:
    """What is wrong with ``log`` as the complete record of a run of ``job_ids`` (empty: nothing):
    every job submitted once, started at least once, ended exactly once and last; each start after
    the first follows a preemption; no event of a job outside the trace."""
    expected = list(job_ids)
    known = set(expected)
    counts: dict[str, Counter] = {j: Counter() for j in expected}
    problems = []
    order: dict[str, list[str]] = {j: [] for j in expected}
    for record in log:
        job = record["job"]
        if job not in known:
            problems.append(f"job {job}: {record['event']} of a job not in the trace")
            continue
        counts[job][record["event"]] += 1
        if record["event"] != "progress":
            order[job].append(record["event"])
    for job in expected:
        c = counts[job]
        if c["submit"] != 1:
            problems.append(f"job {job}: submitted {c['submit']} times")
        if c["start"] < 1:
            problems.append(f"job {job}: never started")
        if c["end"] != 1:
            problems.append(f"job {job}: ended {c['end']} times")
        if c["start"] != c["preempt"] + 1 and c["start"]:
            problems.append(f"job {job}: {c['start']} starts but {c['preempt']} preemptions")
        if order[job] and order[job][-1] != "end" and c["end"]:
            problems.append(f"job {job}: {order[job][-1]} after its end")
    return problems


class _RecordingEngine:
    """The engine as a recorded policy sees it: everything forwarded, ``start`` and ``preempt`` logged."""

    __slots__ = ("_engine", "_log", "_policy")

    def __init__(self, engine: Any, log: ActivityLog, policy: Policy) -> None:
        self._engine, self._log, self._policy = engine, log, policy

    def __getattr__(self, name: str) -> Any:
        return self._policy if name == "policy" else getattr(self._engine, name)

    def start(self, job: Job, placement: list[tuple[int, int]] | None = None, *, share_gpus: tuple[int, ...] = (),
              mode: str = "timeslice", shares: tuple[float, float] | None = None, accumulation_steps: int = 1,
              num_gpus: int | None = None) -> bool:
        started = self._engine.start(job, placement, share_gpus=share_gpus, mode=mode, shares=shares,
                                     accumulation_steps=accumulation_steps, num_gpus=num_gpus)
        if started:
            self._log.add(self._engine.now, "start", job.job_id, **start_fields(job, mode, shares))
        return started

    def preempt(self, job: Job, *, lose_progress: bool | None = None) -> None:
        self._engine.preempt(job, lose_progress=lose_progress)
        self._log.add(self._engine.now, "preempt", job.job_id)

    def accumulating(self, job: Job, steps: int) -> AbstractContextManager[None]:
        return self._engine.accumulating(job, steps)


class Recorder(PolicyWrapper):
    """``inner``, unchanged, with its decisions, arrivals and completions written to ``log``."""

    def __init__(self, inner: Policy, log: ActivityLog) -> None:
        super().__init__(inner)
        self.log = log
        self._view: _RecordingEngine | None = None

    def _engine(self, engine: Any) -> _RecordingEngine:
        if self._view is None:
            self._view = _RecordingEngine(engine, self.log, self.inner)
        return self._view

    def on_arrival(self, engine: Any, job: Job) -> None:
        self.log.add(job.submit_time, "submit", job.job_id, seen=engine.now)
        self.inner.on_arrival(self._engine(engine), job)

    def on_finish(self, engine: Any, job: Job) -> None:
        self.log.add(engine.now, "end", job.job_id)
        self.inner.on_finish(self._engine(engine), job)

    def on_timer(self, engine: Any, payload: Any) -> None:
        self.inner.on_timer(self._engine(engine), payload)

    def on_epoch(self, engine: Any, job: Job) -> None:
        self.inner.on_epoch(self._engine(engine), job)

    def schedule(self, engine: Any) -> None:
        self.inner.schedule(self._engine(engine))
