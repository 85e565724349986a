"""The data schedlab ships (clusters, experiments, sweeps, the workload catalog, fitted models,
interference tables, the papers' tables) and the one way code finds it: :func:`path`.

The files are package data of ``schedlab.conf`` (``pyproject.toml``), installed beside this module by
an editable and a regular install alike, so a path is found from the package itself, never from the
working folder or a checkout's layout.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

#: the folder of the shipped files (this package's own)
ROOT = Path(__file__).resolve().parent


def path(*parts: str) -> Path:
    """The shipped file or folder ``parts`` names below ``conf/``: ``path("clusters", "castor-sim.yaml")``
    or ``path("clusters/castor-sim.yaml")``; ``path()`` is the folder itself. The path may not exist
    (a caller looking a name up checks ``is_file()``); one that would leave ``conf/`` is a ValueError."""
    relative = PurePosixPath(*parts) if parts else PurePosixPath()
    if relative.is_absolute() or ".." in relative.parts:
        raise ValueError(f"conf.path{parts!r}: a shipped resource is named relative to conf/, without '..'")
    return ROOT.joinpath(*relative.parts)


__all__ = ["ROOT", "path"]
