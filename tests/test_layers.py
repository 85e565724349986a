"""Layers: nothing imports upward (cli/ on top, then flows/, tasks/, sched/ + profiling/), and sched/ +
profiling/ load without Prefect or MLflow; sched/reporting/ imports no orchestration library at all.
Inside sched/: the engine core imports no policy, the trace layer no model, and nothing imports
profiling/ (a replay's SMACT profile is read by its caller and given to it)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: (folder, the schedlab modules no file in it may import at any depth, why, only imports that run):
#: with "only imports that run", an import under ``if TYPE_CHECKING:`` (a name for annotations, never
#: executed) is allowed: the engine's protocol annotates with the Policy base class it calls
RULES = [
    ("sched", ("schedlab.flows", "schedlab.tasks", "schedlab.cli"), "upward", False),
    ("profiling", ("schedlab.flows", "schedlab.tasks", "schedlab.cli"), "upward", False),
    ("tasks", ("schedlab.flows", "schedlab.cli"), "upward", False),
    ("flows", ("schedlab.cli",), "upward", False),  # the command line is the top layer
    ("conf", ("schedlab.flows", "schedlab.tasks", "schedlab.sched", "schedlab.profiling", "schedlab.cli"), "upward",
     False),
    ("sched", ("schedlab.profiling",), "sched reads no profile store: the caller injects SMACT profiles", False),
    ("sched/traces", ("schedlab.sched.models",), "traces import no model", False),
    ("sched/core", ("schedlab.sched.policies",), "core imports no policy", True),
]
#: heavy orchestration/tracking libraries the computing layers may import only inside functions
ORCHESTRATION = ("prefect", "mlflow", "dask", "distributed")
#: packages of pure functions: no orchestration or tracking library at any level (inside functions too)
PURE = ("sched/reporting",)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path) -> list[tuple[int, tuple[str, ...], bool, bool]]:
    """(line, names, at module level, under ``if TYPE_CHECKING:``) for every import in ``path``.
    ``names``: the module imported, then for ``from M import a`` each ``M.a`` (``a`` may be a module:
    ``from schedlab.sched import models``). Relative imports are resolved against the file's package;
    ``importlib.import_module("m")`` or ``__import__("m")`` of a constant name imports ``m`` too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    parts = path.relative_to(ROOT).with_suffix("").parts
    package = ["schedlab", *parts[:-1]]
    top_level = {id(node) for node in tree.body}
    type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _type_checking(node.test)
                 for stmt in node.body for n in ast.walk(stmt)}
    found: list[tuple[int, tuple[str, ...], bool, bool]] = []
    for node in ast.walk(tree):
        where = (id(node) in top_level, id(node) in type_only)
        if isinstance(node, ast.Import):
            found += [(node.lineno, (alias.name,), *where) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, (module, *(f"{module}.{a.name}" for a in node.names)), *where))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
            found.append((node.lineno, (node.args[0].value,), *where))
    return found


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _violations(rules: list[tuple[str, tuple[str, ...], str, bool]] = RULES, orchestration: bool = True) -> list[str]:
    bad = []
    for folder, forbidden, why, runs_only in rules:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            for line, names, _, type_only in _imports(path):
                hit = next((name for name in names if _within(name, forbidden)), None)
                if hit is not None and not (runs_only and type_only):
                    bad.append(f"{rel}:{line} imports {hit} ({why})")
    if orchestration:
        for folder in ("sched", "profiling"):
            for path in sorted((ROOT / folder).rglob("*.py")):
                for line, names, top, _ in _imports(path):
                    if top and names[0].split(".")[0] in ORCHESTRATION:
                        bad.append(f"{path.relative_to(ROOT)}:{line} imports {names[0]} at module level")
        for folder in PURE:
            for path in sorted((ROOT / folder).rglob("*.py")):
                for line, names, _, _ in _imports(path):
                    if names[0].split(".")[0] in ORCHESTRATION:
                        bad.append(f"{path.relative_to(ROOT)}:{line} imports {names[0]} (a pure package)")
    return bad


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r[0]}-{r[2]}")
def test_layer_rule_holds(rule):
    assert _violations([rule], orchestration=False) == []


def test_no_orchestration_library_at_module_level():
    assert _violations([], orchestration=True) == []


def test_the_check_catches_an_upward_import(tmp_path, monkeypatch):
    """The scan itself must fail on a planted violation (it is not a test that cannot fail)."""
    fake = tmp_path / "sched"
    (fake / "reporting").mkdir(parents=True)
    (fake / "bad.py").write_text("from schedlab.flows.experiment import run\nimport mlflow\n")
    (fake / "reporting" / "view.py").write_text("def log():\n    from mlflow import MlflowClient\n")
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "bad.py").write_text("from schedlab.cli.replay import run\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _violations() == [
        "sched/bad.py:1 imports schedlab.flows.experiment (upward)",
        "flows/bad.py:1 imports schedlab.cli.replay (upward)",
        "sched/bad.py:2 imports mlflow at module level",
        "sched/reporting/view.py:2 imports mlflow (a pure package)",
    ]


def test_the_check_catches_each_rule_inside_sched(tmp_path, monkeypatch):
    """Planted violations of the three rules inside sched/, in every form an import takes (relative,
    inside a function, ``from package import module``, ``importlib``); a type-only import of a policy
    in core is allowed, of a model in traces is not."""
    (tmp_path / "sched" / "core").mkdir(parents=True)
    (tmp_path / "sched" / "traces").mkdir()
    (tmp_path / "sched" / "core" / "pools.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from schedlab.sched.policies.ordered import FIFO\n"
        "if TYPE_CHECKING:\n"
        "    from schedlab.sched.policies.base import Policy\n"
        "def view():\n"
        "    from schedlab.sched import policies\n")
    (tmp_path / "sched" / "traces" / "loader.py").write_text(
        "from ..models.workloads import default_catalog\n"
        "if TYPE_CHECKING:\n"
        "    from schedlab.sched.models.goodput import GoodputModel\n")
    (tmp_path / "sched" / "replay.py").write_text(
        "import importlib\n"
        "def prepare():\n"
        "    from schedlab.profiling.smact import smact_profile\n"
        "    return importlib.import_module('schedlab.profiling.store')\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    profiling = "sched reads no profile store: the caller injects SMACT profiles"
    assert sorted(_violations()) == sorted([
        "sched/core/pools.py:2 imports schedlab.sched.policies.ordered (core imports no policy)",
        "sched/core/pools.py:6 imports schedlab.sched.policies (core imports no policy)",
        "sched/traces/loader.py:1 imports schedlab.sched.models.workloads (traces import no model)",
        "sched/traces/loader.py:3 imports schedlab.sched.models.goodput (traces import no model)",
        f"sched/replay.py:3 imports schedlab.profiling.smact ({profiling})",
        f"sched/replay.py:4 imports schedlab.profiling.store ({profiling})",
    ])


@pytest.mark.parametrize(("modules", "absent"), [
    ("schedlab.sched.core.engine, schedlab.sched.core.pools, schedlab.sched.core.calibration",
     "schedlab.sched.policies"),
    ("schedlab.sched.traces", "schedlab.sched.models"),
    ("schedlab.sched.replay, schedlab.sched.policy_check", "schedlab.profiling"),
])
def test_the_rules_hold_when_the_code_runs(modules, absent):
    """What the scan says, seen from the modules a process has loaded (a synthetic trace loaded too)."""
    code = (f"import sys, {modules}; import schedlab.sched.traces as t; t.load_trace(None, 'synthetic'); "
            f"bad = sorted(m for m in sys.modules if m == {absent!r} or m.startswith({absent + '.'!r})); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("module", ["schedlab.sched.replay", "schedlab.sched.traces", "schedlab.profiling.store",
                                    "schedlab.sched.reporting.mlflow_view", "schedlab.sched.reporting.paper_report",
                                    "schedlab.sched.reporting.live", "schedlab.sched.spec",
                                    "schedlab.profiling.fitting", "schedlab.profiling.fit_interference"])
def test_computing_layers_load_without_prefect_or_mlflow(module):
    code = (f"import sys, {module}; "
            "bad = [m for m in ('prefect', 'mlflow', 'schedlab.flows', 'schedlab.tasks') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_loading_the_policies_imports_no_solver():
    """The registry imports every policy module; the solvers some of them call (scipy.optimize: Gavel's
    LP, Pollux's L-BFGS-B, the iteration-time fit) and the statistics of a several-seed comparison
    (scipy.stats) load at their first use, not in every process that lists or replays a policy (0.5 s
    of imports each in a CLI command, a Dask worker, a fork server)."""
    code = ("import sys, schedlab.sched.policies, schedlab.sched.replay, schedlab.profiling.smact, schedlab.cli.replay; "
            "import schedlab.sched.reporting.paired as p, numpy as np; p.interval(np.array([1.0])); "
            "bad = sorted(m for m in sys.modules if m.startswith(('scipy.optimize', 'scipy.stats'))); print(bad[:5]); "
            "sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
