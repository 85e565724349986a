"""User text inside the Markdown that MLflow's run and experiment notes and Prefect's markdown artifacts
render: labels, trace, cluster and experiment names, descriptions, parameter values, error messages.

Every such string goes through :func:`text` (or :func:`block` for a description's lines) where it is put
into Markdown, and is shown as the characters typed, never as markup: MLflow's sanitiser removes
``<script>`` and ``on*`` attributes but keeps ``<img src>``, ``<a href>`` and ``<iframe>``, so an
unescaped label could add images, links or frames to a note, or break its table. Escaping rather than
refusing: descriptions and parameter values are free text by nature, and a label such as
``tiresias (k=4)`` or a trace named after its file is fine everywhere else (result folders and artifact
names go through :func:`schedlab.settings.path_name`).

HTML's ``< > &`` become entities (no tag or attribute opens); the Markdown punctuation that opens
markup (emphasis ``* _ ~``, links and images ``[ ] !``, code ````` ``, headings ``#``, table cells ``|``,
escapes ``\\``) becomes numeric character references, which every Markdown renderer (CommonMark, GFM,
showdown in MLflow's UI) shows as the character itself; line breaks become spaces (a table row stays one
row, a heading one line). Schedlab's own text around them is Markdown as written.
"""

from __future__ import annotations

import re
from typing import Any

_SPECIAL = re.compile(r"[\\`*_~\[\]!#|<>&]")
_ENTITY = {"<": "&lt;", ">": "&gt;", "&": "&amp;", **{c: f"&#{ord(c)};" for c in "\\`*_~[]!#|"}}


def text(value: Any) -> str:
    """``value`` (``str()`` of it) as literal text on one line of Markdown."""
    return _SPECIAL.sub(lambda m: _ENTITY[m.group()], " ".join(str(value).splitlines()))


def block(value: Any) -> str:
    """``value`` as literal text keeping its lines (a description): each line as :func:`text`."""
    return "\n".join(text(line) for line in str(value).splitlines())


__all__ = ["block", "text"]
