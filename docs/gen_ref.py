"""The generated reference pages: the CLI, the policies, the configuration schemas and the policy API,
written from the code at build time (an MkDocs hook, ``hooks:`` in ``mkdocs.yml``), never kept by hand.

Where each page reads its facts is the table just below: dotted paths ``module:attribute``. When code
moves, repoint the table; nothing else here names a schedlab module. The page functions take their
sources as optional arguments so that a test can hand them a planted parser or policy."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import inspect
import json
import os
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------------------------------
# Where the facts come from (repoint here when code moves)
# ---------------------------------------------------------------------------------------------------
SOURCES: dict[str, str] = {
    "parser": "schedlab.cli:build_parser",                   # () -> argparse.ArgumentParser
    "policies": "schedlab.sched.policies:POLICIES",          # name -> Policy subclass
    "needs": "schedlab.sched.policy_needs:needs",            # (name, cls) -> frozenset of capabilities
    "capabilities": "schedlab.sched.policy_needs:CAPABILITIES",  # capability -> what gives it
    "api": "schedlab.sched.api",                             # the public policy API (its __all__)
}
#: the configuration schemas: (title, what it is, dotted path of a pydantic model or a dataclass)
SCHEMAS: list[tuple[str, str, str]] = [
    ("Experiment file", "`conf/experiments/*.yaml`, `schedlab experiment PATH`; every key explained with an example in"
     " [Experiments and their YAML](../how-to/experiments.md#experiment-files-confexperimentsyaml)",
     "schedlab.sched.spec:ExperimentSpec"),
    ("Cluster file", "`conf/clusters/*.yaml`, `--cluster PATH`; see [Clusters](../how-to/clusters.md)",
     "schedlab.sched.core.cluster:ClusterSpec"),
    ("Trace loader options", "a trace's `options:` in an experiment, the `replay` flags of the same names",
     "schedlab.sched.traces:LoadOptions"),
    ("Inference servers lent to training", "an experiment's `inference:`, the `--inference-*` flags",
     "schedlab.sched.core.pools:LoanOptions"),
    ("Lyra annotation", "`annotate: {scheme: lyra, ...}`", "schedlab.sched.models.annotate:LyraScheme"),
    ("Gimbal annotation", "`annotate: {scheme: gimbal, ...}`", "schedlab.sched.models.annotate:GimbalScheme"),
    ("Profiling sweep: one configuration", "what each entry of a sweep's `solo` grid expands to"
     " (`conf/sweeps/*.yaml`; the file's keys are on the profiling page)", "schedlab.profiling.sweep:SoloConfig"),
    ("Profiling sweep: one pair", "what each entry of a sweep's `pair` grid expands to",
     "schedlab.profiling.sweep:PairConfig"),
    ("Profiling sweep: one capped solo", "a solo under an MPS active-thread cap (`mps_caps`)",
     "schedlab.profiling.sweep:CappedSoloConfig"),
    ("Profiling sweep", "a whole sweep once parsed", "schedlab.profiling.sweep:Sweep"),
]
#: the pages this module writes, relative to the docs folder
PAGES: dict[str, str] = {
    "reference/cli.md": "cli_page",
    "reference/policies.md": "policies_page",
    "reference/schemas.md": "schemas_page",
    "reference/api.md": "api_page",
}

GENERATED_NOTE = ("<!-- generated at build time by docs/gen_ref.py from the code; do not edit -->\n"
                  "!!! note \"Generated\"\n    This page is written from the code each time the site is built.\n\n")
REPO = Path(__file__).resolve().parents[1]


def load(dotted: str) -> Any:
    """``module:attribute`` (or a bare module) -> the object."""
    module, _, attr = dotted.partition(":")
    value: Any = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        value = getattr(value, part)
    return value


# ---------------------------------------------------------------------------------------------------
# Markdown helpers
# ---------------------------------------------------------------------------------------------------
_CODE_SPAN = re.compile(r"(`[^`]*`)")


_DOCS_PAGE = re.compile(r"\bdocs/((?:[\w-]+/)*[\w-]+\.md)")


def link_docs(text: str) -> str:
    """``docs/PAGE.md`` named in code text -> a link to that page (the generated pages are one level down)."""
    return _DOCS_PAGE.sub(lambda m: f"[{m.group(1).removesuffix('.md')}](../{m.group(1)})", text)


def md(text: str | None) -> str:
    """Plain text as Markdown: code spans kept, emphasis characters and HTML brackets escaped, docs
    pages named by path linked."""
    if not text:
        return ""
    parts = _CODE_SPAN.split(str(text))
    for i in range(0, len(parts), 2):
        parts[i] = link_docs(parts[i].replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_")
                             .replace("<", "&lt;").replace(">", "&gt;").replace("[", "\\["))
    return "".join(parts)


def cell(text: Any) -> str:
    """One table cell: Markdown text on one line, pipes escaped outside code spans (inside one a pipe
    does not split the cell)."""
    parts = _CODE_SPAN.split(md(" ".join(str(text).split())))
    return "".join(p.replace("|", "\\|") if i % 2 == 0 else p for i, p in enumerate(parts))


def code(value: Any) -> str:
    """A value as a code span in a table cell (backticks inside handled)."""
    text = " ".join(str(value).split())
    text = text.replace(str(REPO.parent), "<repo>/..").replace(str(REPO), "<repo>")
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(header: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def slug(text: str) -> str:
    """The anchor MkDocs' toc gives a heading of ``text`` (for links within the generated pages)."""
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-")


def docstring_md(doc: str | None) -> str:
    """A reStructuredText-flavoured docstring as Markdown: roles and literals as code spans,
    ``.. code-block::`` blocks fenced."""
    if not doc:
        return ""
    text = inspect.cleandoc(doc)
    text = re.sub(r":(?:class|func|meth|data|attr|mod|exc|obj):`~?([^`]+)`",
                  lambda m: f"`{m.group(1).rsplit('.', 1)[-1] if '~' in m.group(0) else m.group(1)}`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    parts = _CODE_SPAN.split(text)
    text = "".join(link_docs(p) if i % 2 == 0 else p for i, p in enumerate(parts))
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"\s*\.\. code-block::\s*(\w*)", lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        i += 1
        block = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
            block.append(lines[i])
            i += 1
        out += ["", f"```{match.group(1)}", textwrap.dedent("\n".join(block)).strip("\n"), "```", ""]
    # a bullet list needs a blank line before it in Python-Markdown
    fixed: list[str] = []
    for line in out:
        if re.match(r"- ", line) and fixed and fixed[-1].strip() and not re.match(r"\s*- |\s{2,}", fixed[-1]):
            fixed.append("")
        fixed.append(line)
    return "\n".join(fixed)


# ---------------------------------------------------------------------------------------------------
# The CLI
# ---------------------------------------------------------------------------------------------------
def subcommands(parser: argparse.ArgumentParser, prefix: str = "schedlab") -> list[tuple[str, argparse.ArgumentParser, str]]:
    """Every sub-command, depth first: ``(full name, its parser, its one-line help)``."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                full = f"{prefix} {name}"
                found.append((full, sub, helps.get(name) or ""))
                found += subcommands(sub, full)
    return found


def _option_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.help == argparse.SUPPRESS:
            continue
        plain = action.metavar or action.dest.upper()  # the choices are a column of their own
        if action.option_strings:
            names = ", ".join(action.option_strings)
            if action.nargs != 0:
                names += " " + (plain if action.choices else formatter._format_args(
                    action, formatter._get_default_metavar_for_optional(action)))
        else:
            names = plain if action.choices else formatter._format_args(
                action, formatter._get_default_metavar_for_positional(action))
        default = action.default
        if default is None or default is argparse.SUPPRESS or default is False or default == []:
            shown = ""
        else:
            shown = code(" ".join(map(str, default)) if isinstance(default, (list, tuple)) else default)
        choices = ", ".join(code(c) for c in action.choices) if action.choices and not isinstance(
            action, argparse._SubParsersAction) else ""
        rows.append([code(names), cell(formatter._expand_help(action) if action.help else ""), shown, choices])
    return rows


def cli_entries(parser: argparse.ArgumentParser | None = None) -> dict[str, str]:
    """Sub-command -> its reference entry (a Markdown section); usage lines wrapped at 100 columns,
    whatever the terminal that builds the site."""
    parser = parser or load(SOURCES["parser"])()
    os.environ["COLUMNS"] = "100"  # argparse reads it when it formats; the same page on every machine
    entries = {}
    for full, sub, short in subcommands(parser):
        parts = [f"## `{full}`\n", f"{md(sub.description or short)}\n" if sub.description or short else "",
                 f"```\n{sub.format_usage().strip()}\n```\n"]
        rows = _option_rows(sub)
        if rows:
            parts.append(table(["option", "what it does", "default", "choices"], rows))
        nested = [name for name, _, _ in subcommands(sub, full)]
        if nested:
            parts.append("Sub-commands: " + ", ".join(f"[`{n}`](#{slug(n)})" for n in nested) + ".\n")
        entries[full] = "\n".join(p for p in parts if p)
    return entries


def cli_page(parser: argparse.ArgumentParser | None = None) -> str:
    parser = parser or load(SOURCES["parser"])()
    entries = cli_entries(parser)  # sets COLUMNS first
    head = ["# Command line\n", GENERATED_NOTE, f"{md(parser.description)}\n",
            f"```\n{parser.format_usage().strip()}\n```\n",
            table(["command", "what it does"],
                  [[f"[`{full}`](#{slug(full)})", cell(short)] for full, _, short in subcommands(parser)]),
            "Every option is checked before any work starts; a bad value exits 2 naming the option."
            " `schedlab COMMAND --help` prints the same text in the terminal.\n"]
    return "\n".join(head + list(entries.values()))


# ---------------------------------------------------------------------------------------------------
# Types, defaults and constraints (pydantic models and dataclasses)
# ---------------------------------------------------------------------------------------------------
def type_name(annotation: Any) -> str:
    """A readable type: ``int``, ``list[str | PolicyEntry]``, ``'a' | 'b'``."""
    if annotation is None or annotation is type(None):
        return "None"
    if isinstance(annotation, str):
        return annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _constraints(metadata: Iterable[Any]) -> list[str]:
    words = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "at least", "max_length": "at most"}
    found = []
    for item in metadata:
        for attr, word in words.items():
            value = getattr(item, attr, None)
            if value is not None:
                unit = (" item" if value == 1 else " items") if "length" in attr else ""
                found.append(f"{word} {value:,}{unit}" if isinstance(value, int) and abs(value) >= 10_000
                             else f"{word} {value}{unit}")
    return found


def _nested_types(annotation: Any) -> list[type]:
    """The pydantic models and dataclasses inside an annotation (to document them too)."""
    if isinstance(annotation, type) and (_is_pydantic(annotation) or dataclasses.is_dataclass(annotation)):
        return [annotation]
    return [t for arg in typing.get_args(annotation) for t in _nested_types(arg)]


def _is_pydantic(cls: Any) -> bool:
    return isinstance(cls, type) and hasattr(cls, "model_fields") and hasattr(cls, "model_json_schema")


def _comments(cls: type) -> dict[str, str]:
    """``#:`` comments above a field in the class's source (pydantic keeps no description for them)."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    found, pending = {}, []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        match = re.match(r"(\w+)\s*:", stripped)
        if match and pending:
            found[match.group(1)] = " ".join(pending)
        pending = [] if not stripped.startswith("#:") else pending
    return found


def _default(value: Any) -> str:
    if value is dataclasses.MISSING or repr(value) == "PydanticUndefined":
        return "required"
    if isinstance(value, enum.Enum):
        value = value.value
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    if isinstance(value, float):
        return code(f"{value:.6g}")
    try:
        return code(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return code(repr(value))


def fields(cls: type) -> list[dict[str, str]]:
    """Each field of a pydantic model or dataclass: name, type, default, constraints, description."""
    notes = _comments(cls)
    rows = []
    if _is_pydantic(cls):
        for name, info in cls.model_fields.items():
            if info.default_factory is not None:
                try:
                    default = _default(info.default_factory())
                except TypeError:
                    default = "computed"
            else:
                default = _default(info.default)
            rows.append({"name": info.alias or name, "type": type_name(info.annotation), "default": default,
                         "constraints": ", ".join(_constraints(info.metadata)),
                         "description": info.description or notes.get(name, "")})
    else:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            rows.append({"name": f.name, "type": type_name(hints.get(f.name, f.type)), "default": _default(default),
                         "constraints": "", "description": notes.get(f.name, "")})
    return rows


def model_section(cls: type, level: int = 3) -> str:
    rows = [[code(f["name"]), code(f["type"]), f["default"], cell(f["constraints"]),
             cell(f["description"])] for f in fields(cls)]
    doc = docstring_md(cls.__doc__) if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else ""
    return "\n".join([f"{'#' * level} `{cls.__name__}`\n", f"{doc}\n" if doc else "",
                      table(["key", "type", "default", "constraints", "description"], rows)])


def schemas_page(schemas: list[tuple[str, str, str]] | None = None) -> str:
    parts = ["# Configuration schemas\n", GENERATED_NOTE,
             "The files and options users write, as the code validates them. Every model refuses an unknown"
             " key (naming the known ones) and never reads a boolean as a number; a bad value stops before"
             " any work with an error naming the file and the key path.\n"]
    chosen = [(title, where, load(dotted)) for title, where, dotted in schemas or SCHEMAS]
    seen: set[type] = {cls for _, _, cls in chosen}  # a nested model with its own section is not repeated
    for title, where, cls in chosen:
        parts += [f"## {title}\n", f"{where}.\n", model_section(cls)]
        queue = [t for f in _field_annotations(cls) for t in _nested_types(f)]
        while queue:
            nested = queue.pop(0)
            if nested in seen:
                continue
            seen.add(nested)
            parts.append(model_section(nested, 4))
            queue += [t for f in _field_annotations(nested) for t in _nested_types(f)]
    return "\n".join(parts)


def _field_annotations(cls: type) -> list[Any]:
    if _is_pydantic(cls):
        return [info.annotation for info in cls.model_fields.values()]
    hints = typing.get_type_hints(cls)
    return [hints.get(f.name, f.type) for f in dataclasses.fields(cls)]


# ---------------------------------------------------------------------------------------------------
# The policies
# ---------------------------------------------------------------------------------------------------
def policy_entries(policies: Mapping[str, type] | None = None,
                   needs: Callable[[str, type], frozenset[str]] | None = None) -> dict[str, str]:
    """Policy name -> its reference entry."""
    policies = load(SOURCES["policies"]) if policies is None else policies
    needs = needs or load(SOURCES["needs"])
    entries = {}
    for name, cls in sorted(policies.items()):
        doc = inspect.cleandoc(vars(cls).get("__doc__") or "")  # its own, not a base class's
        first = doc.split("\n\n")[0] if doc else ""
        facts = [f"**Paper:** {md(getattr(cls, 'paper', '')) or '—'}",
                 f"**Needs:** {', '.join(code(n) for n in sorted(needs(name, cls))) or 'nothing beyond a trace'}"]
        uses = getattr(cls, "uses", ())
        if uses:
            fallback = getattr(cls, "falls_back_to", None)
            facts.append("**Uses:** " + " or ".join("+".join(code(c) for c in sorted(alt)) for alt in uses)
                         + (f"; without them it decides as {code(fallback)}" if fallback else ""))
        traits = [t for t, on in (("shares GPUs", getattr(cls, "shares_gpus", False)),
                                  ("lets a job the placement refuses wait (runs under the strict placements)",
                                   getattr(cls, "waits_when_refused", False))) if on]
        overhead = getattr(cls, "default_preemption_overhead_s", None)
        stall = getattr(cls, "default_allocation_stall_s", 0.0)
        traits.append(f"preemption overhead {overhead:g} s" if overhead is not None else "")
        if stall:
            traits.append(f"allocation stall {stall:g} s per start or change")
        facts.append("**Traits:** " + "; ".join(t for t in traits if t))
        simplified = getattr(cls, "simplified", "")
        facts.append(f"**Simplified:** {md(simplified)}" if simplified else "**Simplified:** — (as its paper)")
        params = fields(cls.Params)
        parts = [f"## `{name}`\n", f"{md(getattr(cls, 'summary', ''))}\n",
                 "\n".join(f"- {f}" for f in facts) + "\n"]
        if first and first.strip() != getattr(cls, "summary", "").strip():
            parts.append(docstring_md(first) + "\n")
        if params:
            parts.append(table(["parameter", "type", "default", "constraints", "description"],
                               [[code(p["name"]), code(p["type"]), p["default"],
                                 cell(p["constraints"]), cell(p["description"])] for p in params]))
        else:
            parts.append("No parameters.\n")
        entries[name] = "\n".join(parts)
    return entries


def policies_page(policies: Mapping[str, type] | None = None,
                  needs: Callable[[str, type], frozenset[str]] | None = None) -> str:
    policies = load(SOURCES["policies"]) if policies is None else policies
    entries = policy_entries(policies, needs)
    capabilities = load(SOURCES["capabilities"])
    summary = table(["policy", "what it does", "paper"],
                    [[f"[`{n}`](#{slug(n)})", cell(getattr(c, "summary", "")), cell(getattr(c, "paper", ""))]
                     for n, c in sorted(policies.items())])
    caps = table(["capability", "what gives it"], [[code(k), cell(v)] for k, v in capabilities.items()])
    return "\n".join(["# Policies\n", GENERATED_NOTE,
                      "Every registered policy (the registry, installed packages' `schedlab.policies` entry points"
                      " included), as `schedlab policies` lists it. Set a parameter with"
                      " `--set POLICY.PARAM=VALUE` or an experiment entry's `params:`. What the policies"
                      " do and how close each is to its authors' code: [Policies in practice](../explanation/policies.md).\n",
                      summary, "## What a policy needs\n",
                      "**Needs**: what it cannot run without (checked before any replay); **uses**: what makes its"
                      " own mechanism act (without it, it decides exactly as its fallback, with a warning).\n",
                      caps, *entries.values()])


# ---------------------------------------------------------------------------------------------------
# The public policy API
# ---------------------------------------------------------------------------------------------------
def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj)).replace("'", "")
    except (TypeError, ValueError):
        return "(...)"


def _members(cls: type) -> list[tuple[str, Any]]:
    own = []
    for name, value in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(value, (property, types.FunctionType, classmethod, staticmethod)):
            own.append((name, value))
    return own


def api_entries(module: Any = None) -> dict[str, str]:
    module = module or load(SOURCES["api"])
    entries = {}
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj):
            bases = ", ".join(b.__name__ for b in obj.__bases__ if b is not object)
            parts = [f"## `{name}`\n", f"`class {obj.__name__}{f'({bases})' if bases else ''}`\n",
                     docstring_md(obj.__doc__) + "\n"]
            rows = []
            for member, value in _members(obj):
                if isinstance(value, property):
                    kind, sig, doc = "property", "", value.__doc__
                else:
                    func = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
                    kind, sig, doc = "method", _signature(func), func.__doc__
                if member == "__init__" and not doc:
                    continue
                rows.append([code(member + sig) if kind == "method" else code(member), kind, cell(docstring_md(doc))])
            listed = {member for member, _ in _members(obj)}
            hints = {k: v for k, v in vars(obj).get("__annotations__", {}).items() if not k.startswith("_")}
            for attr, hint in hints.items():
                if attr not in listed:
                    rows.append([code(attr), "attribute", code(hint if isinstance(hint, str) else type_name(hint))])
            if rows:
                parts.append(table(["member", "kind", "what it is"], rows))
        elif callable(obj):
            parts = [f"## `{name}`\n", f"`{name}{_signature(obj)}`\n", docstring_md(obj.__doc__) + "\n"]
        else:
            shown = obj if not isinstance(obj, Mapping) else ", ".join(map(str, obj))
            parts = [f"## `{name}`\n", f"Value: {code(shown)}\n"]
        entries[name] = "\n".join(parts)
    return entries


def api_page(module: Any = None) -> str:
    module = module or load(SOURCES["api"])
    return "\n".join(["# Policy API\n", GENERATED_NOTE, f"`{module.__name__}`: everything a policy written"
                      " outside schedlab may import. The tutorial [Write your own policy](../tutorials/write-a-policy.md)"
                      " walks through an example.\n", docstring_md(module.__doc__) + "\n",
                      *api_entries(module).values()])


# ---------------------------------------------------------------------------------------------------
# Entry points: the MkDocs hook, and writing the pages to a folder (for a look without MkDocs)
# ---------------------------------------------------------------------------------------------------
def render() -> dict[str, str]:
    """Every generated page: path relative to the docs folder -> Markdown."""
    return {path: globals()[name]() for path, name in PAGES.items()}


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated pages to the site (they exist only in the build)."""
    from mkdocs.structure.files import File

    for path, content in render().items():
        files.append(File.generated(config, path, content=content))
    return files


if __name__ == "__main__":
    import sys

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "site-reference")
    for path, content in render().items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(content)
        print(out / path)
