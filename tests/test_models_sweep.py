"""Both models fitted on a store that a real (tiny) CPU profiling sweep produced."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from schedlab.cli import profile as profile_cli
from schedlab.profiling.store import ProfileStore
from schedlab.cli.fit import register
from schedlab.sched.core.job import Job
from schedlab.sched.models.fitted import InterferenceModel, IterationTimeModel

pytestmark = pytest.mark.slow


SWEEP = """name: models-mini
device: cpu
size: tiny
warmup: 1
iters: 4
min_seconds: 0.0
threads: 1
timeout_s: 60
collect: {interval_s: 0.1}
solo:
  workloads: [ncf]
  batch: [2, 8]
pair:
  workloads: [[ncf, ncf]]
  batch: [2, 8]
  modes: [timeslice]
"""


def _run(register_fn, argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    register_fn(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(argv)
    return int(args.func(args))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    (root / "mini.yaml").write_text(SWEEP)
    argv = ["profile", "--sweep", str(root / "mini.yaml"), "--out", str(root / "store"), "--no-progress"]
    assert _run(profile_cli.register, argv) == 0
    df = ProfileStore(root / "store").read()
    assert set(df.status) == {"ok"} and (df.kind == "pair").sum() == 4
    return root / "store"


def test_iteration_time_from_sweep(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "it.json"
    assert _run(register, ["fit", "iteration-time", "--profiles", str(store), "--out", str(out), "--no-track"]) == 0
    model = IterationTimeModel.load(out)
    fit = model.data["workloads"]["ncf"]["cpu"]
    assert fit["mape_train"]["rows"] + fit["mape_holdout"]["rows"] == 2 and fit["model_size_mb"] > 0
    assert model.iteration_time("ncf", 16) > 0  # an unmeasured batch


def test_interference_from_sweep(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "ir"
    assert _run(register, ["fit", "interference", "--profiles", str(store), "--out", str(out), "--no-track"]) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["training"] == {**meta["training"], "rows": 4, "pairs": 2, "test_rows": 2}
    assert "job0_CPU" in meta["feature_names"] and meta["workload_map"] == {"ncf": "ncf"}
    assert meta["provenance"]["devices"] == ["cpu"]
    model = InterferenceModel.load(out)
    xa, xb = model.ratio(Job("a", 0, 1, 1, model="ncf", batch_size=4), Job("b", 0, 1, 1, model="ncf", batch_size=4),
                         "timeslice")
    assert xa >= 1 and xb >= 1 and model.fallbacks == 0
