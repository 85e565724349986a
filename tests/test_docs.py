"""The documentation lives in the repository: the generated reference covers every sub-command and
policy, the README stays a short front door, and no product file points at documents a user does
not have (the design notes, the implementation specs, the developers' shared folder) or names issue
numbers. The site itself is built by ``mkdocs build --strict`` in ``.ci/run``."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from schedlab.sched.api import NoParams, Policy

ROOT = Path(__file__).resolve().parents[1]
README_COMMANDS = [
    "```bash",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[gpu,dev]' && .venv/bin/schedlab experiment quickstart",
    ".venv/bin/python -m pytest -q",
    "```",
]
#: what a user does not have: the design notes and implementation specs, and the developers' shared
#: folder except its data (experiment files and defaults read the development data at ../shared/data)
FOREIGN_DOCS = re.compile(r"specs/|\bspec [a-z]+\.md|\bspecs? ?(?:§|A\d|M\d)|\[R\]|the spec's default|DESIGN\.md"
                          r"|\.\./shared(?!/data\b)|GPU-RUNBOOK")
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\s*\d+|\(#\d+\)|(?<![\w&#])#\d{1,3}(?:'s|\s+item|\s+§)", re.IGNORECASE)
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt", ".csv", ".json", ".cfg", ".ini", ""}


def _gen_ref():
    spec = importlib.util.spec_from_file_location("schedlab_docs_gen_ref", ROOT / "docs" / "gen_ref.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_ref = _gen_ref()


def missing_cli_entries(parser: argparse.ArgumentParser, page: str) -> list[str]:
    """Sub-commands of ``parser`` without a section of their own in ``page``."""
    return [full for full, _, _ in gen_ref.subcommands(parser) if f"\n## `{full}`\n" not in page]


def missing_policy_entries(policies: dict[str, type], page: str) -> list[str]:
    return [name for name in policies if f"\n## `{name}`\n" not in page]


# ---------------------------------------------------------------------------------------------------
# Generated reference
# ---------------------------------------------------------------------------------------------------
def test_every_subcommand_and_flag_has_an_entry():
    parser = gen_ref.load(gen_ref.SOURCES["parser"])()
    page = gen_ref.cli_page(parser)
    names = [full for full, _, _ in gen_ref.subcommands(parser)]
    assert {"schedlab replay", "schedlab experiment", "schedlab fit iteration-time"} <= set(names)
    assert missing_cli_entries(parser, page) == []
    for full, sub, _ in gen_ref.subcommands(parser):
        section = page.split(f"\n## `{full}`\n", 1)[1].split("\n## ", 1)[0]
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in section, f"{full}: {flag} has no row"


def test_a_missing_subcommand_entry_is_caught():
    """Planted: a parser with one more sub-command (and one nested), and a page that lacks one."""
    parser = gen_ref.load(gen_ref.SOURCES["parser"])()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    planted = commands.add_parser("planted-command", help="a sub-command added by the test")
    planted.add_argument("--planted-flag", help="a flag added by the test")
    nested = planted.add_subparsers(dest="sub").add_parser("deeper", help="nested")
    nested.add_argument("--deeper-flag", default=3)
    page = gen_ref.cli_page(parser)
    assert "## `schedlab planted-command`" in page and "`--planted-flag " in page
    assert "## `schedlab planted-command deeper`" in page and "`--deeper-flag" in page
    assert missing_cli_entries(parser, page) == []
    dropped = page.replace("\n## `schedlab planted-command deeper`\n", "\n")
    assert missing_cli_entries(parser, dropped) == ["schedlab planted-command deeper"]


def test_every_registered_policy_has_an_entry():
    policies = gen_ref.load(gen_ref.SOURCES["policies"])
    page = gen_ref.policies_page(policies)
    assert len(policies) >= 20
    assert missing_policy_entries(policies, page) == []
    for name, cls in policies.items():
        section = page.split(f"\n## `{name}`\n", 1)[1].split("\n## ", 1)[0]
        assert "**Paper:**" in section and "**Needs:**" in section and "**Simplified:**" in section
        for field in cls.Params.model_fields:
            assert f"`{field}`" in section, f"{name}: parameter {field} has no row"
        if cls.simplified:
            assert gen_ref.md(cls.simplified) in section


def test_a_missing_policy_entry_is_caught():
    """Planted: a policy the registry does not ship appears with its parameters and needs; a page that
    lacks a registered policy fails the check."""
    from pydantic import BaseModel, Field

    class PlantedParams(BaseModel):
        knob: int = Field(default=7, ge=1, description="a planted knob")

    class Planted(Policy):
        name = "planted-policy"
        summary = "planted by the test"
        paper = "none"
        simplified = "entirely"
        Params = PlantedParams
        needs = frozenset({"workloads"})

    policies = {**gen_ref.load(gen_ref.SOURCES["policies"]), "planted-policy": Planted}
    page = gen_ref.policies_page(policies, needs=lambda name, cls: cls.needs)
    section = page.split("\n## `planted-policy`\n", 1)[1]
    assert "`knob`" in section and "`7`" in section and "≥ 1" in section and "a planted knob" in section
    assert "`workloads`" in section and "**Simplified:** entirely" in section
    assert missing_policy_entries(policies, page) == []
    dropped = page.replace("\n## `planted-policy`\n", "\n")
    assert missing_policy_entries(policies, dropped) == ["planted-policy"]


def test_schemas_and_api_pages_cover_their_sources():
    schemas = gen_ref.schemas_page()
    for _, _, dotted in gen_ref.SCHEMAS:
        cls = gen_ref.load(dotted)
        assert f"`{cls.__name__}`" in schemas
        for field in gen_ref.fields(cls):
            assert f"`{field['name']}`" in schemas
    api = gen_ref.load(gen_ref.SOURCES["api"])
    page = gen_ref.api_page(api)
    assert [name for name in api.__all__ if f"\n## `{name}`\n" not in page] == []
    assert "`start(" in page and "`on_arrival(" in page  # members of PolicyEngine and Policy
    assert NoParams.__name__ in page


def test_generated_pages_are_in_the_site_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for path in gen_ref.PAGES:
        assert f": {path}" in nav, f"{path} is not in mkdocs.yml's nav"
    assert "docs/gen_ref.py" in nav  # the hook


@pytest.mark.slow
def test_the_site_builds_strictly_with_the_generated_pages(tmp_path):
    """``mkdocs build --strict`` (what ``.ci/run`` runs): every link and anchor resolves, and the hook's
    pages are in the site."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stdout + built.stderr
    for path in gen_ref.PAGES:
        html = (tmp_path / "site" / path.removesuffix(".md") / "index.html").read_text()
        assert "Generated" in html
    assert "schedlab replay" in (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()


# ---------------------------------------------------------------------------------------------------
# README and product text
# ---------------------------------------------------------------------------------------------------
def test_readme_is_a_short_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines (at most 200)"
    assert lines[:4] == README_COMMANDS


def product_files() -> list[Path]:
    """Everything tracked but tests/ and docs/ (the site may name the shared data folder)."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    paths = [ROOT / p for p in listed.stdout.splitlines()]
    return [p for p in paths if p.is_file() and not p.relative_to(ROOT).parts[0] in ("tests", "docs")
            and p.suffix in TEXT_SUFFIXES and p.stat().st_size < 2_000_000]


def offending_lines(paths: list[Path], pattern: re.Pattern[str]) -> list[str]:
    found = []
    for path in paths:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    return found


def test_no_product_file_points_at_documents_users_do_not_have():
    """Code, comments, docstrings, configuration and the README name docs pages or paper sections,
    never the design notes, the implementation specs or the shared folder's documents."""
    offending = offending_lines(product_files(), FOREIGN_DOCS)
    offending += [f"generated page: {line}" for text in gen_ref.render().values() for line in text.splitlines()
                  if FOREIGN_DOCS.search(line)]
    assert offending == [], "\n".join(offending)


def test_docs_pages_named_in_product_files_exist():
    """Code and configuration point at docs pages by path; each must be there (or be generated)."""
    named = re.compile(r"docs/((?:[\w-]+/)*[\w-]+\.md)")
    missing = [f"{line} -> docs/{match}" for line in offending_lines(product_files(), named)
               for match in named.findall(line.split(": ", 1)[1])
               if not (ROOT / "docs" / match).is_file() and match not in gen_ref.PAGES]
    assert missing == [], "\n".join(missing)


def test_no_issue_numbers_in_user_facing_text():
    """Docstrings, comments, messages, configuration, the README and the site name no issue numbers."""
    pages = [p for p in (ROOT / "docs").rglob("*.md")]
    generated = [*gen_ref.render().values()]
    offending = offending_lines(product_files() + pages, ISSUE_NUMBER)
    offending += [f"generated page: {line}" for text in generated for line in text.splitlines()
                  if ISSUE_NUMBER.search(line)]
    assert offending == [], "\n".join(offending)


def test_the_patterns_catch_what_they_must():
    for text in ("see specs/gimbal.md §5", "DESIGN.md, layers", "../shared/papers/lyra.txt",
                 "(../shared/GPU-RUNBOOK.md)", "spec gimbal.md M6", "(spec A13)", "specs §1.2", "[R] A2"):
        assert FOREIGN_DOCS.search(text), text
    assert not FOREIGN_DOCS.search("source: ../shared/data/traces/philly/philly_jobs_pollux.csv")
    for text in ("(issue #28)", "Issue 24", "issues #23/#25", "before #26's fix", "(#26)", "#13 item 2"):
        assert ISSUE_NUMBER.search(text), text
    for text in ("color:#222", 'stroke="#333"', "tissue 3", "row #1 of the table"):
        assert not ISSUE_NUMBER.search(text), text
