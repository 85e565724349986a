"""An option is parsed, canonicalised and validated in one place: the spec (``sched/spec/``) and the parts
built from it (``sched/parts.py``). The command line and the experiment YAML translate into the spec and
re-word its errors; nothing else calls the functions that read, canonicalise or check an option, or build
a replay's part from one. The scan resolves each call through the file's imports (``from M import f as g``,
``import M as m`` then ``m.f``), so a renamed import does not hide a call."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the product code scanned (tests and benchmarks build engines and parts directly on purpose)
SCANNED = ("cli", "flows", "tasks", "sched", "profiling", "conf", "checks.py", "settings.py")
#: where an option may be read, canonicalised, checked, or built into a part
ALLOWED = ("sched/spec/", "sched/parts.py")
#: (module, function) -> what it does with an option
RESTRICTED = {
    ("schedlab.sched.core.placement", "canonical_placement"): "canonicalises a placement",
    ("schedlab.sched.core.placement", "check_policy"): "checks a placement against a policy",
    ("schedlab.sched.core.cluster", "load_cluster"): "reads a cluster",
    ("schedlab.sched.models.interference", "make_interference"): "builds a ξ source",
    ("schedlab.sched.models.interference", "check_interference"): "checks a ξ source",
    ("schedlab.sched.models.fitted", "make_iteration_time"): "builds the iteration-time model",
    ("schedlab.sched.models.inference", "load_inference"): "reads an inference load",
    ("schedlab.sched.policies", "make_policy"): "builds a policy",
    ("schedlab.sched.policies", "validate_params"): "validates a policy's parameters",
    ("schedlab.sched.policies", "resolve_spec"): "canonicalises a policy spec",
    ("schedlab.sched.traces", "check_format"): "checks a trace format",
    ("schedlab.sched.traces.annotate", "check_annotation"): "checks an annotation scheme",
    ("schedlab.sched.models.annotate", "check_annotation"): "checks an annotation scheme",
}
#: (file, function) -> why that file may call it
EXCEPTIONS = {
    ("sched/core/engine.py", "check_policy"): "the engine refuses an incompatible policy and placement to code that"
    " builds an Engine directly; a replay reaches it with the spec's checked name",
    ("sched/policies/gimbal/policy.py", "make_policy"): "Gimbal builds the base policy it coordinates",
    ("sched/policies/sharing/policy.py", "make_interference"): "a sharing policy's own ξ predictor parameter, built"
    " with the policy",
    ("sched/models/sharing.py", "make_interference"): "SharingModel.for_cluster given a ξ source by name (library use)",
}
#: the module that defines each restricted function may use it (recursion, its own helpers)
DEFINING = {module.removeprefix("schedlab.").replace(".", "/") for module, _ in RESTRICTED}


def _files() -> list[Path]:
    files: list[Path] = []
    for part in SCANNED:
        path = ROOT / part
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else []
    return files


def _targets(tree: ast.AST) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """The file's names for restricted functions (local name -> (module, function)) and its module
    aliases (local name -> module)."""
    functions, modules = {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (node.module, alias.name) in RESTRICTED:
                    functions[alias.asname or alias.name] = (node.module, alias.name)
                elif any(m == f"{node.module}.{alias.name}" for m, _ in RESTRICTED):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"  # from pkg import module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and any(m == alias.name for m, _ in RESTRICTED):
                    modules[alias.asname] = alias.name
                elif not alias.asname:
                    modules[alias.name] = alias.name  # import schedlab.sched.core.cluster (full dotted use)
    return functions, modules


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _calls(path: Path, rel: str) -> list[tuple[int, tuple[str, str]]]:
    """(line, (module, function)) of each call of a restricted function in ``path``."""
    tree = ast.parse(path.read_text(), rel)
    functions, modules = _targets(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id in functions:
            found.append((node.lineno, functions[node.func.id]))
        elif isinstance(node.func, ast.Attribute):
            owner = _dotted(node.func.value)
            module = modules.get(owner) if owner else None
            if module is None and owner and owner.startswith("schedlab."):
                module = owner
            if module is not None and (module, node.func.attr) in RESTRICTED:
                found.append((node.lineno, (module, node.func.attr)))
    return found


def violations(root: Path | None = None) -> list[str]:
    """``file:line: calls module.function (what it does)`` for each call outside the spec and the parts."""
    root = root or ROOT
    found = []
    for path in _files() if root == ROOT else sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(ALLOWED) or rel.removesuffix(".py").removesuffix("/__init__") in DEFINING:
            continue
        found += [f"{rel}:{line}: calls {module}.{function} ({RESTRICTED[(module, function)]})"
                  for line, (module, function) in _calls(path, rel) if (rel, function) not in EXCEPTIONS]
    return found


def test_options_are_parsed_validated_and_built_only_in_the_spec_and_the_parts():
    assert len(_files()) > 100  # the scan reaches the code
    assert violations() == []


def test_every_exception_is_still_needed():
    """An exception nobody uses any more is removed (the list says where the rule bends, and only there)."""
    used = {(path.relative_to(ROOT).as_posix(), function) for path in _files()
            for _, (_, function) in _calls(path, path.relative_to(ROOT).as_posix())}
    assert set(EXCEPTIONS) <= used, set(EXCEPTIONS) - used


def test_the_scan_catches_each_way_of_calling(tmp_path):
    """Planted violations, one per way a call can be written, are all found (the scan can fail)."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "bad.py").write_text(
        "from schedlab.sched.core.placement import canonical_placement as canon\n"
        "import schedlab.sched.core.cluster as clusters\n"
        "from schedlab.sched import policies\n"
        "import schedlab.sched.models.fitted\n"
        "canon('consolidated')\n"
        "clusters.load_cluster('4x8')\n"
        "policies.make_policy('fifo')\n"
        "schedlab.sched.models.fitted.make_iteration_time('catalog')\n")
    (tmp_path / "sched" / "spec").mkdir(parents=True)
    (tmp_path / "sched" / "spec" / "ok.py").write_text(
        "from schedlab.sched.core.cluster import load_cluster\nload_cluster('4x8')\n")
    assert violations(tmp_path) == [
        "tasks/bad.py:5: calls schedlab.sched.core.placement.canonical_placement (canonicalises a placement)",
        "tasks/bad.py:6: calls schedlab.sched.core.cluster.load_cluster (reads a cluster)",
        "tasks/bad.py:7: calls schedlab.sched.policies.make_policy (builds a policy)",
        "tasks/bad.py:8: calls schedlab.sched.models.fitted.make_iteration_time (builds the iteration-time model)",
    ]


def test_a_replay_reads_each_part_once(tmp_path, monkeypatch):
    """``schedlab replay`` of two policies: the cluster read by the spec, the ξ source and the iteration-time
    model built once (the second policy's ξ source is a fresh copy of the first's, not a second read)."""
    import schedlab.sched.parts as parts
    import schedlab.sched.spec.fields as fields
    from schedlab.cli import main

    counts = {"cluster": 0, "interference": 0, "iteration_time": 0}

    def counted(name, function):
        def call(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)
        return call

    monkeypatch.setattr(fields, "load_cluster", counted("cluster", fields.load_cluster))
    monkeypatch.setattr(parts, "make_interference", counted("interference", parts.make_interference))
    monkeypatch.setattr(parts, "make_iteration_time", counted("iteration_time", parts.make_iteration_time))
    assert main(["replay", "--policy", "fifo", "sjf-ffs", "--num-jobs", "20", "--cluster", "2x4",
                 "--interference", "analytic:1.3", "--no-progress", "--out", str(tmp_path / "out")]) == 0
    assert counts == {"cluster": 1, "interference": 1, "iteration_time": 1}


def test_errors_name_the_flag_or_the_file_key_and_line(tmp_path, capsys):
    """The same check, worded for where the value was written: the flag, or the file, key path and line."""
    from schedlab.cli import main
    from schedlab.sched.spec import ConfigError, load_config

    assert main(["replay", "--cluster", "nosuch", "--out", str(tmp_path / "out")]) == 2
    assert "schedlab replay: error: --cluster: unknown cluster 'nosuch'" in capsys.readouterr().err
    path = tmp_path / "exp.yaml"
    path.write_text("name: t\ntraces:\n  - name: syn\n    options: {num_jobs: 50, load: [1.0, -2]}\n"
                    "clusters:\n  - 4x8\n  - nosuch\npolicies: [fifo]\n")
    try:
        load_config(path)
    except ConfigError as err:
        message = str(err)
    assert message.splitlines()[1] == "  traces[0].options.load: Input should be greater than 0 (got -2) (line 4)"
    path.write_text(path.read_text().replace("load: [1.0, -2]", "load: [1.0, 2]"))
    try:
        load_config(path)
    except ConfigError as err:
        message = str(err)
    assert message.startswith(f"{path}: clusters[1]: unknown cluster 'nosuch'") and message.endswith("(line 7)")


if __name__ == "__main__":
    print("\n".join(violations()) or "no option validated outside the spec and the parts", file=sys.stderr)
