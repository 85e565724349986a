"""``schedlab serve``: register a flow's cron schedule with a running Prefect server and serve it.

The schedule lives on the server as a deployment; this process executes its runs. Stopping it
(Ctrl-C, SIGTERM) pauses the schedule (Prefect's ``pause_on_shutdown``), so no run piles up
while nothing serves it; starting it again resumes the schedule.
"""

from __future__ import annotations

import importlib
import urllib.error
import urllib.request
from typing import Any

DEFAULT_FLOW = "schedlab.flows.nightly:nightly_profile"
DEFAULT_CRON = "0 2 * * *"
DEFAULT_TIMEZONE = "UTC"


class ServeError(RuntimeError):
    pass


def load_flow(path: str):
    """``package.module:attribute`` -> the Prefect flow object."""
    from prefect import Flow

    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ServeError(f"--flow {path!r}: expected 'package.module:flow_function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ServeError(f"--flow {path!r}: cannot import {module_name!r} ({err})") from None
    obj = getattr(module, attr, None)
    if not isinstance(obj, Flow):
        raise ServeError(f"--flow {path!r}: {module_name}.{attr} is {'missing' if obj is None else 'not a Prefect flow'}")
    return obj


def check_server(timeout: float = 5.0) -> str:
    """The URL of the running Prefect server the schedule goes to; ServeError when there is none
    (a schedule on the ephemeral API would vanish with this process)."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise ServeError("no Prefect server: start one with `prefect server start` and set"
                         " PREFECT_API_URL=http://127.0.0.1:4200/api (docs/how-to/schedules.md)")
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as response:  # noqa: S310
            if response.status != 200:
                raise ServeError(f"Prefect server {url} answered {response.status} on /health")
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ServeError(f"Prefect server {url} is unreachable ({getattr(err, 'reason', err)});"
                         " start it with `prefect server start`") from None
    return url


def validate_schedule(cron: str, timezone: str) -> Any:
    """A Prefect ``Cron`` schedule, after checking the expression and the IANA time zone."""
    import zoneinfo

    from prefect.client.schemas.schedules import CronSchedule
    from prefect.schedules import Cron

    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ServeError(f"bad schedule: unknown time zone {timezone!r} (an IANA name, e.g. Europe/Zurich)") from None
    try:
        CronSchedule(cron=cron, timezone=timezone)
    except ValueError as err:
        raise ServeError(f"bad schedule: cron {cron!r}: {err}") from None
    return Cron(cron, timezone=timezone)


def serve_flow(flow: Any, cron: str = DEFAULT_CRON, timezone: str = DEFAULT_TIMEZONE,
               name: str | None = None, *, parameters: dict[str, Any] | None = None) -> None:
    """Register ``flow`` as deployment ``name`` (default: the flow's name) with ``cron`` in
    ``timezone`` on the Prefect server at ``PREFECT_API_URL``, then serve its runs until stopped.
    Blocks; stopping pauses the schedule."""
    check_server()
    schedule = validate_schedule(cron, timezone)
    flow.serve(name=name or flow.name, schedules=[schedule], parameters=parameters,
               pause_on_shutdown=True, print_starting_message=True)
