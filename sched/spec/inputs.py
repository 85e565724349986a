"""An experiment's input files as content: what each replay reads (trace, cluster YAML, ξ tables or model,
iteration-time model, SM-activity profile store, inference-load series), read once by the client and
named by the SHA-256 of their content.

A Dask worker that cannot see the client's disk (another host, a container) gets these contents from the
client through Dask (:mod:`schedlab.tasks.inputs`) and reads its own copy: :func:`map_paths` rewrites a
replay's paths to the copies. The digests join the replay's idempotency key, so a changed file is a new
replay, never a resumed one. A trace source may also be an fsspec URL (``https://``, ``s3://``, ``gs://``,
``file://``): the client reads it (``s3``/``gs`` need ``pip install s3fs``/``gcsfs``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schedlab.sched.spec.experiment import ExperimentReplay

#: the largest input the client reads into memory to ship (a bigger file is an error naming it)
MAX_INPUT_BYTES = 2 * 1024**3


class InputError(ValueError):
    """An input that cannot be read as content (missing, unreadable, too big, a URL whose scheme has no
    installed reader)."""


def is_url(text: str | None) -> bool:
    """An fsspec URL (``scheme://…``), read by the client; a local path otherwise."""
    return bool(text) and "://" in text and not Path(text).exists()  # type: ignore[arg-type]


@dataclass(frozen=True)
class InputFile:
    """One input as content: ``files`` maps each file's path inside it to its bytes (a single file: its
    name), ``sha`` the digest of them all (file names and contents)."""

    where: str  # the client's path or URL
    sha: str
    files: dict[str, bytes]

    @property
    def name(self) -> str:
        """What the copy is called on a worker (the input's own name: formats are detected from it)."""
        return os.path.basename(self.where.rstrip("/")) or "input"

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.files.values())


def digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return h.hexdigest()


def read(where: str) -> InputFile:
    """``where`` (a file, a folder or a URL) read into memory. Raises InputError naming it."""
    files: dict[str, bytes] = {}
    try:
        if is_url(where):
            files[os.path.basename(where.rstrip("/")) or "input"] = _read_url(where)
        elif Path(where).is_dir():
            for path in sorted(p for p in Path(where).rglob("*") if p.is_file()):
                files[path.relative_to(where).as_posix()] = path.read_bytes()
        else:
            files[Path(where).name] = Path(where).read_bytes()
    except OSError as err:
        raise InputError(f"{where}: cannot read it ({err.strerror or err})") from None
    size = sum(len(b) for b in files.values())
    if size > MAX_INPUT_BYTES:
        raise InputError(f"{where}: {size / 1024**3:.1f} GiB, more than the {MAX_INPUT_BYTES / 1024**3:g} GiB an input"
                         " may be (it is held in the client's memory and sent to each worker)")
    return InputFile(where, digest(files), files)


def _read_url(url: str) -> bytes:
    import fsspec

    try:
        with fsspec.open(url, "rb") as stream:
            return stream.read()
    except (ImportError, ValueError) as err:  # no reader installed for the scheme, a malformed URL
        raise InputError(f"{url}: cannot read it ({err})") from None
    except FileNotFoundError:
        raise InputError(f"{url}: not found") from None


def written(folder: Path, sha: str) -> Path | None:
    """The copy :func:`write` made of content ``sha`` under ``folder``, if there is one."""
    return next(iter((folder / sha).iterdir()), None) if (folder / sha).is_dir() else None


def write(found: InputFile, folder: Path) -> Path:
    """The input's copy under ``folder/<sha>/`` (written once, atomically: a half-written copy is never
    read), its path returned: the file itself, or the folder for a folder input."""
    if (target := written(folder, found.sha)) is not None:
        return target
    staging = folder / f".{found.sha}.{os.getpid()}"
    for rel, data in found.files.items():
        path = staging / (found.name if len(found.files) == 1 and rel == found.name else f"{found.name}/{rel}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    try:
        os.replace(staging, folder / found.sha)
    except OSError:  # another process wrote it meanwhile
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return folder / found.sha / found.name


def _split_load(load: str, known: dict[str, str]) -> tuple[str, str]:
    """An inference load ``PATH`` or ``PATH:MODEL`` (the model after the last colon) as (path, suffix)."""
    if Path(load).exists() or ":" not in load or is_url(load) or load in known:
        return load, ""
    head, _, model = load.rpartition(":")
    return head, f":{model}"


def map_paths(replay: ExperimentReplay, change: Callable[[str], str]) -> ExperimentReplay:
    """``replay`` with each input path or URL it reads passed through ``change``: those its ``inputs`` name
    (on a worker, where they may not exist), else those that exist here (names of shipped resources,
    ``catalog``, ``analytic`` and MLflow URIs are no inputs: left as they are)."""
    from schedlab.sched.models.inference import is_synthetic
    from schedlab.sched.models.interference import with_paths

    def one(value: str | None) -> str | None:
        wanted = value in replay.inputs or is_url(value) or Path(value).exists() if value else False
        return change(value) if wanted else value  # type: ignore[arg-type]

    update: dict[str, Any] = {"source": one(replay.source), "cluster": one(replay.cluster),
                              "smact_profiles": one(replay.smact_profiles)}
    models = dict(replay.models)
    if "iteration_time" in models:
        models["iteration_time"] = one(models["iteration_time"])
    if "interference" in models:
        models["interference"] = with_paths(models["interference"], lambda p: one(p) or p)
    update["models"] = models
    if replay.inference and not is_synthetic(replay.inference["load"]):
        path, suffix = _split_load(replay.inference["load"], replay.inputs)
        update["inference"] = {**replay.inference, "load": (one(path) or path) + suffix}
    return replay.model_copy(update=update)


def paths_of(replays: Iterable[ExperimentReplay]) -> list[str]:
    """The distinct input paths and URLs of ``replays``, in order of first use."""
    found: dict[str, None] = {}
    for replay in replays:
        map_paths(replay, lambda path: found.setdefault(path) or path)
    return list(found)
