"""``schedlab policies``: every registered policy, its paper, parameters and simplifications (installed
packages' ``schedlab.policies`` entry points included)."""

from __future__ import annotations

import argparse
import json
import shutil

from schedlab.sched.policies import POLICIES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("policies", help="list every registered policy",
                              description="List every registered policy, its paper and its parameters (installed packages'"
                              " `schedlab.policies` entry points included).")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(policy_listing(shutil.get_terminal_size().columns))
    return 0


def policy_listing(width: int) -> str:
    """Every policy: its name in a column as wide as the longest name, then its summary, paper,
    parameters and simplifications, each wrapped to ``width`` and indented under the first."""
    import textwrap

    from schedlab.sched.policies import PLUGIN_DISTS

    column = max(len(name) for name in POLICIES) + 2
    body = max(width - column, 30)
    lines = []
    for name, cls in sorted(POLICIES.items()):
        paper = getattr(cls, "paper", "")
        parts = [f"{getattr(cls, 'summary', '')}{f'  [{paper}]' if paper else ''}".strip()]
        if name in PLUGIN_DISTS:
            parts.append("installed from {}=={}".format(*PLUGIN_DISTS[name]))
        defaults = cls.Params().model_dump(mode="json")
        if defaults:
            parts.append("parameters: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in defaults.items()))
        if cls.simplified:
            parts.append(f"simplified: {cls.simplified}")
        for i, part in enumerate(parts):
            wrapped = textwrap.wrap(part, body, subsequent_indent="  " if i else "", break_on_hyphens=False) or [""]
            for j, text in enumerate(wrapped):
                lines.append((name if i == 0 and j == 0 else "").ljust(column) + text)
    return "\n".join(lines)
