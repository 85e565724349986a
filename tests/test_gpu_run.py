"""The GPU node's one command, rehearsed in CI-sized form (issue 24): ``profiling/gpu_run.sh`` on the CPU
with the packages the node's image lacks made unimportable, a deadline that cuts the sweep, what comes
back within the node's limits (<= 8 files, <= 16 MiB each), and a second call that resumes from the
first call's packed store and measures only what is left."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
MISSING_ON_NODE = ("pydantic", "xgboost", "prefect", "mlflow", "dask", "distributed", "fastapi", "sqlalchemy")
BLOCKER = f"""import sys
BLOCKED = {MISSING_ON_NODE!r}
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is not on the GPU node's image (blocked by the rehearsal)")
        return None
sys.meta_path.insert(0, _Absent())
"""
SWEEP = """name: rehearsal
device: cpu
size: tiny
warmup: 1
iters: 3
min_seconds: 0.6
threads: 1
timeout_s: 60
collect: {interval_s: 0.2}
phases:
  - solo: {workloads: [ncf, cifar10], batch: {ncf: [4], cifar10: [4]}}
  - pair: {workloads: all, batch: {ncf: [4], cifar10: [4]}, modes: [mps, timeslice]}
  - solo: {workloads: [ncf], batch: [2, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]}
  - solo: {workloads: [cifar10], batch: [2, 8, 16, 32, 64, 128]}
"""


def _call(out: Path, tmp: Path, budget_s: float, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(tmp / "blocker"), TMPDIR=str(tmp))
    p = subprocess.run([str(ROOT / "profiling" / "gpu_run.sh"), str(out), "--sweep", str(tmp / "rehearsal.yaml"),
                        "--device", "cpu", "--store", str(tmp / f"store-{out.name}"), "--budget-s", str(budget_s),
                        "--stop-margin-s", "2", "--pack-margin-s", "5", *extra],
                       capture_output=True, text=True, env=env, timeout=240)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    return p, summary


def _within_limits(out: Path) -> None:
    files = [p for p in out.rglob("*") if p.is_file()]
    assert sorted(p.name for p in files) == ["facts.json", "profiles.parquet", "run.log", "summary.json"]
    assert len(files) <= 8 and all(p.stat().st_size <= 16 * 1024 * 1024 for p in files)


@pytest.mark.slow
def test_gpu_run_rehearsal_stops_by_itself_and_resumes(tmp_path: Path) -> None:
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "sitecustomize.py").write_text(BLOCKER)
    (tmp_path / "rehearsal.yaml").write_text(SWEEP)
    probe = subprocess.run([sys.executable, "-c", "import pydantic"], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(tmp_path / "blocker")))
    assert probe.returncode != 0 and "blocked by the rehearsal" in probe.stderr  # the blocker works

    first, s1 = _call(tmp_path / "out1", tmp_path, 26)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    _within_limits(tmp_path / "out1")
    facts = json.loads((tmp_path / "out1" / "facts.json").read_text())
    assert facts["device"] == "cpu" and facts["torch"]["torch"] and "not found" in facts["nvidia_smi"]["error"]
    assert facts["mps"]["ok"] is False
    counts = s1["counts_this_call"]
    assert counts.get("pending", 0) > 0 and counts.get("ok", 0) >= 3  # cut by the deadline
    assert s1["wall_s"] < 26 and "Traceback" not in first.stdout

    second, s2 = _call(tmp_path / "out2", tmp_path, 90, "--resume", str(tmp_path / "out1" / "profiles.parquet"))
    assert second.returncode == 0, second.stdout[-3000:]
    _within_limits(tmp_path / "out2")
    assert f"resume: {s1['configurations']} configurations" in second.stdout
    c2 = s2["counts_this_call"]
    assert c2["skipped"] == s1["configurations"] and c2.get("pending", 0) == 0
    assert counts.get("no-mps", 0) in (0, 3) and c2["no-mps"] == 3  # refused, not stored: each call tries them again
    df = pd.read_parquet(tmp_path / "out2" / "profiles.parquet")
    assert df.config_key.nunique() == s2["configurations"] == 2 + 3 + 12 + 6  # 2 solos, 3 pairs, 12 more ncf solos, 6 more cifar10 solos
    assert df.groupby("config_key").size().max() == 2 and set(df.status) == {"ok"}
    pairs = df[df.kind == "pair"]
    assert set(pairs["mode"]) == {"timeslice"} and pairs.xi.notna().all() and (pairs.xi > 0).all()
