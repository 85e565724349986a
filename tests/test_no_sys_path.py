"""No code in the repository changes a Python process's import path: every module is imported as part
of the installed ``schedlab`` package (``schedlab.benchmarks``, ``schedlab.studies``, ``schedlab.tools``
included), never found by editing ``sys.path``, by ``site.addsitedir`` or by a ``.pth`` file.

A child process's ``PYTHONPATH`` is not in scope: that is how a recorder hands a peer simulator its
stand-in modules, and how a test hides a module from a child."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: an edit of sys.path (a call that changes it, an item or slice assignment, += or a new list), or
#: site.addsitedir; ``sys.path`` merely read or named in prose is fine
MUTATION = re.compile(r"\bsys\s*\.\s*path\s*(?:\.\s*(?:insert|append|extend|remove|pop|clear)\s*\("
                      r"|\[[^\]]*\]\s*=(?!=)|\+=|=(?!=))|\bsite\s*\.\s*addsitedir\s*\(")
#: folders that are not the repository's code: version control, virtual environments, build outputs
SKIP_DIRS = {".git", ".venv", ".schedlab", "__pycache__", "build", "dist", "site", "node_modules"}


def violations(root: Path) -> list[str]:
    """``path:line: text`` of every import-path edit under ``root``, and every ``.pth`` file."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")
                   and not (Path(folder) / d / "pyvenv.cfg").exists()]
        for name in files:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            if name.endswith(".pth"):
                found.append(f"{rel}: a .pth file")
            elif name.endswith(".py"):
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                    if MUTATION.search(line):
                        found.append(f"{rel}:{number}: {line.strip()}")
    return sorted(found)


def test_no_code_in_the_repository_edits_the_import_path():
    assert violations(ROOT) == []


def test_the_scan_finds_a_planted_edit_and_ignores_reads(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text(
        '"""pytest puts tests/ on sys.path."""\nimport sys\nprint(sys.path[0], len(sys.path), sys.path == [])\n')
    assert violations(tmp_path) == []
    planted = [line.replace("SYS", "sys").replace("SITE", "site") for line in (  # spelt so this file passes
        "SYS.path.insert(0, str(HERE))", "SYS.path.append('x')", "SYS.path[:0] = ['x']", "SYS.path += ['x']",
        "SYS.path = ['x']", "SITE.addsitedir('x')", "DRIVER = 'import sys; SYS.path.insert(0, \".\")'")]
    (tmp_path / "pkg" / "bad.py").write_text("import site, sys\n" + "\n".join(planted) + "\n")
    (tmp_path / "extra.pth").write_text("/elsewhere\n")
    (tmp_path / ".venv").mkdir()  # a virtual environment's own files are not the repository's
    (tmp_path / ".venv" / "lib.py").write_text(planted[1])
    found = violations(tmp_path)
    assert found == ["extra.pth: a .pth file"] + [f"pkg/bad.py:{n}: {line}" for n, line in enumerate(planted, 2)]
