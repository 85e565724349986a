"""The ``testbed`` flow: one testbed session (the policies on this node's devices, each compared with its
replay; ``profiling/testbed/``) as a Prefect task, then each policy's run logged to MLflow as another.

>>> report = testbed({"generate": 12, "policies": ["fifo", "sjf-bsbf"], "device": "cpu", "out": "tb"})
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from schedlab import settings
from schedlab.tasks.testbed import log_task, session_task


@flow(name="testbed", log_prints=True, persist_result=False)
def testbed(spec: dict[str, Any], track: bool = True, experiment: str = "testbed") -> dict[str, Any]:
    """``spec``: the fields of :class:`~schedlab.profiling.testbed.spec.TestbedSpec` (validated here, before
    any device is touched). Returns the exit code (1: a job did not finish), the output folder and the MLflow
    run of each policy."""
    from schedlab.profiling.testbed.spec import TestbedSpec

    parsed = TestbedSpec.model_validate(spec)
    code = session_task(parsed)
    conf = settings.Settings.from_env()
    runs = log_task(conf.tracking_uri, experiment, conf.artifact_root, parsed) if track else {}
    return {"exit": code, "out": str(parsed.out), "runs": runs}
