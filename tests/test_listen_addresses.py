"""Nothing the project starts listens on every interface unless asked (issue #30): no Python file of the
project names an all-interface address (``0.0.0.0``, ``::``, an empty host as in ``":0"`` or
``("", port)``), and every Dask ``LocalCluster`` says where its dashboard goes (its default,
``":8787"``, is every interface), as does every ``Client()``/``DaskTaskRunner()`` that would start one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: an address on every interface: 0.0.0.0 / :: (with or without a port or scheme), or a port with no host
ALL_INTERFACES = re.compile(r"(?:[a-z]+://)?(?:(?:0\.0\.0\.0|\[::\]|::)(?::\d+)?|:\d+)(?:/.*)?")
#: keyword arguments that take a listening host or address
ADDRESS_KEYWORDS = {"host", "ip", "interface", "listen_address", "dashboard_address", "address", "bind"}
#: calls that start a Dask cluster (and its dashboard) when not given where to listen / connect
CLUSTER_CALLS = {"LocalCluster": "dashboard_address", "Client": "address", "DaskTaskRunner": "address"}


def _name(func: ast.expr) -> str:
    """The called name; ``httpx.Client(...)`` (an HTTP client, which listens nowhere) is not Dask's ``Client``."""
    if isinstance(func, ast.Attribute):
        return "" if isinstance(func.value, ast.Name) and func.value.id == "httpx" else func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _all_interfaces(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(ALL_INTERFACES.fullmatch(node.value))


def _empty_host(node: ast.AST) -> bool:
    """``("", port)``: a socket address on every interface (a port: not a string, nor a container such as
    the ``[]`` of ``return "", []``)."""
    return (isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[0], ast.Constant)
            and node.elts[0].value == "" and not (isinstance(node.elts[1], ast.Constant)
                                                  and isinstance(node.elts[1].value, str))
            and not isinstance(node.elts[1], (ast.List, ast.Dict, ast.Set, ast.Tuple)))


def violations(path: Path) -> list[str]:
    """Every all-interface listening address in one Python file, as ``path:line: what``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if _all_interfaces(node):
            found.append(f"{where}: all-interface address {node.value!r}")
        elif _empty_host(node):
            found.append(f"{where}: socket address with an empty host (every interface)")
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in ADDRESS_KEYWORDS and isinstance(kw.value, ast.Constant) and kw.value.value == "":
                    found.append(f"{where}: {kw.arg}='' (every interface)")
            needed = CLUSTER_CALLS.get(_name(node.func))
            if needed and not node.args and needed not in {kw.arg for kw in node.keywords}:
                found.append(f"{where}: {_name(node.func)}() without {needed}= (Dask's default dashboard listens"
                             " on every interface)")
    return found


def project_files() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if not any(part.startswith(".") or part == "__pycache__"
                                                           for part in p.relative_to(ROOT).parts))


def test_no_project_file_listens_on_every_interface():
    files = [p for p in project_files() if p != Path(__file__).resolve()]
    assert len(files) > 100  # the scan sees the project
    assert [v for p in files for v in violations(p)] == []


def test_the_scan_catches_each_kind_of_all_interface_address(tmp_path):
    planted = {
        'LocalCluster(n_workers=1, dashboard_address=":0")': "':0'",
        "LocalCluster(n_workers=1)": "LocalCluster() without dashboard_address",
        "Client()": "Client() without address",
        'server.listen(host="0.0.0.0", port=80)': "'0.0.0.0'",
        'sock.bind(("", 0))': "empty host",
        'start(host="")': "host=''",
        'url = "tcp://0.0.0.0:8786"': "'tcp://0.0.0.0:8786'",
        'run(ip="::")': "'::'",
    }
    for source, what in planted.items():
        path = tmp_path / "bad.py"
        path.write_text(source + "\n")
        found = violations(path)
        assert len(found) == 1 and what in found[0], (source, found)
    fine = tmp_path / "fine.py"
    fine.write_text('LocalCluster(dashboard_address=None)\nsock.bind(("127.0.0.1", 0))\nhttpx.Client(timeout=5)\n'
                    'Client(address)\nx = "a:b"\ny = ""\nt = ("", "")[0]\n')
    assert violations(fine) == []
