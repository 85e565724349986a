"""An experiment YAML read into an :class:`~schedlab.sched.spec.experiment.ExperimentSpec`: a bare name
looks in ``conf/experiments``; relative paths in it resolve against its folder, then the cwd; every value
is checked before any work (what needs reading, through :mod:`schedlab.sched.parts`), and an error is a
:class:`ConfigError` naming the file, the key path and its line."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from schedlab import conf
from schedlab.checks import error_loc, load_yaml, plain
from schedlab.sched.core.cluster import ClusterSpec
from schedlab.sched.models.inference import is_synthetic
from schedlab.sched.policy_needs import CapabilityError, CapabilityWarning
from schedlab.sched.spec import fields, inputs
from schedlab.sched.spec.experiment import ExperimentSpec

CONF_DIR = conf.path("experiments")
#: the fallback warnings already given by this process (:func:`load_config`)
_WARNED: set[str] = set()


class ConfigError(ValueError):
    """A bad experiment file: the message names the file, the key path and its line."""


#: union branch names pydantic puts in an error's location
_BRANCHES = ("str", "PolicyEntry", "literal['all']", "list[union[str,PolicyEntry]]")


def _keys(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(part for part in loc if isinstance(part, int) or part not in _BRANCHES)


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in _keys(loc):
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def key_lines(text: str) -> dict[tuple[Any, ...], int]:
    """The line of every key (and list item) of a YAML document, by its path: ``("traces", 0, "options")``."""
    lines: dict[tuple[Any, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[Any, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    lines[(*path, key.value)] = key.start_mark.line + 1
                    walk(value, (*path, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[(*path, i)] = item.start_mark.line + 1
                walk(item, (*path, i))

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


class _File:
    """Where an experiment's errors point: its path and the lines of its keys."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.lines = path, key_lines(text)

    def line(self, loc: tuple[Any, ...]) -> str:
        """`` (line N)`` of the nearest key of ``loc`` the file has, else ``""``."""
        keys = _keys(loc)
        while keys and keys not in self.lines:
            keys = keys[:-1]
        return f" (line {self.lines[keys]})" if keys else ""

    def error(self, loc: tuple[Any, ...], message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {_where(loc)}: {message}{self.line(loc)}")


def load_config(path: str | Path, seeds: list[int] | None = None) -> ExperimentSpec:
    """Read and validate an experiment YAML; a name without a folder looks in ``conf/experiments``.
    ``seeds`` replaces the file's ``seeds`` (validated as if the file listed them).

    Raises :class:`ConfigError` naming the file, the key path and its line."""
    path = Path(path)
    if not path.exists() and path.parent == Path(".") and (CONF_DIR / path).exists():
        path = CONF_DIR / path
    if not path.exists() and path.parent == Path(".") and (CONF_DIR / f"{path}.yaml").exists():
        path = CONF_DIR / f"{path}.yaml"
    if not path.is_file():
        raise ConfigError(f"{path}: experiment file not found")
    text = path.read_text()
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of fields, got {type(raw).__name__}")
    if seeds is not None:
        raw["seeds"] = list(seeds)
    file = _File(path, text)
    try:
        config = ExperimentSpec.model_validate(raw)
    except ValidationError as err:
        lines = [f"{path}: invalid experiment config"]
        for e in err.errors():
            loc = error_loc(e)
            got = (f" (got {plain(e['input'])!r})" if isinstance(e.get("input"), (int, float, str))
                   and e["type"] != "value_error" else "")  # a validator's own message names the value
            lines.append(f"  {_where(loc)}: {e['msg'].removeprefix('Value error, ')}{got}{file.line(loc)}")
        raise ConfigError("\n".join(lines)) from None
    config._base_dir = path.resolve().parent
    config._bases = (config._base_dir, *shipped_base(path))
    config._path = path.resolve()
    _check_semantics(config, file)
    return config


def shipped_base(path: Path) -> list[Path]:
    """For a shipped experiment file (in ``conf/experiments``), the root of the checkout it is in: its
    relative paths (``../shared/data/…``, the development data beside the repository) mean that folder's,
    whatever the working folder; nothing for another file."""
    return [conf.ROOT.parent] if path.resolve().is_relative_to(conf.path("experiments")) else []


def _relative(text: str, config: ExperimentSpec) -> str:
    """Where a relative path was looked for, for an error about ``text`` (nothing for an absolute one)."""
    return "" if Path(text).is_absolute() or not fields.reads_files(text) else f" (a relative path: {_looked_in(config)})"


def _looked_in(config: ExperimentSpec) -> str:
    """Where a relative path in ``config`` is looked for (``resolve_source``'s order)."""
    *first, last = [str(p) for p in config.search_path()]
    return f"looked in {', '.join(first)} and {last}"


def _check_semantics(config: ExperimentSpec, file: _File) -> None:
    """What needs the file's folder or reading: policies named by file or module and their parameters,
    clusters, models, the inference load, profile stores, trace files, what each policy can do here."""
    from schedlab.sched.policies import POLICIES, load_policy_class, validate_params

    path = file.path
    for i, entry in enumerate([] if config.policies == "all" else config.policies):
        name = entry if isinstance(entry, str) else entry.name
        try:
            cls = load_policy_class(config.resolve_policy(name))
        except ValueError as err:
            looked = f" ({_looked_in(config)})" if "no such file" in str(err) and not Path(name).is_absolute() else ""
            raise file.error(("policies", i, "name"), f"{err}{looked}") from None
        if name not in POLICIES:  # a registered one is checked with the placement field
            try:
                fields.placement(config.placement, [(name, cls)])
            except ValueError as err:
                raise file.error(("placement",), str(err)) from None
    entries = config.policy_entries()
    for i, entry in enumerate(entries):
        loc = ("policies",) if config.policies == "all" else ("policies", i, "params")
        try:
            validate_params(entry.name, entry.params)
        except ValueError as err:
            raise ConfigError(f"{path}: {'policies' if len(loc) == 1 else _where(loc[:2])}.params: {err}"
                              f"{file.line(loc)}") from None
    labels = [e.label for e in entries]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise file.error(("policies",), f"duplicate label(s) {dupes}; give each entry a `label:`")
    if config.baseline is not None and config.baseline not in labels:
        raise file.error(("baseline",), f"{config.baseline!r} is not among the policies {labels}")
    if len(set(config.seeds)) != len(config.seeds):
        raise file.error(("seeds",), f"duplicate seeds {config.seeds}")
    names = [t.name for t in config.traces]
    if len(set(names)) != len(names):
        raise file.error(("traces",), f"duplicate trace names {names}")
    try:
        config.resolve_profiles()
    except ValueError as err:
        raise ConfigError(f"{path}: {err}{file.line(('smact_profiles',))}") from None
    _check_clusters(config, file)
    _check_models(config, file)
    try:
        fallbacks = config.fallbacks()
    except CapabilityError as err:
        raise ConfigError(f"{path}: {err}{file.line(('traces',))}") from None
    for fallback in dict.fromkeys(fallbacks.values()):  # once each, once per process (a flow reads its file again)
        message = f"{path}: {fallback}"
        if message not in _WARNED:
            _WARNED.add(message)
            warnings.warn(message, CapabilityWarning, stacklevel=4)
    for i, trace in enumerate(config.traces):
        if trace.source in (None, "synthetic"):
            if trace.format not in (None, "synthetic"):
                raise file.error(("traces", i, "source"), f"format {trace.format!r} needs a source file")
            continue
        if inputs.is_url(trace.source):
            try:
                inputs.read(trace.source)
            except inputs.InputError as err:
                raise file.error(("traces", i, "source"), str(err)) from None
            continue
        resolved = Path(config.resolve_source(trace.source) or "")
        if not resolved.exists():
            raise file.error(("traces", i, "source"), f"{trace.source!r} not found ({_looked_in(config)})")


def _check_clusters(config: ExperimentSpec, file: _File) -> dict[str, ClusterSpec]:
    """Each cluster read, and able to lend inference servers when the experiment lends them."""
    clusters = {}
    for i, cluster in enumerate(config.clusters):
        try:
            clusters[cluster] = fields.cluster(cluster)
        except Exception as err:  # noqa: BLE001 - the cluster loader's own message
            raise file.error(("clusters", i), str(err)) from None
        if config.inference is not None:
            try:
                fields.lends(clusters[cluster])
            except ValueError as err:
                raise file.error(("clusters", i), f"{err}, which `inference:` needs") from None
    return clusters


def _check_models(config: ExperimentSpec, file: _File) -> None:
    """The iteration-time model file, the ξ source's tables or model and the inference load the experiment
    names, read (by :mod:`schedlab.sched.parts`, as each replay's worker will, their relative paths resolved
    as for the workers: :meth:`~schedlab.sched.spec.ExperimentSpec.resolve_models`) so that a bad one fails
    before any work. Registered versions (``latest``, ``models:/``) are fetched by the replays."""
    from schedlab.sched import parts

    models = config.resolve_models()  # relative paths as the workers will read them
    if fields.reads_files(models["iteration_time"]):
        try:
            parts.iteration_times(models["iteration_time"])
        except fields.SpecError as err:
            raise file.error(("models", "iteration_time"), f"{err}{_relative(config.models.iteration_time, config)}") from None
    if models["interference"] != fields.LATEST and not any(uri in models["interference"] for uri in ("models:/", "runs:/")):
        try:  # its tables or model read now (seconds at most), not by each replay: a bad one before any work
            parts.interference_source(models["interference"])
        except fields.SpecError as err:
            from schedlab.sched.models.interference import with_paths

            paths: list[str] = []
            with_paths(config.models.interference, lambda path: paths.append(path) or path)
            where = next((_relative(path, config) for path in paths if _relative(path, config)), "")
            raise file.error(("models", "interference"), f"{err}{where}") from None
    if config.inference is not None:
        try:
            parts.inference_load(config.resolve_inference()["load"])
        except fields.SpecError as err:
            load = config.inference.load
            where = "" if Path(load).is_absolute() or is_synthetic(load) else f" (a relative path: {_looked_in(config)})"
            raise file.error(("inference", "load"), f"{err}{where}") from None
