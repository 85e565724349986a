"""``schedlab status``: what the project's stores hold and what is running.

- the tracking store and artifact root in use;
- each experiment's comparison run with its replays done / running / failed / queued;
- runs left RUNNING by a process that is gone: replay runs whose owner is dead or whose lease expired
  (:func:`schedlab.tasks.tracking.is_live`), comparison runs whose experiment nobody holds
  (:func:`schedlab.flows.lifecycle.experiment_lock`); ``mark_killed`` ends them ``KILLED``;
- the deployments of the configured Prefect server (``PREFECT_API_URL``): cron and next run.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from schedlab import settings


@dataclass
class ExperimentStatus:
    name: str
    run_id: str
    status: str  # the comparison run's
    started: str
    counts: dict[str, int]  # done, running, failed, queued
    held: bool  # a live process runs the experiment (holds its lock)


@dataclass
class Status:
    tracking_uri: str
    artifact_root: str
    experiments: list[ExperimentStatus] = field(default_factory=list)
    stale: list[tuple[str, str, str]] = field(default_factory=list)  # (experiment, run name, run id)
    schedules: list[str] | None = None  # None: no Prefect server configured
    killed: list[str] = field(default_factory=list)


def _started(ms: int | None) -> str:
    return datetime.datetime.fromtimestamp((ms or 0) / 1000).strftime("%Y-%m-%d %H:%M")


def collect(mark_killed: bool = False) -> Status:
    """Read the tracking store (and the Prefect server when one is configured); with ``mark_killed``,
    end the stale runs KILLED."""
    from schedlab.flows import lifecycle
    from schedlab.tasks import tracking
    from schedlab.tasks.locks import is_locked

    home = settings.Settings.from_env().apply().home
    uri = settings.tracking_uri(home)
    tracking.check_tracking(uri)
    remote = uri.startswith(("http://", "https://"))
    status = Status(uri, "(the tracking server's)" if remote else str(settings.artifact_root(home)))
    c = tracking.client(uri)
    for exp in tracking.retrying(lambda: c.search_experiments(max_results=1000)):
        parents = tracking.runs_with_tag(uri, exp.experiment_id, tracking.KIND_TAG, ["experiment"])
        if not parents:
            continue
        replays = tracking.runs_with_tag(uri, exp.experiment_id, tracking.KIND_TAG, ["replay"])
        held = not remote and is_locked(lifecycle.lock_path(uri, exp.name))
        for parent in sorted(parents, key=lambda r: r.info.start_time or 0):
            mine = [r for r in replays if r.data.tags.get(tracking.PARENT_TAG) == parent.info.run_id]
            counts = {"done": sum(r.info.status == "FINISHED" for r in mine),
                      "running": sum(r.info.status == "RUNNING" and tracking.is_live(r) for r in mine),
                      "failed": sum(r.info.status == "FAILED" for r in mine)}
            total = int(parent.data.params.get("replays", 0) or 0)
            counts["queued"] = max(total - sum(counts.values()), 0) if parent.info.status == "RUNNING" and held else 0
            status.experiments.append(ExperimentStatus(exp.name, parent.info.run_id, parent.info.status,
                                                       _started(parent.info.start_time), counts, held))
            if parent.info.status == "RUNNING" and not held:
                status.stale.append((exp.name, parent.info.run_name, parent.info.run_id))
        status.stale += [(exp.name, r.info.run_name, r.info.run_id) for r in replays
                         if r.info.status == "RUNNING" and not tracking.is_live(r)]
    if mark_killed:
        for _, _, run_id in status.stale:
            tracking.retrying(lambda: c.set_terminated(run_id, status="KILLED"))
            status.killed.append(run_id)
    status.schedules = schedules()
    return status


def schedules() -> list[str] | None:
    """One line per deployment of the Prefect server at ``PREFECT_API_URL``: each cron schedule and its
    next run (from the cron, as the server's scheduler computes it; "paused" when the schedule is off,
    as ``schedlab serve`` leaves it when stopped); None when no server is configured (the ephemeral
    API keeps no schedule)."""
    settings.Settings.from_env().apply().prefect_ready()
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        return None
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.server.schemas.schedules import CronSchedule

    lines = []
    try:
        with get_client(sync_client=True) as prefect:
            deployments = prefect.read_deployments()
    except Exception as err:  # noqa: BLE001 - one line of status, not a failed command
        return [f"Prefect server {PREFECT_API_URL.value()} cannot be read: {err}"]
    for deployment in deployments:
        crons = [s for s in deployment.schedules if getattr(s.schedule, "cron", None)]
        parts = []
        for item in crons:
            timezone = item.schedule.timezone or "UTC"  # the server's default
            cron = CronSchedule(cron=item.schedule.cron, timezone=timezone)
            if item.active and not deployment.paused:
                (when,) = asyncio.run(cron.get_dates(n=1))
                nxt = f"next run {when.strftime('%Y-%m-%d %H:%M %Z')}"
            else:
                nxt = "paused"
            parts.append(f"cron '{item.schedule.cron}' ({timezone}), {nxt}")
        lines.append(f"{deployment.name}: " + ("; ".join(parts) or "no cron schedule"))
    return lines


def render(status: Status) -> str:
    lines = [f"tracking store: {status.tracking_uri}", f"artifact root:  {status.artifact_root}", ""]
    if status.experiments:
        width = max(len("experiment"), *(len(e.name) for e in status.experiments))
        lines.append(f"{'experiment'.ljust(width)}  {'started':16}  {'comparison':10}  done  running  failed  queued")
        for e in status.experiments:
            c = e.counts
            lines.append(f"{e.name.ljust(width)}  {e.started:16}  {e.status:10}  {c['done']:4d}  {c['running']:7d}"
                         f"  {c['failed']:6d}  {c['queued']:6d}" + ("  (running now)" if e.held else ""))
    else:
        lines.append("no experiment in the tracking store yet")
    if status.stale:
        verb = "marked KILLED" if status.killed else "left RUNNING by a process that is gone (--mark-killed ends them)"
        lines += ["", f"{len(status.stale)} run(s) {verb}:"]
        lines += [f"  {name}: {run_name} ({run_id})" for name, run_name, run_id in status.stale]
    lines.append("")
    if status.schedules is None:
        lines.append("schedules: none (no Prefect server configured: PREFECT_API_URL is unset; `schedlab serve` needs one)")
    else:
        lines += ["schedules:"] + [f"  {line}" for line in status.schedules or ["no deployment on the Prefect server"]]
    return "\n".join(lines)

