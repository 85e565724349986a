"""The policy registry: every ``Policy`` subclass with a ``name`` in a module of this package or of its
sub-packages (a policy family with its helpers: ``pollux/``, ``gimbal/``, ``lyra/``, ``sharing/``,
``gavel/``), plus the policies installed packages declare in the ``schedlab.policies`` entry-point
group.

``POLICIES[name]`` is the class. Wherever a policy is named (``--policy``, experiment YAML, a
:class:`~schedlab.sched.replay.ReplaySpec`) a *policy spec* may also name a class outside the package:

- ``path/to/file.py:ClassName``: a Python file (relative: to the cwd; in an experiment YAML, to its folder);
- ``package.module:ClassName``: an importable module.

:func:`load_policy_class` resolves a spec to its class; :func:`validate_params` validates parameters against
its ``Params`` model, the same for every policy (``make_policy`` builds one with them); :func:`policy_origin` is what the tracking records of an
external policy's code (the file's SHA-256 and path, the package's version).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import pkgutil
import re
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from schedlab.checks import bool_as_number, bool_message, did_you_mean, finite_floats, validation_message
from schedlab.sched.core.placement import register_waiting_policies
from schedlab.sched.policies.base import Policy

#: the entry-point group through which an installed package adds policies (``name = "pkg.module:Class"``)
ENTRY_POINT_GROUP = "schedlab.policies"
#: what an external policy's label may look like (it names result folders and MLflow runs)
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def _discover() -> dict[str, type[Policy]]:
    found: dict[str, type[Policy]] = {}
    for info in sorted(pkgutil.walk_packages(__path__, prefix=f"{__name__}."), key=lambda m: m.name):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Policy) and "name" in vars(value):
                found[value.name] = value
    return found


#: the policies shipped with schedlab (this package)
SHIPPED: dict[str, type[Policy]] = _discover()
#: an installed entry point that could not be added: its name -> why (raised when the name is used)
PLUGIN_ERRORS: dict[str, str] = {}
#: the distribution (name, version) of each installed entry point that was added
PLUGIN_DISTS: dict[str, tuple[str, str]] = {}


def _not_a_policy(value: Any, where: str) -> str | None:
    """Why ``value`` cannot be run as a policy (None: it can)."""
    if not isinstance(value, type):
        return f"{where}: {value!r} is not a class"
    if not issubclass(value, Policy):
        return (f"{where}: class {value.__name__} is not a Policy subclass (subclass"
                " schedlab.sched.api.Policy)")
    if not isinstance(vars(value).get("name"), str):
        example = re.sub(r"(?<!^)(?=[A-Z])", "-", value.__name__).lower()
        return (f"{where}: class {value.__name__} has no `name` of its own (the label of its results, e.g."
                f" name = {example!r})")
    if not (isinstance(value.Params, type) and issubclass(value.Params, BaseModel)):
        return f"{where}: {value.__name__}.Params must be a pydantic BaseModel (e.g. schedlab.sched.api.NoParams)"
    try:
        defaults = value.Params()
    except ValidationError as err:
        return f"{where}: {value.__name__}.Params needs a default for every field ({validation_message(err)})"
    problem = unloggable(defaults)
    if problem is not None:
        return f"{where}: {value.__name__}.Params: the default of {problem}"
    return None


def unloggable(params: BaseModel, names: Any = None) -> str | None:
    """Why a parameter of ``params`` (of ``names``, default all) cannot be recorded as JSON, as the runs'
    ``params.*`` are (``parameter NAME (VALUE) cannot be encoded as JSON: WHY``), or None. Checked where a
    policy is loaded and its parameters given, so that no replay starts with a value its tracking cannot
    write."""
    for name in type(params).model_fields if names is None else names:
        try:
            json.dumps(params.model_dump(mode="json", include={name})[name])
        except (ValueError, TypeError, PydanticSerializationError) as err:
            shown = repr(getattr(params, name))
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            return f"parameter {name!r} ({shown}) cannot be encoded as JSON: {why}"
    return None


def _entry_point_policies(shipped: dict[str, type[Policy]]) -> dict[str, type[Policy]]:
    """The ``schedlab.policies`` entry points of installed packages, loaded; one that fails to import,
    is no Policy subclass or takes a shipped policy's name is left out with a warning (and its name in
    :data:`PLUGIN_ERRORS`), so that a broken plugin never breaks a replay of other policies."""
    found: dict[str, type[Policy]] = {}
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = ep.dist.metadata["Name"] if ep.dist is not None else "?"
        where = f"entry point {ep.name!r} = {ep.value!r} of {dist} (group {ENTRY_POINT_GROUP})"
        problem = None
        if ep.name in shipped:
            problem = f"{where}: {ep.name!r} is a shipped policy; rename the entry point"
        elif ep.name in found or ep.name in PLUGIN_ERRORS:  # ambiguous: neither is used
            problem = f"{where}: another installed package declares {ep.name!r} too"
            found.pop(ep.name, None)
            PLUGIN_DISTS.pop(ep.name, None)
        elif not LABEL.fullmatch(ep.name):
            problem = f"{where}: a policy name must match {LABEL.pattern}"
        else:
            try:
                value = ep.load()
            except Exception as err:  # noqa: BLE001 - any import error of a third-party module
                problem = f"{where}: cannot import: {type(err).__name__}: {err}"
            else:
                problem = _not_a_policy(value, where)
                if problem is None:
                    found[ep.name] = value
                    PLUGIN_DISTS[ep.name] = (dist, ep.dist.metadata["Version"] if ep.dist is not None else "")
        if problem is not None:
            PLUGIN_ERRORS[ep.name] = problem
            warnings.warn(f"schedlab: policy left out: {problem}", stacklevel=2)
    return found


POLICIES: dict[str, type[Policy]] = {**SHIPPED, **_entry_point_policies(SHIPPED)}
BASELINES: tuple[str, ...] = ("fifo", "sjf", "ssf", "srtf", "tiresias", "backfill")
SHARING: tuple[str, ...] = tuple(name for name, cls in POLICIES.items() if cls.shares_gpus)
register_waiting_policies(lambda: sorted(name for name, cls in POLICIES.items() if cls.waits_when_refused))


# ---------------------------------------------------------------------------------------------
# policy specs


def spec_kind(spec: str) -> str:
    """``name`` (registered), ``file`` (``path.py:Class``) or ``module`` (``pkg.module:Class``)."""
    target, sep, _ = spec.rpartition(":")
    if not sep:
        return "name"
    if target.endswith(".py") or "/" in target or os.sep in target:
        return "file"
    return "module"


def resolve_spec(spec: str, base: str | Path | None = None) -> str:
    """``spec`` with a relative file path made absolute (against ``base``, else the cwd); other specs
    unchanged. A file spec is identified (idempotency keys, lineage) by its absolute path."""
    if spec_kind(spec) != "file":
        return spec
    target, _, attr = spec.rpartition(":")
    path = Path(target).expanduser()
    if not path.is_absolute():
        path = (Path(base) if base is not None else Path.cwd()) / path
    return f"{path.resolve()}:{attr}"


def _split(spec: str) -> tuple[str, str]:
    target, _, attr = spec.rpartition(":")
    if not target or not attr.isidentifier():
        raise ValueError(f"policy {spec!r}: expected path/to/file.py:ClassName or package.module:ClassName"
                         f" (ClassName a Python identifier)")
    return target, attr


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: loaded external classes by (file path or module, class name, SHA-256 of the code)
_LOADED: dict[tuple[str, str, str], type[Policy]] = {}


def load_policy_class(spec: str, *, source: str | None = None) -> type[Policy]:
    """The policy class ``spec`` names: a registered name, ``path/to/file.py:Class`` or
    ``pkg.module:Class``. ``source``: a file policy's text as the experiment read it (carried to Dask
    workers): loaded from the file when its content is the same, else from that text (a worker on
    another machine, or a file edited since), so a replay runs the code its run records.

    Raises ValueError naming the spec: unknown name, file or module missing or failing to import,
    class missing, not a Policy subclass, a label that clashes with a shipped policy."""
    kind = spec_kind(spec)
    if kind == "name":
        if spec in POLICIES:
            return POLICIES[spec]
        if spec in PLUGIN_ERRORS:
            raise ValueError(f"policy {spec!r} is not available: {PLUGIN_ERRORS[spec]}")
        raise ValueError(f"unknown policy {spec!r}{did_you_mean(spec, POLICIES)}; registered:"
                         f" {', '.join(sorted(POLICIES))}; or give path/to/file.py:ClassName or"
                         " package.module:ClassName")
    target, attr = _split(spec)
    if kind == "file":
        cls = _load_file(spec, Path(target).expanduser(), attr, source)
    else:
        cls = _load_module(spec, target, attr)
    label = cls.name
    if not LABEL.fullmatch(label):
        raise ValueError(f"policy {spec!r}: its name {label!r} must match {LABEL.pattern} (it names result folders)")
    if POLICIES.get(label, cls) is not cls:
        raise ValueError(f"policy {spec!r}: its name {label!r} is a registered policy's; give the class another"
                         " `name`")
    return cls


def policy_label(spec: str, *, source: str | None = None) -> str:
    """How results and runs name the policy ``spec``: a registered name itself, else the class's label."""
    cls = load_policy_class(spec, source=source)  # an unknown name raises too
    return spec if spec_kind(spec) == "name" else cls.name


def _load_file(spec: str, path: Path, attr: str, source: str | None) -> type[Policy]:
    data = None
    if path.is_file():
        try:
            data = path.read_bytes()
        except OSError as err:
            if source is None:
                raise ValueError(f"policy {spec!r}: cannot read {path} ({err.strerror or err})") from None
    if source is not None and (data is None or _sha256(data) != _sha256(source.encode())):
        path = _carried_copy(path, source)  # a remote worker, or the file changed since the run was keyed
        data = source.encode()
    if data is None:
        why = "a folder, not a file" if path.is_dir() else "no such file"
        raise ValueError(f"policy {spec!r}: {path}: {why}")
    key = (str(path.resolve()), attr, _sha256(data))
    if key not in _LOADED:
        stem = re.sub(r"\W", "_", path.stem)
        module_name = f"schedlab_policy_{stem}_{key[2][:12]}"
        module = sys.modules.get(module_name)
        if module is None:
            loader_spec = importlib.util.spec_from_file_location(module_name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise ValueError(f"policy {spec!r}: {path} is not a Python file")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[module_name] = module  # pydantic resolves the Params' annotations through it
            try:
                loader_spec.loader.exec_module(module)
            except Exception as err:  # noqa: BLE001 - whatever the user's module raises on import
                del sys.modules[module_name]
                raise ValueError(f"policy {spec!r}: importing {path} failed: {type(err).__name__}: {err}") from None
        _LOADED[key] = _class_of(spec, module, attr, str(path))
    return _LOADED[key]


def _carried_copy(path: Path, source: str) -> Path:
    """``source`` written once to a cache file named after its hash (the same name as ``path``)."""
    folder = Path(tempfile.gettempdir()) / "schedlab-policies" / _sha256(source.encode())[:16]
    copy = folder / path.name
    if not copy.is_file() or copy.read_bytes() != source.encode():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{path.name}.{os.getpid()}.tmp"
        tmp.write_bytes(source.encode())
        tmp.replace(copy)
    return copy


def _load_module(spec: str, module_name: str, attr: str) -> type[Policy]:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and module_name.startswith(err.name):
            file = Path(*module_name.split(".")).with_suffix(".py")
            hint = f"; the file here: {file}:{attr}" if file.is_file() else ""
            raise ValueError(f"policy {spec!r}: no module {err.name!r} (install the package, or put it on"
                             f" PYTHONPATH{hint})") from None
        raise ValueError(f"policy {spec!r}: importing {module_name} failed: {type(err).__name__}: {err}") from None
    except Exception as err:  # noqa: BLE001 - whatever the user's module raises on import
        raise ValueError(f"policy {spec!r}: importing {module_name} failed: {type(err).__name__}: {err}") from None
    return _class_of(spec, module, attr, module_name)


def _class_of(spec: str, module: Any, attr: str, where: str) -> type[Policy]:
    if not hasattr(module, attr):
        classes = [k for k, v in vars(module).items() if isinstance(v, type) and issubclass(v, Policy) and v is not Policy]
        raise ValueError(f"policy {spec!r}: {where} has no {attr!r}{did_you_mean(attr, classes)}"
                         f"{'; its Policy classes: ' + ', '.join(classes) if classes else ''}")
    problem = _not_a_policy(getattr(module, attr), f"policy {spec!r}")
    if problem is not None:
        raise ValueError(problem)
    return getattr(module, attr)


# ---------------------------------------------------------------------------------------------
# lineage


@dataclass(frozen=True)
class PolicyOrigin:
    """Where an external policy's code comes from: what the tracking records."""

    kind: str  # "file", "module" or "entry-point"
    path: str  # the source file
    sha256: str  # of the source file's bytes
    version: str | None = None  # "dist==version" of the installed package (module, entry point)

    def params(self) -> dict[str, str]:
        """The MLflow run params (``policy.source.*``)."""
        out = {"policy.source.kind": self.kind, "policy.source.path": self.path, "policy.source.sha256": self.sha256}
        if self.version:
            out["policy.source.version"] = self.version
        return out


def policy_origin(spec: str, *, source: str | None = None) -> PolicyOrigin | None:
    """The origin of an external policy (None for a shipped one, which ``code_version`` covers). A file
    spec's hash is of ``source`` when given (the text an experiment carries), else of the file."""
    kind = spec_kind(spec)
    if kind == "name" and spec in SHIPPED:
        return None
    cls = load_policy_class(spec, source=source)
    if kind == "file":
        target, _ = _split(spec)
        data = source.encode() if source is not None else Path(target).expanduser().read_bytes()
        return PolicyOrigin("file", str(Path(target).expanduser().resolve()), _sha256(data))
    module = sys.modules[cls.__module__]
    path = getattr(module, "__file__", None) or ""
    digest = _sha256(Path(path).read_bytes()) if path and Path(path).is_file() else ""
    if kind == "name":
        dist, version = PLUGIN_DISTS.get(spec, ("?", ""))
        return PolicyOrigin("entry-point", path, digest, f"{dist}=={version}")
    return PolicyOrigin("module", path, digest, _module_version(cls.__module__))


def _module_version(module: str) -> str | None:
    """``dist==version`` of the installed distribution that provides ``module``'s top-level package."""
    top = module.partition(".")[0]
    dists = importlib.metadata.packages_distributions().get(top, [])
    if not dists:
        return None
    return f"{dists[0]}=={importlib.metadata.metadata(dists[0])['Version']}"


def read_source(spec: str) -> str | None:
    """The text of a file spec's file (what an experiment carries to its workers; its bytes as UTF-8, line
    ends kept, so that its hash is the file's); None for others."""
    if spec_kind(spec) != "file":
        return None
    target, _ = _split(spec)
    return Path(target).expanduser().read_bytes().decode()


# ---------------------------------------------------------------------------------------------
# parameters


def parameter_list(name: str, *, source: str | None = None) -> str:
    """The parameters of policy ``name`` with their defaults, for an error message."""
    defaults = load_policy_class(name, source=source).Params().model_dump(mode="json")
    if not defaults:
        return f"{name} has no parameters"
    return f"parameters of {name} (default): " + ", ".join(f"{k} ({v!r})" for k, v in defaults.items())


def make_policy(name: str, params: dict[str, Any] | None = None, *, source: str | None = None) -> Policy:
    """A policy of spec ``name`` with ``params`` validated against its ``Params`` model (``source``:
    see :func:`load_policy_class`)."""
    return load_policy_class(name, source=source)(validate_params(name, params, source=source))


def validate_params(name: str, params: dict[str, Any] | None = None, *, source: str | None = None) -> BaseModel:
    """``params`` validated against the ``Params`` model of policy spec ``name``: a ValueError naming an
    unknown parameter (and the known ones), a bad value, a non-finite number or a boolean for a number."""
    cls = load_policy_class(name, source=source)
    unknown = [k for k in params or {} if k not in cls.Params.model_fields]
    if unknown:
        raise ValueError(f"policy {name!r} has no parameter {unknown[0]!r}{did_you_mean(unknown[0], cls.Params.model_fields)};"
                         f" {parameter_list(name, source=source)}")
    try:
        validated = cls.Params.model_validate(params or {})
    except ValidationError as err:
        raise ValueError(f"bad parameters for policy {name!r}: {validation_message(err)};"
                         f" {parameter_list(name, source=source)}") from None
    bad = finite_floats({k: getattr(validated, k) for k in params or {}})
    if bad is not None:
        raise ValueError(f"bad parameters for policy {name!r}: {bad}: must be a finite number"
                         f" (got {getattr(validated, bad)!r})")
    for key, value in (params or {}).items():  # pydantic reads `true` as 1
        where = bool_as_number(value, getattr(validated, key))
        if where is not None:
            raise ValueError(f"bad parameters for policy {name!r}: {key}: {bool_message(where)}")
    problem = unloggable(validated, params or {})
    if problem is not None:
        raise ValueError(f"bad parameters for policy {name!r}: {problem}")
    return validated
