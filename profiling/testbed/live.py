"""The live backend of the policy API: the simulator's engine whose clock is the wall clock and whose
completions are real training processes ending (``docs/explanation/design.md``: one policy, two backends).

:class:`LiveEngine` *is* the simulator's :class:`~schedlab.sched.core.engine.Engine`: the cluster's GPU
bookkeeping, placement, the job records, the running set, ``by_end``, the version stamps, progress
integration, sharing checks and ξ come from it unchanged, so a shipped policy runs on it unchanged and
cannot tell the backends apart (it sees :class:`~schedlab.sched.core.protocol.PolicyEngine` only). Two
things differ:

- **the clock**: :meth:`run` waits in real time; the engine's ``now`` is trace seconds, ``first submit +
  seconds since the run began``, read once per pass (constant during a pass, as in the simulator);
- **the source of completions**: the simulator's predicted completion events are dropped
  (:meth:`_enqueue`); a job ends when its processes end (``end_time`` is the time the training process
  reported, not when the loop noticed). Timers (Tiresias' demotions, …) still come from the heap.

``start`` does the engine's bookkeeping, then launches the job's processes on the devices of the GPUs
it was given (``devices.py``, ``process.py``): the decided accumulation steps (micro-batch = per-GPU
batch / steps), the MPS active-thread share when shared under MPS, threads = the device's cores.
``preempt`` does the bookkeeping, then stops the processes at their next iteration boundary and waits
for the checkpoint (a restart resumes from it and pays the real restart). Before each scheduling pass
the running jobs' reported progress corrects the model: a job's remaining solo seconds become
``duration x (1 - iterations done / iterations)``, less the model's rate times the time since the
sample, and its start-up stall ends with its first iteration; ``expected_end`` and ``by_end`` follow
(``state_version`` is bumped, the job's own version stamp is not: its rate did not change).

It is made where a replay makes its engine (``sched.replay.run(..., engine=...)``), so the testbed's
parts (cluster, sharing model, ξ source, iteration times, policy, the result's tables) are built by
the one module that builds a replay's. Not supported here (an :class:`EngineError` says so): elastic
resizing and batch changes, Gimbal's per-worker calibration, goodput jobs, pools, lost-progress
preemptions of jobs that do not checkpoint.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from schedlab.profiling.testbed.activity import ActivityLog, start_fields
from schedlab.profiling.testbed.devices import Device
from schedlab.profiling.testbed.process import STOP_TIMEOUT_S, JobProcess, JobStart
from schedlab.sched.core.cluster import ClusterState
from schedlab.sched.core.engine import _COMPLETION, Engine, EngineError, EngineResult
from schedlab.sched.core.job import Job, JobSource
from schedlab.sched.policies.base import Policy
from schedlab.sched.traces.jobtable import JobRecords


class LiveEngine(Engine):
    """A testbed run of ``policy`` on ``devices`` (one per GPU of ``cluster``, in GPU-id order).

    ``iterations``: each job's iterations (by job id; the job records hold solo seconds);
    ``folder``: where each job's processes report (``folder/jobs/<job id>/``); ``mps``: the environment
    of an MPS client at a share (``MpsDaemon.env``), when co-located jobs share GPUs through MPS;
    ``size``: the workloads' size (``tiny`` on CPU); ``poll_s``: how often the loop looks at the
    processes; ``budget_s``: wall seconds after which unfinished jobs are killed; ``launcher``: what
    starts a job's processes (:class:`JobProcess` on this machine; ``remote.Nodes.job`` on nodes)."""

    def __init__(self, jobs: list[Job] | JobSource, cluster: ClusterState, policy: Policy, *,
                 devices: Sequence[Device], iterations: dict[str, int], folder: str | Path, size: str = "tiny",
                 mps: Callable[[float | None], dict[str, str]] | None = None, poll_s: float = 0.1,
                 progress_s: float = 0.5, budget_s: float | None = None, python: str = sys.executable,
                 clock: Callable[[], float] = time.time, launcher: Callable[..., JobStart] = JobProcess,
                 **engine_options: Any) -> None:
        if isinstance(jobs, JobSource):  # a testbed trace is small: every record made at once
            jobs = jobs.make(0, len(jobs))
        if len(devices) != cluster.total_gpus:
            raise EngineError(f"{len(devices)} devices for a cluster of {cluster.total_gpus} GPUs")
        super().__init__(jobs, cluster, policy, **engine_options)
        unsupported = [role for role in ("calibration", "goodput", "pools") if role in self.capabilities]
        if unsupported:
            raise EngineError(f"policy {policy.name}: the live backend does not support {', '.join(unsupported)} yet")
        missing = [j.job_id for j in jobs if j.model is None or j.job_id not in iterations]
        if missing:
            raise EngineError(f"job(s) {missing[:5]}: the live backend runs jobs with a workload (model, batch_size,"
                              " iterations)")
        self.devices = list(devices)
        self.iterations = iterations
        self.folder = Path(folder)
        self.size, self.mps, self.poll_s, self.progress_s = size, mps, poll_s, progress_s
        self.budget_s, self.python, self.clock, self.launcher = budget_s, python, clock, launcher
        self.log = ActivityLog()
        self.procs: dict[Job, JobStart] = {}
        self._exiting: list[JobStart] = []  # jobs done training whose processes are still exiting
        self.attempts: dict[str, int] = {}
        self._timers: list[tuple] = []
        self._applied: dict[Job, float] = {}  # the progress sample time last applied to each running job
        self._t0 = 0.0
        self._first_submit = 0.0
        self.rounded_micro_batches = 0  # starts whose per-GPU batch did not divide by the accumulation steps
        self.unfinished: list[str] = []

    # ---- the clock and the completions ---------------------------------------------------------
    def trace_time(self, wall: float) -> float:
        """Trace seconds of an epoch time."""
        return self._first_submit + (wall - self._t0)

    def _enqueue(self, event: tuple) -> None:
        """Timers keep their order; predicted completions are dropped (processes ending are the completions)."""
        if event[2] != _COMPLETION:
            heapq.heappush(self._timers, event)

    # ---- actions: the engine's bookkeeping, then the processes ---------------------------------
    def start(self, job: Job, placement: list[tuple[int, int]] | None = None, *, share_gpus: tuple[int, ...] = (),
              mode: str = "timeslice", shares: tuple[float, float] | None = None, accumulation_steps: int = 1,
              num_gpus: int | None = None) -> bool:
        if num_gpus is not None and num_gpus != job.num_gpus:
            raise EngineError(f"policy {self.policy.name}: the live backend does not resize jobs (job {job.job_id})")
        if not super().start(job, placement, share_gpus=share_gpus, mode=mode, shares=shares,
                             accumulation_steps=accumulation_steps, num_gpus=num_gpus):
            return False
        attempt = self.attempts.get(job.job_id, -1) + 1
        self.attempts[job.job_id] = attempt
        steps = job.accumulation_steps
        micro = int(job.batch_size) // steps
        if micro * steps != job.batch_size:
            self.rounded_micro_batches += 1
        share = shares[0] if mode == "mps" and share_gpus and shares else None
        devices = [self.devices[g] for g in job.gpus]
        env = None
        if self.mps is not None and devices[0].kind == "cuda":
            env = self.mps(share)  # every job a client of the daemon: a partner may join it later
        spec = {"workload": job.model, "batch": max(1, micro), "accum": steps, "size": self.size,
                "iterations": self.iterations[job.job_id], "device": devices[0].kind, "threads": devices[0].threads,
                "progress_s": self.progress_s, "seed": job.index}
        proc = self.launcher(job.job_id, self.folder / "jobs" / job.job_id, attempt, spec, devices, env, self.python)
        launched = proc.launch()
        self.procs[job] = proc
        self.log.add(self.now, "start", job.job_id, **start_fields(job, mode, shares),
                     devices=[d.label for d in devices], attempt=attempt, launched=self.trace_time(launched),
                     **({"mps_share": share} if share is not None else {}))
        return True

    def preempt(self, job: Job, *, lose_progress: bool | None = None) -> None:
        if (job.checkpoint is False if lose_progress is None else lose_progress):
            raise EngineError(f"policy {self.policy.name}: the live backend keeps every job's progress"
                              f" (job {job.job_id} would lose it)")
        proc = self.procs.pop(job, None)
        super().preempt(job, lose_progress=False)
        if proc is None:
            return
        proc.request_stop()
        code = proc.wait(STOP_TIMEOUT_S)
        self._read_samples(job, proc)
        result = proc.result()
        if code != 0 or result is None:
            raise proc.failure(code)
        done = int(result["done"])
        job.remaining = job.duration * (1.0 - done / self.iterations[job.job_id])
        self._applied.pop(job, None)
        self.log.add(self.now, "preempt", job.job_id, done=done, stopped=self.trace_time(result["t_end"]),
                     attempt=proc.attempt)

    def resize(self, job: Job, num_gpus: int, placement=None, release=None) -> bool:
        raise EngineError(f"policy {self.policy.name}: the live backend does not resize jobs (job {job.job_id})")

    def set_batch(self, job: Job, global_batch: int) -> None:
        raise EngineError(f"policy {self.policy.name}: the live backend does not change batches (job {job.job_id})")

    def stalled(self, job: Job) -> bool:
        """Whether running ``job`` has not yet done its first iteration since its (re)start (the model's
        stall, until its progress says it is over)."""
        return job.overhead_left > 0.0 and super().stalled(job)

    # ---- progress ------------------------------------------------------------------------------
    def _read_samples(self, job: Job, proc: JobStart) -> None:
        total = self.iterations[job.job_id]
        for s in proc.samples():
            if s["event"] == "ready":  # the model is built (and the checkpoint read): start-up is over
                self.log.add(self.trace_time(s["t"]), "progress", job.job_id, done=s["done"], iterations=total,
                             attempt=proc.attempt, ready=True, cores=s["cores"], threads=s["threads"])
            elif s["event"] == "progress":
                self.log.add(self.trace_time(s["t"]), "progress", job.job_id, done=s["done"], iterations=total,
                             attempt=proc.attempt)

    def _correct(self) -> None:
        """Running jobs' remaining work and expected end from their latest progress (module docstring)."""
        corrected = False
        for job, proc in self.procs.items():
            self._read_samples(job, proc)
            sample = proc.latest
            if sample is None or sample["event"] == "ready" or self._applied.get(job) == sample["t"]:
                continue
            self._applied[job] = sample["t"]
            self._settle(job)  # the engine's integrals (pace, shared seconds) up to now
            left = job.duration * (1.0 - sample["done"] / self.iterations[job.job_id])
            since = max(0.0, self.now - self.trace_time(sample["t"]))
            job.remaining = max(0.0, left - since * job.rate)
            job.overhead_left = 0.0  # an iteration ended: the start-up is over
            key = (self._completion_time(job), job.index, job)
            if self._by_end is not None and job.end_key is not None:
                self._by_end.remove(job.end_key)
                self._by_end.add(key)
            job.end_key = key
            corrected = True
        if corrected:
            self.state_version += 1

    # ---- the loop ------------------------------------------------------------------------------
    def run(self) -> EngineResult:
        """Run every job to its end (or until the budget: :attr:`unfinished` names the jobs then killed)."""
        arrivals: list[Job] = self.jobs  # type: ignore[assignment]
        n = len(arrivals)
        policy, cluster = self.policy, self.cluster
        self._t0 = self.clock()
        self._first_submit = self.now = arrivals[0].submit_time if n else 0.0
        first_submit, i, done, passes = self.now, 0, 0, 0
        busy_s = shared_s = 0.0
        last = self.now
        try:
            while done < n:
                wall = self.trace_time(self.clock())
                if self.budget_s is not None and wall - first_submit > self.budget_s:
                    break
                changed = False
                for job, end, attempt, iterations in self._ended():  # at the times the processes reported
                    busy_s, shared_s, last = self._advance(max(last, min(end, wall)), busy_s, shared_s, last)
                    self._complete(job)
                    self.log.add(self.now, "end", job.job_id, done=iterations, attempt=attempt, exited=end)
                    done += 1
                    changed = True
                busy_s, shared_s, last = self._advance(max(last, wall), busy_s, shared_s, last)
                due = (self._timers and self._timers[0][0] <= self.now) or (i < n and arrivals[i].submit_time <= self.now)
                if changed or due:
                    self._correct()  # what the policy reads from here on: the running jobs' measured progress
                while self._timers and self._timers[0][0] <= self.now:
                    policy.on_timer(self, heapq.heappop(self._timers)[3])
                    changed = True
                while i < n and arrivals[i].submit_time <= self.now:
                    self.log.add(arrivals[i].submit_time, "submit", arrivals[i].job_id, seen=self.now)
                    policy.on_arrival(self, arrivals[i])
                    i += 1
                    changed = True
                if changed:
                    policy.schedule(self)
                    passes += 1
                    busy = cluster.total_gpus - cluster.free_gpus
                    if not self._timeline or self._timeline[-1][1] != busy:
                        self._timeline.append((self.now, busy))
                if done < n:
                    self._sleep(arrivals[i].submit_time if i < n else math.inf)
        finally:
            for proc in [*self.procs.values(), *self._exiting]:
                proc.kill()
        self.unfinished = [j.job_id for j in arrivals if not j.finished]
        self._busy_gpu_seconds, self._shared_gpu_seconds = busy_s, shared_s
        self._records = JobRecords.for_jobs(arrivals)
        return EngineResult(jobs=arrivals, busy_gpu_seconds=busy_s, total_gpus=cluster.total_gpus,
                            first_submit=first_submit if n else 0.0, last_end=self.last_end() if n else 0.0,
                            utilization_timeline=self._timeline, scheduling_passes=passes,
                            shared_gpu_seconds=shared_s, records=self._records)

    def _advance(self, now: float, busy_s: float, shared_s: float, last: float) -> tuple[float, float, float]:
        """Move the clock to ``now``: GPU-seconds busy and shared since the last move."""
        elapsed = now - last
        busy_s += elapsed * (self.cluster.total_gpus - self.cluster.free_gpus)
        shared_s += elapsed * self.cluster.double_gpus
        self.now = now
        return busy_s, shared_s, now

    def _ended(self) -> list[tuple[Job, float, int, int]]:
        """``(job, reported end, attempt, iterations done)`` of the jobs whose training has ended (their
        processes wrote their result; they may still be exiting), soonest end first. A process that
        failed stops the run (its log quoted)."""
        ended = []
        for job, proc in list(self.procs.items()):
            result = proc.result()
            if result is None or result.get("status") != "done":
                code = proc.poll()
                if code is None:
                    continue
                result = proc.result()  # written just before it exited
                if code != 0 or result is None or result.get("status") != "done":
                    raise proc.failure(code)
            self._read_samples(job, proc)
            del self.procs[job]
            self._exiting.append(proc)
            self._applied.pop(job, None)
            ended.append((job, self.trace_time(result["t_end"]), proc.attempt, int(result["done"])))
        self._exiting = [p for p in self._exiting if p.poll() is None]
        return sorted(ended, key=lambda e: (e[1], e[0].index))

    def _sleep(self, next_arrival: float) -> None:
        """Until the next poll, or sooner for an arrival or a timer due before it."""
        soonest = min(next_arrival, self._timers[0][0] if self._timers else math.inf)
        wait = min(self.poll_s, max(0.0, soonest - self.trace_time(self.clock())))
        time.sleep(max(wait, 0.001))
