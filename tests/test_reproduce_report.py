"""The reproduce flow on a tiny config (2 policies, 2 seeds, a small synthetic trace at two loads) named
like the SJF-BSBF reproduction, so that its paper-vs-ours table is built, run once for the module: its
tables, its MLflow and Prefect records, and its report (``schedlab reproduce --report DIR``), whose
numbers are the MLflow replays' (recomputed here from each listed run's ``jobs.parquet``) and which is
logged to the parent run. The report fields of ``conf/papers/tables.yaml`` are checked with errors
naming the table and key."""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from schedlab.sched.reporting.paper_tables import TABLES, RowOrder, paper_tables

from helpers import REPRODUCE_TINY as TINY, reproduce_env, set_reproduce_env  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("reproduce_env")]


def _cell(page: str, row: str, column: str) -> list[str]:
    """The text of each <td> of the line for (row, column)."""
    line = re.search(rf"<tr[^>]*data-row='{re.escape(row)}' data-column='{re.escape(column)}'>(.*?)</tr>", page)
    assert line, (row, column)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", line.group(1))
    return [re.sub(r"<[^>]+>", "", html.unescape(td)).strip() for td in cells]


def _close(shown: str, value: float) -> bool:
    """``shown`` (as the page prints it) is ``value`` to the digits printed."""
    digits = len(shown.split(".")[1]) if "." in shown else 0
    return abs(float(shown.replace(",", "")) - value) <= 0.51 * 10 ** -digits


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory, prefect_harness, seed_home) -> tuple[Path, dict]:
    """``schedlab reproduce TINY --seeds 0 1 --report DIR`` as the flow runs it: (its home, its report)."""
    from schedlab.flows.reproduce import run_reproduce

    home = seed_home(tmp_path_factory.mktemp("reproduce"), prefect=False)
    with pytest.MonkeyPatch.context() as env:  # reproduce_env is a test's, this fixture the module's
        set_reproduce_env(env)
        report = run_reproduce([str(TINY)], workers=1, home=home, seeds=[0, 1], report_dir=home / "report")
    return home, report


@pytest.mark.slow
def test_reproduce_tiny_config(reproduced):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from schedlab.sched.reporting import paired
    from schedlab.tasks import tracking

    home, report = reproduced
    assert report["failures"] == {}
    table = report["tables"]["sjf-bsbf-table3"]
    assert {"fifo", "sjf", "sjf-bsbf", "pollux"} <= set(table.index)
    assert table.loc["fifo", "avg_jct_all paper"] == 2.34 and table.loc["fifo", "avg_jct_all ours"] > 0
    assert math.isnan(table.loc["pollux", "avg_jct_all ours"])  # published only
    by_load = report["tables"]["sjf-bsbf-philly__jct_by_load"]
    assert list(by_load.columns) == ["load 1", "load 2", "seeds"] and list(by_load.index) == ["fifo", "sjf"]
    assert list(by_load["seeds"]) == ["2", "2"] and list(table.loc[["fifo", "sjf", "pollux"], "seeds"]) == [2, 2, 0]
    assert "sjf-bsbf-table3" in report["markdown"] and "avg_jct_all ours" in report["markdown"]
    pairs = report["tables"]["sjf-bsbf-table3__paired"]  # two seeds: paired, and the Order says so
    assert set(pairs["verdict"].dropna()) <= {paired.BETTER, paired.WORSE, paired.NOT_SEPARATED}
    assert set(pairs["seeds"].dropna()) == {2} and "paired over 2 seeds, Student t" in report["markdown"]

    c = tracking.client(f"sqlite:///{home / 'mlflow.db'}")
    parent = c.get_run(report["parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.info.run_name.startswith("reproduce-")
    exp_run = report["experiments"]["sjf-bsbf-philly"]["parent_run_id"]
    assert parent.data.tags["schedlab.experiment_run_id.sjf-bsbf-philly"] == exp_run
    art = Path(parent.info.artifact_uri.removeprefix("file://"))
    assert "sjf-bsbf-table3" in (art / "reproduce.md").read_text()
    csv = pd.read_csv(art / "tables" / "sjf-bsbf-table3.csv", index_col="policy")
    assert csv.loc["fifo", "avg_jct_all ours"] == pytest.approx(table.loc["fifo", "avg_jct_all ours"])
    with get_client(sync_client=True) as prefect:
        artifacts = prefect.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["reproduce"])))
    assert artifacts and "sjf-bsbf-table3" in artifacts[0].data


def test_one_seed_separates_nothing_and_the_order_says_so():
    from schedlab.sched.reporting import paired
    from schedlab.sched.reporting.reproduce import order_line

    def frame(verdict: str, seeds: int) -> pd.DataFrame:
        rows = [("t", "c", "sjf", "", *[math.nan] * 5, None, 1), ("t", "c", "fifo", "sjf", 0.5, 0.1, 0.9, seeds, seeds,
                                                                   verdict, 2)]
        return pd.DataFrame(rows, columns=[*paired.COLUMNS, "rank"])

    assert order_line(frame(paired.ONE_SEED, 1), "avg_jct_all", "t") == (
        "**Order** on avg_jct_all, lowest first: sjf ≈ fifo (one seed: nothing can be separated).")
    assert order_line(frame(paired.BETTER, 3), "avg_jct_all", "t") == (
        "**Order** on avg_jct_all, lowest first: sjf < fifo (paired over 3 seeds, Student t: < separated at 95 %,"
        " ≈ not).")


@pytest.mark.slow
def test_report_numbers_come_from_the_mlflow_runs(tmp_path, reproduced):
    from schedlab.tasks import tracking

    home, report = reproduced
    out = home / "report"
    assert report["failures"] == {} and report["report"] == str(out / "index.html")
    index = (out / "index.html").read_text()
    page = (out / "sjf-bsbf-table3.html").read_text()
    parent = report["parent_run_id"]
    assert parent in index and parent in page and "sjf-bsbf-table3.html" in index

    # the replay runs the page names are this invocation's: 2 policies x 2 loads x 2 seeds
    uri = f"sqlite:///{home / 'mlflow.db'}"
    c = tracking.client(uri)
    run_ids = re.findall(r"<code>([0-9a-f]{32})</code></a>", page)
    assert len(run_ids) == 8
    exp_run = report["experiments"]["sjf-bsbf-philly"]["parent_run_id"]
    assert exp_run in page
    per_seed: dict[tuple[str, float], list[tuple[int, pd.DataFrame]]] = {}
    for run_id in run_ids:
        run = c.get_run(run_id)
        assert run.info.status == "FINISHED" and run.data.tags["schedlab.kind"] == "replay"
        params = run.data.params
        jobs = pd.read_parquet(tracking.download(uri, run_id, "jobs.parquet", tmp_path / "dl" / run_id))
        per_seed.setdefault((params["label"], float(params["trace.option.load"])), []).append(
            (int(params["seed"]), jobs))
    assert {seed for runs in per_seed.values() for seed, _ in runs} == {0, 1}

    spec = paper_tables()["sjf-bsbf-table3"]
    large = spec["large_job_gpus"]
    for label in ("fifo", "sjf"):
        runs = sorted(per_seed[(label, 1.0)], key=lambda s: s[0])
        checks = {"avg_jct_all": [j["jct_s"].mean() / 3600 for _, j in runs],
                  "avg_queue_large": [j.loc[j["num_gpus"] > large, "wait_s"].mean() / 3600 for _, j in runs],
                  "avg_queue_small": [j.loc[j["num_gpus"] <= large, "wait_s"].mean() / 3600 for _, j in runs]}
        for column, values in checks.items():
            cells = _cell(page, label, column)
            paper = spec["rows"][label][spec["columns"].index(column)]
            assert _close(cells[2], paper), (label, column, cells)
            mean, std = float(np.mean(values)), float(np.std(values, ddof=1))
            shown_mean, shown_std = cells[3].split(" ± ")
            assert _close(shown_mean, mean) and _close(shown_std, std), (label, column, cells, values)
            assert cells[4] == "2"  # seeds
            ratio = mean / paper
            assert _close(cells[5], ratio), (label, column, cells)
            assert cells[6] == ("✓ within" if abs(ratio - 1) <= 0.30 else "✗ miss"), (label, column, cells)
    assert _cell(page, "pollux", "avg_jct_all")[3] == "not replayed"  # the paper's row only
    # the order line: the paper's rows that were replayed, by the paper's value and by ours
    means = {label: float(np.mean([j["jct_s"].mean() / 3600 for _, j in per_seed[(label, 1.0)]]))
             for label in ("fifo", "sjf")}
    low, high = sorted(means, key=means.get)
    kept = 2 if means["sjf"] < means["fifo"] else 1
    assert re.search(f"paper sjf &lt; fifo; ours {low} (&lt;|≈) {high} \\(paired over 2 seeds, Student t", page)
    assert f"<b>{kept} of 2</b> rows" in page
    # the load sweep: a plot, the note that SJF-BSBF Fig. 6a prints no numbers, ours by load
    assert "data:image/png;base64," in page and "the paper prints no numbers" in page
    fifo_2 = [j["jct_s"].mean() / 3600 for _, j in per_seed[("fifo", 2.0)]]
    sweep = re.search(r"<tr><td>fifo</td>(.*?)</tr>", page.split("average JCT (h), mean ± std")[1]).group(1)
    shown = re.sub(r"<[^>]+>", " ", sweep).split()  # fifo, then per load: mean ± std (2 seeds)
    assert _close(shown[5], float(np.mean(fifo_2))) and _close(shown[7], float(np.std(fifo_2, ddof=1)))
    assert shown[8:10] == ["(2", "seeds)"]

    # logged on the parent reproduce run
    art = Path(c.get_run(parent).info.artifact_uri.removeprefix("file://"))
    assert (art / "report" / "index.html").read_text() == index
    assert (art / "report" / "sjf-bsbf-table3.html").read_text() == page


def _tables_with(tmp_path: Path, table: str, **fields) -> Path:
    tables = yaml.safe_load(TABLES.read_text())
    tables[table].update(fields)
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump(tables))
    return path


@pytest.mark.parametrize(("fields", "message"), [
    ({"causes": {"fifo/avg_jct_al": "x"}}, r"tables.yaml: sjf-bsbf-table3: causes: 'fifo/avg_jct_al': 'avg_jct_al' is"
                                           " not a column"),
    ({"causes": {"fifoo": "x"}}, r"sjf-bsbf-table3: causes: 'fifoo': 'fifoo' is not a row"),
    ({"causes": {"fifo": ""}}, r"sjf-bsbf-table3: causes: 'fifo': expected the cause as text"),
    ({"causes": ["fifo"]}, r"sjf-bsbf-table3: causes: expected a mapping"),
    ({"calibration": [{"name": "servers", "value": 16, "fitted_to": "row 1"}]},
     r"sjf-bsbf-table3: calibration\[0\].fitted_to: 'row 1' is not a row"),
    ({"calibration": [{"name": "servers", "value": 16}]}, r"calibration\[0\]: needs name, value and fitted_to"),
    ({"calibration": [{"name": "arrival_scale", "value": 5.2, "fitted_to": "fifo", "experiment": "sjf-bsbf-pollx"}]},
     r"sjf-bsbf-table3: calibration\[0\].experiment: 'sjf-bsbf-pollx' is not one of the table's experiments"),
    ({"load_sweep": {"figure": "Fig. 6a", "points": {"fifo": {1.0: "high"}}}}, r"load_sweep.points: 'fifo'"),
])
def test_bad_report_fields_name_the_table_and_key(tmp_path, fields, message):
    with pytest.raises(ValueError, match=message):
        paper_tables(_tables_with(tmp_path, "sjf-bsbf-table3", **fields))


def test_ratio_tables_take_causes_by_row_only(tmp_path):
    with pytest.raises(ValueError, match=r"gimbal-philly: causes: 'jct_vs_lucid/ratio': 'ratio' is not a column of"
                                         r" the table \(it has none: give the row alone\)"):
        paper_tables(_tables_with(tmp_path, "gimbal-philly", causes={"jct_vs_lucid/ratio": "x"}))


def test_shipped_report_fields():
    """The shipped causes and calibrations are where the comments of tables.yaml put them."""
    tables = paper_tables()
    assert {f"fifo/avg_queue_{c}" for c in ("all", "large", "small")} <= set(tables["sjf-bsbf-table4"]["causes"])
    assert "makespan_alg1_vs_gavel" in tables["gimbal-philly"]["causes"]
    for table, experiment in (("castor-table5", "castor-pollux-calibrated"),
                              ("sjf-bsbf-table3", "sjf-bsbf-pollux-calibrated"),
                              ("sjf-bsbf-table4", "sjf-bsbf-pollux-480-calibrated")):
        # two disclosed calibrations per calibrated config: arrivals on FIFO, Tiresias' blocking on Table III
        entries = {c["name"]: c for c in tables[table]["calibration"] if c.get("experiment") == experiment}
        assert set(entries) == {"arrival_scale", "tiresias blocking"}
        assert entries["arrival_scale"]["fitted_to"] == "fifo" and entries["tiresias blocking"]["fitted_to"] == "tiresias"
        note = entries["tiresias blocking"]["note"]
        assert entries["tiresias blocking"]["value"] is True
        assert "chosen on this row" in note if table == "sjf-bsbf-table3" else "Table III's choice" in note
    assert tables["lyra-table5"]["calibration"][0]["fitted_to"] == "fifo"
    assert tables["castor-table5"]["load_sweep"]["points"] is None  # Fig. 16 is a figure only


def test_report_option_is_checked_before_any_work(tmp_path, capsys):
    from schedlab.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("")
    for target, why in ((blocker, "exists and is not a folder"), (blocker / "sub", "cannot be created")):
        with pytest.raises(SystemExit) as stop:
            main(["reproduce", str(TINY), "--report", str(target)])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "--report" in err and why in err and "Traceback" not in err


@pytest.mark.slow
def test_ratio_pages_use_seed_means_and_per_seed_std(tmp_path):
    """A `kind: ratios` page (Gimbal §7.2): ours = baseline / policy of the seed means, as reproduce.md
    prints it, ± the std of the per-seed ratios; the bars plot; a cause shown on its row; the
    calibration table of a table that has one (Lyra Table 5)."""
    from datetime import UTC, datetime

    from schedlab.sched.reporting.paper_report import ConfigResult, Replay, write_report

    def jobs(jct_h: float) -> pd.DataFrame:
        return pd.DataFrame({"num_gpus": [1, 2], "jct_s": [jct_h * 3600] * 2, "wait_s": [0.0, 0.0],
                             "submit_time": [0.0, 0.0], "end_time": [jct_h * 3600] * 2})

    jct = {("lucid", 0): 2.0, ("lucid", 1): 4.0, ("gimbal-jct", 0): 1.0, ("gimbal-jct", 1): 4.0}
    replays = [Replay(label, seed, 1.0, "philly", "8x2", f"{i:032x}", jobs(h)) for i, ((label, seed), h)
               in enumerate(jct.items())]
    gimbal = ConfigResult("gimbal-jct", "test", [0, 1], "7", "p" * 32, replays, ["lucid", "gimbal-jct"])
    lyra = ConfigResult("lyra-table5", "test", [0], "8", None,
                        [Replay("fifo", 0, 1.0, "philly", "lyra-sim", "f" * 32, jobs(1.0).assign(queue_s=0.0))],
                        ["fifo"])
    pages = write_report(tmp_path, [gimbal, lyra], parent_run_id="r" * 32, experiment_id="9",
                         tracking_uri="sqlite:///x.db", code_version="v", stamp=datetime.now(UTC))
    assert [p.name for p in pages] == ["index.html", "gimbal-philly.html", "lyra-table5.html"]
    page = pages[1].read_text()
    cells = _cell(page, "jct_vs_lucid", "ratio")
    assert cells[3] == f"{3.0 / 2.5:.2f} ± {np.std([2.0, 1.0], ddof=1):.2f}"  # 1.20 ± 0.71, not mean(2, 1)
    assert cells[2] == "1.28" and cells[6] == "✓ within" and cells[7] == "+28 % / +20 %"  # the gains
    ref = _cell(page, "makespan_alg1_vs_gavel", "ratio")[9]  # the cause, by its number, printed once below
    number = re.search(r"\[(\d+)\]", ref).group(1)
    cause = re.search(rf"<li id='cause-{number}'>(.*?)</li>", page).group(1)
    assert "Algorithm 1 keeping F = max R_j" in cause and page.count("Algorithm 1 keeping F = max R_j") == 1
    # the paired comparison of the row: gimbal-jct − lucid on avg JCT, per seed (1 − 2, 4 − 4) h
    assert _cell(page, "jct_vs_lucid", "ratio")[8] == "−0.50 [−6.85, 5.85] h, wins 1/2, not separated at 95 %"
    assert _cell(page, "jct_vs_lucid", "ratio")[10] == "1.06 (3 seeds)"  # last recorded, with its seeds
    assert "alt='ratios'" in page and "0" * 32 in page
    lyra_page = pages[2].read_text()
    assert "lyra-sim training servers" in lyra_page and "84 x 8 V100" in lyra_page
    assert "none recorded" in page  # gimbal-philly has no calibration


@pytest.mark.parametrize(("seeds", "message"), [(["0", "0"], "seeds: duplicate seeds [0, 0]"),
                                                (["-1"], "argument --seeds: must be >= 0")])
def test_reproduce_seeds_are_checked_before_any_work(tmp_path, capsys, monkeypatch, seeds, message):
    from schedlab.cli import main

    monkeypatch.setenv("SCHEDLAB_HOME", str(tmp_path / "home"))
    try:
        code = main(["reproduce", str(TINY), "--seeds", *seeds])
    except SystemExit as stop:  # argparse's own errors
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "home" / "mlflow.db").exists()  # nothing ran


def test_a_configs_calibration_shows_in_its_own_section(tmp_path):
    """A calibration with ``experiment:`` (castor-pollux-calibrated's arrival_scale) is printed in that
    config's section of the page, not among the table's common set-up, and not for the other configs."""
    from datetime import UTC, datetime

    from schedlab.sched.reporting.paper_report import ConfigResult, Replay, write_report

    jobs = pd.DataFrame({"num_gpus": [1, 16], "jct_s": [3600.0, 7200.0], "wait_s": [0.0, 60.0],
                         "queue_s": [0.0, 60.0], "submit_time": [0.0, 0.0], "end_time": [3600.0, 7200.0]})

    def result(name: str) -> ConfigResult:
        return ConfigResult(name, "test", [0], "7", None, [Replay("fifo", 0, 1.0, "philly", "castor-sim",
                                                                   "a" * 32, jobs)], ["fifo"])

    pages = write_report(tmp_path, [result("castor-pollux"), result("castor-pollux-calibrated")],
                         parent_run_id="r" * 32, experiment_id="9", tracking_uri="sqlite:///x.db",
                         code_version="v", stamp=datetime.now(UTC))
    page = next(p for p in pages if p.name == "castor-table5.html").read_text()
    common, _, sections = page.partition("<h2>castor-pollux:")
    plain, _, calibrated = sections.partition("<h2>castor-pollux-calibrated:")
    assert "none recorded" in common and "arrival_scale" not in common + plain
    assert "Calibrated parameters of castor-pollux-calibrated" in calibrated and "0.85" in calibrated


def test_row_order_keeps_the_longest_run_of_the_papers_order():
    """Castor Table 5's average JCT, the paper's and ours calibrated (issue #26): four rows keep the paper's order."""
    paper = {"fifo": 2.64, "sjf": 1.88, "tiresias": 2.57, "pollux": 2.17, "lucid": 2.10, "castor": 1.54}
    ours = {"fifo": 2.64, "sjf": 0.91, "tiresias": 0.64, "pollux": 0.59, "lucid": 0.96, "castor": 0.75}
    order = RowOrder.of(paper, ours)
    assert order.paper == ["castor", "sjf", "lucid", "pollux", "tiresias", "fifo"]
    assert order.ours == ["pollux", "tiresias", "castor", "sjf", "lucid", "fifo"]
    assert order.kept == ["castor", "sjf", "lucid", "fifo"]
    # a row missing on one side is left out; a tie in ours does not keep the order
    order = RowOrder.of(paper | {"sjf-ffs": 1.2}, ours | {"tiresias": 1.05, "lucid": 0.91})
    assert "sjf-ffs" not in order.paper and order.kept == ["castor", "sjf", "tiresias", "fifo"]
    assert RowOrder.of({"a": 1.0}, {}).kept == []
