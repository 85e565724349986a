"""pyproject.toml lists every package folder (setuptools installs only those listed): a sub-package
added or moved without its entry breaks a fresh install, and one listed that does not exist fails it;
its package-data covers every shipped file; a wheel installed elsewhere runs from any folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

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


def test_every_shipped_conf_file_is_package_data():
    """setuptools installs only the files ``[tool.setuptools.package-data]``'s globs match: a file added
    to conf/ under another suffix would be missing from a regular install."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["schedlab.conf"]
    conf = ROOT / "conf"
    shipped = {p for p in conf.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".py"}
    matched = {p for pattern in patterns for p in conf.glob(pattern) if p.is_file()}
    assert sorted(str(p.relative_to(conf)) for p in shipped - matched) == []


@pytest.mark.slow
def test_an_installed_wheel_holds_every_package_and_finds_its_data_from_any_folder(tmp_path):
    """A regular (non-editable) install from a wheel built from this checkout: the wheel holds every
    package pyproject lists and every file of conf/; the installed copy, run from an unrelated folder
    with the checkout nowhere on its path, replays on a shipped cluster with the shipped models and
    finds an experiment and a sweep by name."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".schedlab", "__pycache__", "*.egg-info", "build", "dist", "tests"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tmp_path / "dist").glob("schedlab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert [p for p in packages if f"{p.replace('.', '/')}/__init__.py" not in names] == []
    conf_files = {f"schedlab/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / "conf").rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts}
    assert sorted(conf_files - names) == []
    site = tmp_path / "site"
    installed = subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    cwd, out = tmp_path / "elsewhere", tmp_path / "out"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "PREFECT_HOME")}
    env.update(PYTHONPATH=str(site), SCHEDLAB_HOME=str(tmp_path / "home"), DO_NOT_TRACK="true",
               MLFLOW_DISABLE_TELEMETRY="true", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    where = subprocess.run([sys.executable, "-c", "import schedlab; print(schedlab.__file__)"], env=env, cwd=cwd,
                           capture_output=True, text=True, timeout=120)
    assert where.stdout.strip() == str(site / "schedlab" / "__init__.py"), where.stdout + where.stderr
    replay = subprocess.run([sys.executable, "-m", "schedlab.cli", "replay", "--cluster", "castor-sim", "--policy",
                             "fifo", "castor", "--num-jobs", "20", "--annotate", "--no-progress", "--out", str(out)],
                            env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert json.loads((out / "castor" / "summary.json").read_text())["jobs"] == 20
    lookups = ("from schedlab.sched.spec import load_config; from schedlab.profiling.sweep import find; "
               "from schedlab.sched.reporting.paper_tables import paper_tables; "
               "print(len(load_config('quickstart').policy_entries()), find('smoke').name, len(paper_tables()) > 0)")
    named = subprocess.run([sys.executable, "-c", lookups], env=env, cwd=cwd, capture_output=True, text=True,
                           timeout=300)
    assert named.returncode == 0 and named.stdout.split()[1:] == ["smoke.yaml", "True"], named.stdout + named.stderr
    assert list(cwd.iterdir()) == []
