"""The reproduce flow on a tiny config (2 policies, 1 seed, a small synthetic trace at two loads)
named like the SJF-BSBF reproduction, so that its paper-vs-ours table is built."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from schedlab.flows.reproduce import DEFAULT_CONFIGS, run_reproduce
from schedlab.tasks import tracking

from helpers import REPRODUCE_TINY as TINY, reproduce_env  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("reproduce_env")]


def test_the_default_configs_validate():
    """The shipped reproduction configs read the real traces in ../shared (skipped without them)."""
    from helpers import shared_data
    from schedlab.sched.spec import load_config

    shared_data("traces", "philly", "philly_jobs_pollux.csv")
    shared_data("traces", "itp", "cluster04.csv")
    assert [load_config(c).name for c in DEFAULT_CONFIGS] == DEFAULT_CONFIGS


@pytest.mark.slow
def test_reproduce_tiny_config(tmp_path, prefect_harness, seed_home):
    report = run_reproduce([str(TINY)], workers=1, home=seed_home(tmp_path, prefect=False))
    assert report["failures"] == {}
    table = report["tables"]["sjf-bsbf-table3"]
    assert {"fifo", "sjf", "sjf-bsbf", "pollux"} <= set(table.index)
    assert table.loc["fifo", "avg_jct_all paper"] == 2.34 and table.loc["fifo", "avg_jct_all ours"] > 0
    assert math.isnan(table.loc["pollux", "avg_jct_all ours"])  # published only
    by_load = report["tables"]["sjf-bsbf-philly__jct_by_load"]
    assert list(by_load.columns) == ["load 1", "load 2", "seeds"] and list(by_load.index) == ["fifo", "sjf"]
    assert list(by_load["seeds"]) == ["1", "1"] and list(table.loc[["fifo", "sjf", "pollux"], "seeds"]) == [1, 1, 0]
    assert "sjf-bsbf-table3" in report["markdown"] and "avg_jct_all ours" in report["markdown"]
    pairs = report["tables"]["sjf-bsbf-table3__paired"]  # one seed: nothing separated, and the Order says so
    assert set(pairs["verdict"].dropna()) == {"one seed: nothing separated"}
    assert "one seed: nothing can be separated" in report["markdown"]

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = tracking.client(uri)
    parent = c.get_run(report["parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.info.run_name.startswith("reproduce-")
    exp_run = report["experiments"]["sjf-bsbf-philly"]["parent_run_id"]
    assert parent.data.tags["schedlab.experiment_run_id.sjf-bsbf-philly"] == exp_run
    art = Path(parent.info.artifact_uri.removeprefix("file://"))
    assert "sjf-bsbf-table3" in (art / "reproduce.md").read_text()
    csv = pd.read_csv(art / "tables" / "sjf-bsbf-table3.csv", index_col="policy")
    assert csv.loc["fifo", "avg_jct_all ours"] == pytest.approx(table.loc["fifo", "avg_jct_all ours"])

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as prefect:
        artifacts = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["reproduce"])))
    assert artifacts and "sjf-bsbf-table3" in artifacts[0].data
