"""The engine's contracts (issue #27, ``sched/core/protocol.py``): no import circle in the engine core,
policies touch only :class:`PolicyEngine` members and never write a job field, capabilities reach the
engine only through :class:`CapabilityHost` (never an ``engine._private`` member)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from helpers import make_table
from schedlab.sched.core import calibration
from schedlab.sched.core.cluster import ClusterState, load_cluster
from schedlab.sched.core.engine import Engine, EngineError
from schedlab.sched.core.goodput_rates import GOODPUT_SPEC_FIELDS, GoodputState
from schedlab.sched.core.job import SPEC_FIELDS, Job, jobs_from_table
from schedlab.sched.core.protocol import (
    GOODPUT_VIEW_MEMBERS,
    JOB_VIEW_MEMBERS,
    POLICY_MEMBERS,
    CapabilityHost,
    GoodputView,
    JobView,
    PolicyEngine,
    members,
)
from schedlab.sched.policies import make_policy
from schedlab.sched.policies.gimbal.policy import _EngineProxy

SCHEDLAB = Path(__file__).resolve().parents[1]
SCHED = SCHEDLAB / "sched"
POLICIES = SCHED / "policies"
CORE = [*sorted((SCHED / "core").glob("*.py")), POLICIES / "base.py"]
CAPABILITIES = ("schedlab.sched.core.calibration", "schedlab.sched.core.goodput_rates", "schedlab.sched.core.pools")


def module_name(path: Path) -> str:
    parts = ["schedlab", *path.relative_to(SCHEDLAB).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SCHED.rglob("*.py")}


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports(path: Path) -> set[str]:
    """The ``schedlab.sched`` modules importing ``path`` runs, at import or in a function (not under
    ``TYPE_CHECKING``): an import of ``a.b.c`` runs the packages ``a.b`` and ``a`` too."""
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            for child in node.orelse if _type_checking(node.test) else [*node.body, *node.orelse]:
                self.visit(child)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.module:
                found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                             for a in node.names)

    Visitor().visit(ast.parse(path.read_text()))
    out = set()
    for name in found:
        parts = name.split(".")
        out.update(q for i in range(3, len(parts) + 1) if (q := ".".join(parts[:i])) in MODULES)
    return out


def import_graph() -> dict[str, set[str]]:
    graph = {name: runtime_imports(path) - {name} for name, path in MODULES.items()}
    # the policy registry imports every module beside it (pkgutil in sched/policies/__init__.py)
    graph["schedlab.sched.policies"] |= {n for n in MODULES if n.startswith("schedlab.sched.policies.")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycles_finds_a_circle_and_nothing_else():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_through_the_engine_core():
    core = {module_name(p) for p in CORE}
    graph = import_graph()
    assert "schedlab.sched.core.calibration" in graph["schedlab.sched.policies.gimbal.policy"]  # the graph sees imports
    through_core = [c for c in cycles(graph) if core & set(c)]
    assert not through_core, f"import circles through the engine core: {through_core}"


def test_the_engine_imports_no_capability_and_no_capability_imports_the_engine():
    graph = import_graph()
    assert not graph["schedlab.sched.core.engine"] & set(CAPABILITIES)
    for name in CAPABILITIES:
        assert "schedlab.sched.core.engine" not in graph[name], name
    assert not {n for n in graph["schedlab.sched.core.protocol"] if n.startswith("schedlab.sched.core.")}


def _engine_expr(node: ast.expr) -> bool:
    """``engine`` or ``<anything>._engine`` (a policy that keeps its engine)."""
    return (isinstance(node, ast.Name) and node.id == "engine") or (
        isinstance(node, ast.Attribute) and node.attr == "_engine")


PROXY_EXTRAS = {k for k in vars(_EngineProxy) if not k.startswith("_")}  # Gimbal's view adds these
JOB_FIELDS = {f.name for f in dataclasses.fields(Job)}
HIDDEN_JOB_FIELDS = JOB_FIELDS - JOB_VIEW_MEMBERS  # the engine's bookkeeping (version, last_update, ...)
#: extension states on the job record (issue #27) -> the fields of each a policy may not read
EXTENSIONS = {"goodput": {f.name for f in dataclasses.fields(GoodputState)} - GOODPUT_VIEW_MEMBERS,
              "workers": set()}


def _extension(node: ast.expr) -> str | None:
    """``<anything>.goodput`` / ``<anything>.workers``: the extension state's name, else None."""
    return node.attr if isinstance(node, ast.Attribute) and node.attr in EXTENSIONS else None


def contract_breaches(source: str) -> list[str]:
    """Where a policy's code reaches outside :class:`PolicyEngine` or writes a job field."""
    found = []
    tree = ast.parse(source)
    guarded = set()  # getattr calls inside a function that checks the name against POLICY_MEMBERS
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef) and any(
                isinstance(n, ast.Name) and n.id == "POLICY_MEMBERS" for n in ast.walk(function)):
            guarded.update(id(n) for n in ast.walk(function))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _engine_expr(node.value) and node.attr not in POLICY_MEMBERS:
            found.append(f"line {node.lineno}: {ast.unparse(node)} is not in PolicyEngine")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr")
                and node.args and _engine_expr(node.args[0])):
            name = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
            if node.func.id == "setattr" or (name not in POLICY_MEMBERS | PROXY_EXTRAS and id(node) not in guarded):
                found.append(f"line {node.lineno}: {ast.unparse(node)} is not in PolicyEngine")
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            for sub in ast.walk(target):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and sub.attr in JOB_FIELDS
                        and not (isinstance(sub.value, ast.Name) and sub.value.id in ("self", "cls"))):
                    found.append(f"line {node.lineno}: writes {ast.unparse(sub)}, a field of the job record")
                elif isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and _extension(sub.value):
                    found.append(f"line {node.lineno}: writes {ast.unparse(sub)}, a field of a job's extension state")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if node.args and isinstance(node.args[1] if len(node.args) > 1 else None, ast.Constant) \
                    and node.args[1].value in JOB_FIELDS:
                found.append(f"line {node.lineno}: {ast.unparse(node)} writes a field of the job record")
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in HIDDEN_JOB_FIELDS
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                and not _engine_expr(node.value)):
            found.append(f"line {node.lineno}: {ast.unparse(node)} reads a job field outside JobView")
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and (name := _extension(node.value))
                and node.attr in EXTENSIONS[name]):
            found.append(f"line {node.lineno}: {ast.unparse(node)} reads an extension field outside its view")
    return found


def test_the_breach_scan_catches_each_kind():
    bad = """
def schedule(self, engine, job):
    engine._settle(job)
    engine.heap
    self._engine.rng
    getattr(engine, "place")
    job.accumulation_steps = 2
    job.remaining -= 1
    stamp = job.version
    due = job.last_update + job.overhead_left
    job.goodput.global_batch = 64
    job.workers.caps = {}
    left = job.goodput.epoch_end
"""
    assert len(contract_breaches(bad)) == 12
    assert len(contract_breaches("def forward(self, name):\n    return getattr(self._engine, name)")) == 1
    fine = """
def schedule(self, engine, job):
    engine.start(job)
    shape, batch = job.goodput.placement_shape, job.goodput.model.best_batch(shape, job.goodput.epoch_start)
    getattr(engine, "calibrating", None)
    self.version = 3

def forward(self, name):
    if name not in POLICY_MEMBERS:
        raise AttributeError(name)
    return getattr(self._engine, name)
    with engine.accumulating(job, 2):
        engine.can_share(job, job)
"""
    assert contract_breaches(fine) == []


@pytest.mark.parametrize("path", sorted(POLICIES.rglob("*.py")), ids=lambda p: str(p.relative_to(POLICIES)))
def test_policies_touch_only_the_policy_api(path):
    assert contract_breaches(path.read_text()) == [], str(path.relative_to(POLICIES))


def test_no_module_calls_a_private_engine_member():
    offenders = []
    for name, path in MODULES.items():
        if name == "schedlab.sched.core.engine":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and _engine_expr(node.value) and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                offenders.append(f"{path.relative_to(SCHEDLAB)}:{node.lineno} {ast.unparse(node)}")
    assert not offenders


def test_nothing_in_sched_writes_a_job_spec_field_once_made():
    spec = set(SPEC_FIELDS)
    assert spec <= JOB_FIELDS
    offenders = []
    for name, path in MODULES.items():
        if name == "schedlab.sched.core.job":  # where records are made from the trace
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr in spec
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                offenders.append(f"{path.relative_to(SCHEDLAB)}:{node.lineno} {ast.unparse(node)}")
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr in GOODPUT_SPEC_FIELDS
                    and _extension(node.value) == "goodput"):
                offenders.append(f"{path.relative_to(SCHEDLAB)}:{node.lineno} {ast.unparse(node)}")
    assert not offenders


def _engine(policy: str = "fifo", **kwargs) -> Engine:
    table = make_table([("a", 0.0, 1, 10.0), ("b", 1.0, 2, 5.0)])
    return Engine(jobs_from_table(table), ClusterState(load_cluster("1x4:a40")), make_policy(policy), **kwargs)


def test_the_engine_and_the_job_have_every_member_of_their_protocols():
    engine = _engine()
    assert {m for m in members(PolicyEngine) if not hasattr(engine, m)} == set()
    assert {m for m in members(CapabilityHost) if not hasattr(engine, m)} == set()
    assert {m for m in members(JobView) if not hasattr(engine.jobs[0], m)} == set()
    assert members(GoodputView) <= {f.name for f in dataclasses.fields(GoodputState)}
    assert set(GOODPUT_SPEC_FIELDS) <= members(GoodputView)
    assert {"version", "last_update", "overhead_left", "end_key"} <= HIDDEN_JOB_FIELDS
    assert engine.calibration is None and engine.orchestrator is None


def test_gimbal_view_forwards_only_the_policy_api():
    engine = _engine("gimbal-jct")
    assert engine.calibration is not None  # declared by the policy (Policy.capabilities)
    view = _EngineProxy(engine, engine.policy)
    assert view.now == engine.now and view.cluster is engine.cluster
    with pytest.raises(AttributeError, match="not part of the policy API"):
        view._settle  # noqa: B018 (the read is the test)


def test_calibration_without_the_capability_is_a_clear_error():
    engine = _engine()
    job = engine.jobs[0]
    engine.calibration = None
    calibration.track(job)  # as Gimbal marks a job
    with pytest.raises(EngineError, match=r"job .* is calibrated but policy fifo declares no calibration"):
        engine.start(job)


def test_one_capability_per_role():
    from schedlab.sched.core.calibration import Calibration

    with pytest.raises(EngineError, match="two calibration capabilities"):
        _engine("gimbal-jct", capabilities=[Calibration()])


def test_stalled_while_the_restore_overhead_lasts():
    engine = _engine("fifo", preemption_overhead_s=5.0, allocation_stall_s=2.0)
    job = engine.jobs[0]
    engine.start(job)
    assert engine.stalled(job)  # the first start's allocation stall
    engine.now = 2.0
    assert engine.stalled(job)
    engine.now = 2.5
    assert not engine.stalled(job)


def test_accumulating_is_a_what_if_for_pending_jobs_only():
    engine = _engine()
    job = engine.jobs[0]
    with engine.accumulating(job, 4):
        assert job.accumulation_steps == 4
    assert job.accumulation_steps == 1
    engine.start(job)
    with pytest.raises(EngineError, match="for pending jobs"), engine.accumulating(job, 2):
        pass
