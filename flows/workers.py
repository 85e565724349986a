"""The project's settings on Dask workers a flow did not start (``dask worker ADDR`` on another host):
a worker plugin applies each worker's own :class:`~schedlab.settings.Settings` (telemetry off, its
``$SCHEDLAB_HOME`` and ``PREFECT_HOME``) when it joins, before any task is unpickled there (the tasks
import prefect, which reads them once). A LocalCluster's workers inherit the flow's environment."""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from schedlab import settings


class ProjectSettings(WorkerPlugin):
    """Registered on a scheduler by :func:`schedlab.flows.orchestration.check_dask`: runs on its workers
    now and on every worker that joins later."""

    name = "schedlab-settings"

    def setup(self, worker: Any) -> None:
        settings.Settings.from_env().apply().prefect_ready()
