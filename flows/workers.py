"""Worker plugins. The project's settings on Dask workers a flow did not start (``dask worker ADDR`` on
another host): :class:`ProjectSettings` applies each worker's own :class:`~schedlab.settings.Settings`
(telemetry off, its ``$SCHEDLAB_HOME`` and ``PREFECT_HOME``) when it joins, before any task is unpickled
there (the tasks import prefect, which reads them once). A LocalCluster's workers inherit the flow's
environment; :class:`SigintIgnored` keeps the terminal's Ctrl-C away from each of them."""

from __future__ import annotations

import signal
import threading
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from schedlab import settings


class ProjectSettings(WorkerPlugin):
    """Registered on a scheduler by :func:`schedlab.flows.orchestration.check_dask`: runs on its workers
    now and on every worker that joins later."""

    name = "schedlab-settings"

    def setup(self, worker: Any) -> None:
        settings.Settings.from_env().apply().prefect_ready()


class SigintIgnored(WorkerPlugin):
    """Registered on our LocalCluster by :func:`schedlab.flows.orchestration.dask_scheduler`: each worker
    ignores SIGINT, those started with the cluster (which inherit it:
    :func:`~schedlab.flows.orchestration.sigint_ignored_by_children`) and those the nanny starts later in
    place of one that died, which would not: a Ctrl-C at the terminal reaches the whole process group
    and is the flow's to handle, never a KeyboardInterrupt traceback from a worker."""

    name = "schedlab-sigint-ignored"

    def setup(self, worker: Any) -> None:
        if threading.current_thread() is threading.main_thread():  # a worker's event loop runs there
            signal.signal(signal.SIGINT, signal.SIG_IGN)
