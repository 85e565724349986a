"""pyproject.toml lists every package folder (setuptools installs only those listed): a sub-package
added or moved without its entry breaks a fresh install, and one listed that does not exist fails it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"tests", ".venv", ".git", ".schedlab", ".ci"}


def test_pyproject_lists_exactly_the_package_folders():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"schedlab"} | {
        "schedlab." + ".".join(init.parent.relative_to(ROOT).parts)
        for init in ROOT.rglob("__init__.py")
        if init.parent != ROOT and not SKIP & set(init.relative_to(ROOT).parts)
        and not any(part.endswith(".egg-info") or part.startswith(".") for part in init.relative_to(ROOT).parts)
    }
    assert listed == found, f"missing from pyproject: {sorted(found - listed)}; listed but absent: {sorted(listed - found)}"
