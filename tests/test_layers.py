"""Layers: nothing imports upward (cli/ on top, then flows/, tasks/, sched/ + profiling/), sched/ +
profiling/ load without Prefect or MLflow, and sched/reporting/ imports no orchestration library at all."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: package -> the schedlab packages it must never import (at any depth)
FORBIDDEN = {
    "sched": ("schedlab.flows", "schedlab.tasks", "schedlab.cli"),
    "profiling": ("schedlab.flows", "schedlab.tasks", "schedlab.cli"),
    "tasks": ("schedlab.flows", "schedlab.cli"),
    "flows": ("schedlab.cli",),  # the command line is the top layer
    "conf": ("schedlab.flows", "schedlab.tasks", "schedlab.sched", "schedlab.profiling", "schedlab.cli"),
}
#: heavy orchestration/tracking libraries the computing layers may import only inside functions
ORCHESTRATION = ("prefect", "mlflow", "dask", "distributed")
#: packages of pure functions: no orchestration or tracking library at any level (inside functions too)
PURE = ("sched/reporting",)


def _imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, imported module, at module level) for every import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str, bool]] = []
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module
            found.append((node.lineno, module, id(node) in top_level))
            if module == "schedlab":  # from schedlab import flows
                found += [(node.lineno, f"schedlab.{a.name}", id(node) in top_level) for a in node.names]
    return found


def _violations() -> list[str]:
    bad = []
    for package, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, module, top in _imports(path):
                rel = path.relative_to(ROOT)
                if module.startswith(forbidden):
                    bad.append(f"{rel}:{line} imports {module} (upward)")
                if package in ("sched", "profiling") and top and module.split(".")[0] in ORCHESTRATION:
                    bad.append(f"{rel}:{line} imports {module} at module level")
    for package in PURE:
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, module, _ in _imports(path):
                if module.split(".")[0] in ORCHESTRATION:
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {module} (a pure package)")
    return bad


def test_no_upward_or_orchestration_imports():
    assert _violations() == []


def test_the_check_catches_an_upward_import(tmp_path, monkeypatch):
    """The scan itself must fail on a planted violation (it is not a test that cannot fail)."""
    fake = tmp_path / "sched"
    (fake / "reporting").mkdir(parents=True)
    (fake / "bad.py").write_text("from schedlab.flows.experiment import run\nimport mlflow\n")
    (fake / "reporting" / "view.py").write_text("def log():\n    from mlflow import MlflowClient\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _violations() == [
        "sched/bad.py:1 imports schedlab.flows.experiment (upward)",
        "sched/bad.py:2 imports mlflow at module level",
        "sched/reporting/view.py:2 imports mlflow (a pure package)",
    ]


@pytest.mark.parametrize("module", ["schedlab.sched.replay", "schedlab.sched.traces", "schedlab.profiling.store",
                                    "schedlab.sched.reporting.mlflow_view", "schedlab.sched.reporting.paper_report",
                                    "schedlab.sched.reporting.comparison_html",
                                    "schedlab.profiling.fitting", "schedlab.profiling.fit_interference"])
def test_computing_layers_load_without_prefect_or_mlflow(module):
    code = (f"import sys, {module}; "
            "bad = [m for m in ('prefect', 'mlflow', 'schedlab.flows', 'schedlab.tasks') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
