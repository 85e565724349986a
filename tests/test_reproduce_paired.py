"""The reproduction reports' paired statistics, figures, causes and seed counts (``schedlab reproduce``
``--report``, ``reproduce.md``): built from synthetic job tables, checked against scipy computed here."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from schedlab.sched.reporting.paper_tables import TABLES, paper_tables

SEEDS = range(5)
#: average JCT (hours) per label and seed: sjf below fifo on every seed, tiresias equal to fifo
JCT = {"fifo": [2.0, 3.0, 2.5, 4.0, 3.5], "sjf": [1.0, 1.8, 1.4, 2.9, 2.2], "tiresias": [2.0, 3.0, 2.5, 4.0, 3.5]}


def _jobs(jct_h: float) -> pd.DataFrame:
    """Two jobs (1 and 16 GPUs) with average JCT ``jct_h`` hours and no queueing."""
    return pd.DataFrame({"num_gpus": [1, 16], "jct_s": [jct_h * 3600] * 2, "wait_s": [0.0, 0.0],
                         "queue_s": [0.0, 0.0], "submit_time": [0.0, 0.0], "end_time": [jct_h * 3600] * 2})


def _result(name: str, method: str = "t", loads=(1.0,)):
    from schedlab.sched.reporting.paper_report import ConfigResult, Replay

    replays = [Replay(label, seed, load, "syn", "4x8", f"{i:016x}{seed:08x}{int(load * 10):08x}", _jobs(h[seed] * load))
               for i, (label, h) in enumerate(JCT.items()) for seed in SEEDS for load in loads]
    return ConfigResult(name, "test", list(SEEDS), "7", None, replays, list(JCT), "fifo", method)


def _write(tmp_path, *results):
    from schedlab.sched.reporting.paper_report import write_report

    return write_report(tmp_path, list(results), parent_run_id="r" * 32, experiment_id="9",
                        tracking_uri="sqlite:///x.db", code_version="v", stamp=datetime.now(UTC))


def _row(page: str, row: str, column: str) -> list[str]:
    line = re.search(rf"<tr[^>]*data-row='{re.escape(row)}' data-column='{re.escape(column)}'>(.*?)</tr>", page)
    assert line, (row, column)
    return [re.sub(r"<[^>]+>", "", html.unescape(td)).strip() for td in re.findall(r"<td[^>]*>(.*?)</td>", line.group(1))]


def test_cells_carry_the_paired_comparison_with_the_baseline(tmp_path):
    """sjf − fifo on average JCT: the mean paired difference and scipy's Student t interval, 5 wins of 5,
    "better"; tiresias (equal to fifo on every seed): "not separated"; the ratios to fifo beside the paper's."""
    page = next(p for p in _write(tmp_path, _result("castor-pollux")) if p.name == "castor-table5.html").read_text()
    diffs = np.array(JCT["sjf"]) - np.array(JCT["fifo"])
    low, high = stats.ttest_rel(JCT["sjf"], JCT["fifo"]).confidence_interval(0.95)
    cells = _row(page, "sjf", "avg_jct_all")
    assert cells[8] == f"−{abs(diffs.mean()):.2f} [−{abs(low):.2f}, −{abs(high):.2f}] h, wins 5/5, better"
    paper = paper_tables()["castor-table5"]["rows"]
    assert cells[7] == f"{paper['sjf'][0] / paper['fifo'][0]:.2f} / {np.mean(JCT['sjf']) / np.mean(JCT['fifo']):.2f}"
    assert _row(page, "tiresias", "avg_jct_all")[8] == "0.00 [0.00, 0.00] h, wins 0/5, not separated at 95 %"
    assert _row(page, "fifo", "avg_jct_all")[7] == "1.00 / 1.00" and _row(page, "fifo", "avg_jct_all")[8] == "—"
    # the order: sjf separated from the tiresias/fifo tie, which is not separated
    assert re.search(r"ours sjf &lt; (tiresias ≈ fifo|fifo ≈ tiresias) \(paired over 5 seeds, Student t", page)


def test_the_bootstrap_interval_when_the_config_asks_for_it(tmp_path):
    page = next(p for p in _write(tmp_path, _result("castor-pollux", "bootstrap"))
                if p.name == "castor-table5.html").read_text()
    assert "paired over 5 seeds, percentile bootstrap, 2,000 resamples" in page
    assert _row(page, "sjf", "avg_jct_all")[8].endswith("wins 5/5, better")


def test_every_set_up_gets_a_figure(tmp_path):
    """A single-load set-up gets the bar chart over the baseline (paired whisker, the paper's ratio
    beside) on its table's page and on a page of its own without a paper table; two loads, the sweep too."""
    pages = {p.name: p.read_text() for p in _write(tmp_path, _result("castor-pollux"), _result("quickstart-like"),
                                                  _result("sjf-bsbf-pollux", loads=(1.0, 2.0)))}
    table = pages["castor-table5.html"]
    assert "alt='baseline bars'" in table and "grey: the paper's ratio" in table
    bars = re.search(r"<th>policy</th><th>paper ÷ fifo</th>.*?</table>", table).group(0)
    sjf = re.search(r"<tr><td>sjf</td>(.*?)</tr>", bars).group(1)
    assert f"{np.mean(JCT['sjf']) / np.mean(JCT['fifo']):.2f} [" in sjf and "wins 5/5, better" in sjf
    own = pages["quickstart-like-load-sweep.html"]
    assert "alt='baseline bars'" in own and "the paper prints no such ratio" in own
    swept = pages["sjf-bsbf-table3.html"]
    assert "alt='load sweep'" in swept and "alt='baseline bars'" in swept and "(5 seeds)" in swept
    index = pages["index.html"]
    assert "average JCT over the baseline, paired" in index


def test_a_set_up_without_its_baseline_still_gets_a_figure(tmp_path):
    from schedlab.sched.reporting.paper_report import ConfigResult

    full = _result("quickstart-like")
    alone = ConfigResult(full.name, "test", full.seeds, "7", None, [r for r in full.replays if r.label != "fifo"],
                         full.labels, "fifo")
    page = next(p for p in _write(tmp_path, alone) if p.name.endswith("-load-sweep.html")).read_text()
    assert "alt='average bars'" in page and "alt='baseline bars'" not in page
    assert "fifo has no replay here, so nothing is paired with it" in page


def test_each_cause_is_printed_once_and_referenced(tmp_path):
    """Castor Table 5 anchors one cause (service time) to the avg_jct_all of sjf, lucid and castor: one
    paragraph, three references; the last recorded values carry their seeds."""
    page = next(p for p in _write(tmp_path, _result("castor-pollux")) if p.name == "castor-table5.html").read_text()
    text = html.escape(paper_tables()["castor-table5"]["causes"]["sjf/avg_jct_all"])
    assert page.count(text) == 1
    number = re.search(rf"<li id='cause-(\d+)'>{re.escape(text)}</li>", page).group(1)
    refs = [_row(page, row, "avg_jct_all")[9] for row in ("sjf", "lucid", "castor")]
    assert all(f"[{number}]" in r for r in refs), refs
    measured = paper_tables()["castor-table5"]["measured"]["castor-pollux"]
    assert _row(page, "sjf", "avg_jct_all")[10] == f"{measured['rows']['sjf'][0]:.2f} ({measured['seeds']} seeds)"


def _tables_with(tmp_path, table: str, **fields):
    tables = yaml.safe_load(TABLES.read_text())
    tables[table].update(fields)
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump(tables))
    return path


@pytest.mark.parametrize(("table", "fields", "message"), [
    ("gimbal-philly", {"measured_seeds": 0}, r"gimbal-philly: measured_seeds: expected the number of seeds"),
    ("lyra-table5", {"measured_seeds": None}, r"lyra-table5: measured_seeds: expected"),
    ("castor-table5", {"measured_seeds": 3}, r"castor-table5: measured_seeds: only for a flat `measured:` block"),
])
def test_measured_seeds_are_checked(tmp_path, table, fields, message):
    with pytest.raises(ValueError, match=message):
        paper_tables(_tables_with(tmp_path, table, **fields))


def test_reproduce_markdown_orders_and_pairs_with_seeds():
    """``reproduce.md``: the table's rows with their seeds, the paired table (vs the baseline and the
    policy above, scipy's interval) and the Order line."""
    from schedlab.sched.reporting import reproduce

    config = SimpleNamespace(name="castor-pollux", description="test", seeds=list(SEEDS), baseline_label="fifo",
                             paired_interval="t", models=SimpleNamespace(interference="analytic"))
    specs = [SimpleNamespace(key=f"{label}-{seed}", label=label, seed=seed, load=1.0, trace="syn", cluster="4x8")
             for label in JCT for seed in SEEDS]
    jobs = {s.key: _jobs(JCT[s.label][s.seed]) for s in specs}
    tables = reproduce.tables_for(config, specs, jobs)
    assert list(tables["castor-table5"].loc[["fifo", "sjf", "tiresias"], "seeds"]) == [5, 5, 5]
    assert tables["castor-table5"].loc["castor", "seeds"] == 0  # the paper's row only
    pairs = tables["castor-table5__paired"]
    sjf = pairs[(pairs["policy"] == "sjf") & (pairs["vs"] == "fifo")].iloc[0]
    low, high = stats.ttest_rel(JCT["sjf"], JCT["fifo"]).confidence_interval(0.95)
    assert sjf["ci95_low"] == pytest.approx(low, abs=1e-12) and sjf["ci95_high"] == pytest.approx(high, abs=1e-12)
    assert sjf["wins"] == 5 and sjf["seeds"] == 5 and sjf["verdict"] == "better" and sjf["rank"] == 1
    assert tables["castor-pollux__jct_by_load"].loc["sjf", "seeds"] == "5"
    text = reproduce.section(config, tables, None)
    assert re.search(r"\*\*Order\*\* on avg_jct_all, lowest first: sjf < (tiresias ≈ fifo|fifo ≈ tiresias) \(paired"
                     r" over 5 seeds, Student t", text)
