"""The end_to_end flow: a tiny CPU sweep (already measured when test_flows_nightly ran first in the
session: the profile step then skips every configuration) -> both fits (logged and registered in a sqlite MLflow in
tmp_path) -> an experiment (2 policies, small synthetic annotated trace, a cluster of the profiled type) whose
replays use both freshly registered models (``models:/…/N``) and record their versions."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from schedlab.flows.end_to_end import run_end_to_end
from schedlab.tasks import tracking

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "flows"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("SCHEDLAB_CODE_VERSION", "test-version")


def test_end_to_end_profile_fit_experiment(tmp_path, tmp_path_factory, prefect_harness, seed_home):
    shared = tmp_path_factory.getbasetemp() / "flows-tiny-profile-store"  # test_flows_nightly's, if it ran
    if shared.is_dir():  # the same sweep on the same host: the profile step finds it all measured
        shutil.copytree(shared, tmp_path / "store")
    report = run_end_to_end(str(FIXTURES / "tiny-sweep.yaml"), str(FIXTURES / "e2e-experiment.yaml"), workers=1,
                            home=seed_home(tmp_path, prefect=False), store=str(tmp_path / "store"), models_dir=str(tmp_path / "models"))
    assert report["failures"] == {} and report["replays"] == 2 and report["replays_run"] == 2
    assert report["profile"]["counts"] == ({"skipped": 4} if shared.is_dir() else {"ok": 4})
    model_dir = report["fits"]["interference-ratio"]["path"]
    assert Path(model_dir).parent == tmp_path / "models" and (Path(model_dir) / "meta.json").is_file()
    derived = yaml.safe_load(Path(report["config_path"]).read_text())
    versions = {name: report["fits"][name]["version"] for name in ("iteration-time", "interference-ratio")}
    assert derived["models"] == {"interference": f"model:models:/interference-ratio/{versions['interference-ratio']}",
                                 "iteration_time": f"models:/iteration-time/{versions['iteration-time']}"}

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    c = tracking.client(uri)
    exp = c.get_experiment_by_name("e2e-tiny")
    runs = c.search_runs([exp.experiment_id])
    replays = [r for r in runs if r.data.tags.get("schedlab.kind") == "replay"]
    assert len(replays) == 2 and all(r.info.status == "FINISHED" for r in replays)
    assert {r.data.params["model.interference"] for r in replays} == {derived["models"]["interference"]}
    for r in replays:  # lineage: the versions used, the fit runs, a link to each version
        for key, name in (("iteration_time", "iteration-time"), ("interference", "interference-ratio")):
            assert r.data.params[f"model.{key}.version"] == versions[name]
            assert r.data.params[f"model.{key}.run_id"] == report["fits"][name]["run_id"]
            assert r.data.tags[f"schedlab.model_version.{name}"] == versions[name]
            assert r.data.tags[f"schedlab.model_link.{name}"] == f"#/models/{name}/versions/{versions[name]}"
    parent = c.get_run(report["parent_run_id"])
    for name in ("iteration-time", "interference-ratio"):
        fit = report["fits"][name]
        assert parent.data.tags[f"schedlab.fit_run_id.{name}"] == fit["run_id"]
        assert c.get_model_version(name, fit["version"]).run_id == fit["run_id"]
    # the replays really used the fitted model (not the analytic default)
    art = Path(next(r for r in replays if r.data.params["policy"] == "sjf-ffs").info.artifact_uri.removeprefix("file://"))
    summary = yaml.safe_load((art / "summary.json").read_text())
    assert summary["interference"] != "analytic", summary["interference"]
    assert summary["iteration_time"] == derived["models"]["iteration_time"]
    assert summary["load_report"]["iteration_time_gpu_type"] == "cpu"
    assert summary["load_report"]["iteration_time_fitted"] == ["ncf"]  # the profiled workload's durations
