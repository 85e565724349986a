"""Shipped data (``conf/``) is found through one accessor, ``schedlab.conf.path``, never from a module's
own location or the working folder: a command needing it works from any folder."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers import cli_env, run_cli

from schedlab import conf

ROOT = Path(__file__).resolve().parents[1]
#: folders of the repository that are not product code
SKIP = {"tests", "conf", ".venv", ".git", ".schedlab", "build"}


def test_path_names_a_shipped_file_either_way():
    assert conf.path("clusters/castor-sim.yaml") == conf.path("clusters", "castor-sim.yaml") == \
        conf.ROOT / "clusters" / "castor-sim.yaml"
    assert conf.path("clusters", "castor-sim.yaml").is_file() and conf.path("experiments").is_dir()
    assert conf.path() == conf.ROOT == Path(conf.__file__).resolve().parent
    assert not conf.path("clusters", "nosuch.yaml").exists()  # the caller decides what a missing name means


@pytest.mark.parametrize("parts", [("../pyproject.toml",), ("clusters", "..", "..", "cli.py"), ("/etc/hosts",)])
def test_path_never_leaves_conf(parts):
    with pytest.raises(ValueError, match="relative to conf/, without '..'"):
        conf.path(*parts)


def conf_by_location(root: Path) -> list[str]:
    """``something / "conf"`` (or ``/ "conf/..."``) in product code: a path to the shipped data built
    from a file's own location instead of :func:`schedlab.conf.path`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIP & set(rel.parts) or any(part.endswith(".egg-info") for part in rel.parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                for side in (node.left, node.right):
                    if isinstance(side, ast.Constant) and isinstance(side.value, str) and \
                            (side.value == "conf" or side.value.startswith("conf/")):
                        found.append(f"{rel}:{node.lineno}")
    return sorted(found)


def test_no_product_code_finds_conf_from_its_own_location():
    assert conf_by_location(ROOT) == []


def test_the_scan_catches_a_path_built_from_a_module_location(tmp_path):
    (tmp_path / "sched").mkdir()
    (tmp_path / "sched" / "cluster.py").write_text(
        "from pathlib import Path\n"
        "CLUSTERS = Path(__file__).resolve().parents[2] / 'conf' / 'clusters'\n"
        "TABLES = Path(__file__).parent / 'conf/papers/tables.yaml'\n")
    assert conf_by_location(tmp_path) == ["sched/cluster.py:2", "sched/cluster.py:3"]


def test_a_replay_needing_shipped_data_runs_from_an_unrelated_folder(tmp_path):
    """A cluster by name (conf/clusters), the synthetic trace's statistics (conf/synthetic.yaml), the
    workload catalog (conf/workloads.yaml) and castor's default predictor (conf/models), from an
    empty folder that is neither the checkout nor its parent."""
    cwd, out = tmp_path / "elsewhere", tmp_path / "out"
    cwd.mkdir()
    done = run_cli(["replay", "--cluster", "castor-sim", "--policy", "fifo", "castor", "--num-jobs", "20",
                    "--annotate", "--no-progress", "--out", str(out)], cli_env(tmp_path / "home"), cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "castor" / "summary.json").read_text())
    assert summary["jobs"] == 20 and list(cwd.iterdir()) == []
