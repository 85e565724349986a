"""User text in the Markdown of MLflow's notes and Prefect's artifacts is text, never markup
(``sched/reporting/markdown.py``): what MLflow's sanitiser lets through (images, links, frames) and what
breaks a table (pipes, line breaks) cannot come from a label, a name, a description or a parameter."""

from __future__ import annotations

import html
import re

import pytest

from schedlab.sched.reporting import compare, markdown, mlflow_view
from schedlab.sched.reporting.nightly import nightly_markdown
from schedlab.sched.reporting.reproduce import document

HOSTILE = ["**<script>alert(3)</script>**", '"><img src=x onerror=alert(2)>', '<iframe src="https://e.x/"></iframe>',
           '<a href="https://e.x/">x</a>', "[click](javascript:alert(1))", "![i](https://e.x/p.png)", "a | b | c",
           "line one\nline two", "`code` and \\*not\\*", "# heading", "~~gone~~ _it_"]
#: what would open markup if it reached Markdown as it was typed
OPENS = re.compile(r"<[a-z!/]|\]\(|[*_~`|#\[\]!\\]|\n")


@pytest.mark.parametrize("value", HOSTILE)
def test_text_opens_no_markup_and_reads_as_typed(value: str) -> None:
    shown = markdown.text(value)
    assert not OPENS.search(re.sub(r"&(#\d+|lt|gt|amp);", "", shown)), shown  # outside its character references
    assert html.unescape(shown) == " ".join(value.splitlines())  # a renderer shows the characters typed


def test_block_keeps_the_lines_of_a_description() -> None:
    assert markdown.block("first <b>\nsecond |") == "first &lt;b&gt;\nsecond &#124;"


def test_a_hostile_label_and_trace_stay_text_in_the_comparison_and_the_policy_runs_note() -> None:
    label, trace = HOSTILE[0], HOSTILE[1]
    rows = [{"trace": trace, "cluster": "c", "policy": p, "seed": 0, "avg_jct_s": j, "p95_jct_s": j, "avg_wait_s": 1.0,
             "avg_queue_s": 1.0, "makespan_s": 10.0, "gpu_util": 0.5, "preemptions": 0}
            for p, j in (("fifo", 100.0), (label, 50.0))]
    table = compare.comparison(rows, "fifo")
    text = compare.to_markdown(table)
    assert "<script" not in text and "<img" not in text and "&lt;script&gt;" in text
    assert all(line.count("|") == text.splitlines()[0].count("|") for line in text.splitlines())  # cells intact
    for row in table.to_dict("records"):
        _, note, _, _ = mlflow_view.policy_run(row, "fifo", False)
        assert "<script" not in note and "<img" not in note and "**" + markdown.text(row["policy"]) + "**" in note


def test_the_reproduce_and_nightly_markdown_show_names_and_errors_as_text() -> None:
    from datetime import datetime

    text = document(["## ok\n"], {HOSTILE[3]: HOSTILE[2]}, datetime(2026, 1, 1))
    assert "<a href" not in text and "<iframe" not in text
    report = {"sweep": HOSTILE[0], "cpu_fallback_used": False, "profiles": [{"host": HOSTILE[1], "error": HOSTILE[4]}],
              "fits": {}, "failures": {"fit x": HOSTILE[5]}}
    text = nightly_markdown(report, datetime(2026, 1, 1))
    assert "<script" not in text and "<img" not in text and "](" not in text
