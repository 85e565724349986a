"""The comparison while an experiment runs: after each finished replay the parent
run's policy rows (:func:`schedlab.tasks.mlflow_view.log_policy_runs`), its ``comparison.md``,
``comparison.csv``, ``comparison.html``, headline bars and note (who leads, then the figures inline,
then the table) are brought up to date, ranked by the chosen metric, with each policy's replays done / running /
queued and its knobs (the parameters that differ from the policy's defaults); the terminal gets the
ranked table every N finished replays and a line per replay in flight.

"Running" is read from the tracking store: a replay's run is RUNNING from the moment its worker
starts it (:func:`schedlab.tasks.replay.log_replay`), so the counts hold for any Dask cluster.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from schedlab import settings
from schedlab.tasks import compare, mlflow_view, plots, report_html
from schedlab.tasks.config import ExperimentConfig, ExperimentReplay
from schedlab.tasks.tracking import KIND_TAG, PARENT_TAG, PROGRESS_TAG, client, retrying

#: with nothing finishing, the replays in flight are printed this often (seconds)
HEARTBEAT_S = 60.0
#: while replays run, the headline bars are redrawn at most this often (seconds; each costs seconds
#: of the flow's CPU), always for the first finished replay and at the end
BARS_EVERY_S = 30.0
#: the headline bars' panels (the first is the ranking metric's when it is one of them)
BAR_METRICS = ("avg_jct_s", "avg_wait_s", "makespan_s")


def artifact_src(run_id: str, path: str) -> str:
    """A run artifact's address relative to the MLflow UI's page (its ``get-artifact`` endpoint), for
    images in a run's description, which the UI renders as markdown with ``<img>`` allowed."""
    return "get-artifact?" + urllib.parse.urlencode({"path": path, "run_uuid": run_id})


def svg_or_png(png: Path) -> Path:
    """The copy of a figure shown in a run's description: its SVG when :func:`plots.save` wrote one."""
    svg = png.with_suffix(".svg")
    return svg if svg.exists() else png


def group_suffix(trace: str, cluster: str) -> str:
    return settings.path_name(f"{trace}__{cluster}")


def knobs(policy: str, params: dict[str, Any], source: str | None = None) -> str:
    """``name=value`` of each parameter whose value differs from the policy's default (validated values;
    ``source``: a file policy's carried text)."""
    given, default = mlflow_view.policy_params(policy, params, source), mlflow_view.policy_params(policy, {}, source)
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(given.items()) if default.get(k) != v)


def replay_row(spec: ExperimentReplay, metrics: dict[str, float]) -> dict[str, Any]:
    """One finished replay as a row of :func:`schedlab.tasks.compare.comparison`."""
    return {"trace": spec.trace_label, "trace_name": spec.trace, "load": spec.load, "cluster": spec.cluster,
            "policy": spec.label, "seed": spec.seed, **metrics}


def elapsed(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


@dataclass
class LiveComparison:
    """The comparison of one experiment run, kept up to date as replays finish."""

    uri: str
    experiment_id: str
    parent_run_id: str
    config: ExperimentConfig
    specs: list[ExperimentReplay]
    rank_by: str = "avg_jct_s"
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # replay key -> row
    failed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        compare.rank(compare.comparison([], self.config.baseline_label), self.rank_by)  # ValueError: unknown metric
        self._knobs = {s.label: knobs(s.policy, s.params, s.policy_source) for s in self.specs}
        self.fallbacks = self.config.fallbacks()  # same_as says why a policy decides as another
        self._lock = threading.Lock()
        self._bars_at = -math.inf  # when the headline bars were last drawn (time.monotonic)
        self._bars: dict[str, bytes] = {}  # their PNGs (logged under plots/, with an SVG copy each)
        #: one colour and style per policy for the whole experiment (config order: stable while ranks change)
        self.styles = plots.policy_styles(list(dict.fromkeys(
            [e.label or e.name for e in self.config.policy_entries()] + [s.label for s in self.specs])))

    def bar_metrics(self) -> list[str]:
        return [self.rank_by, *(m for m in BAR_METRICS if m != self.rank_by)]

    def finished(self, spec: ExperimentReplay, metrics: dict[str, float]) -> None:
        with self._lock:
            self.rows[spec.key] = replay_row(spec, metrics)

    def running(self) -> dict[str, tuple[float, str]]:
        """Replay key -> (start time in epoch s, jobs done of all when reported) of the replays whose
        runs are RUNNING under the parent."""
        c = client(self.uri)
        page = retrying(lambda: c.search_runs(
            [self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{self.parent_run_id}' and"
            f" tags.`{KIND_TAG}` = 'replay' and attributes.status = 'RUNNING'", max_results=1000))
        return {r.data.tags.get("schedlab.key"): ((r.info.start_time or 0) / 1000, r.data.tags.get(PROGRESS_TAG, ""))
                for r in page}

    def table(self, running: dict[str, Any] | None = None) -> pd.DataFrame:
        """The comparison ranked by :attr:`rank_by`, with every policy of the grid (those with no finished
        replay yet last, without values), its knobs and its replays done/running/queued."""
        with self._lock:
            rows = list(self.rows.values())
        order = [e.label or e.name for e in self.config.policy_entries()]
        table = compare.comparison(rows, self.config.baseline_label, order, self.fallbacks)
        groups: dict[tuple[str, str, str], dict[str, int]] = {}
        for spec in self.specs:
            state = ("done" if spec.key in self.rows else "failed" if spec.key in self.failed
                     else "running" if spec.key in (running or {}) else "queued")
            counts = groups.setdefault((spec.trace_label, spec.cluster, spec.label), {})
            counts[state] = counts.get(state, 0) + 1
        present = set(zip(table["trace"], table["cluster"], table["policy"]))
        missing = [{"trace": t, "cluster": c, "policy": p, "seeds": 0, compare.SAME_AS: ""}
                   for (t, c, p) in groups if (t, c, p) not in present]
        if missing:
            table = pd.concat([table, pd.DataFrame(missing)], ignore_index=True)
            table["seeds"] = table["seeds"].astype(int)
        table[compare.PROGRESS] = [self._progress(groups[(t, c, p)])
                                   for t, c, p in zip(table["trace"], table["cluster"], table["policy"])]
        table[compare.KNOBS] = [self._knobs.get(p, "") for p in table["policy"]]
        return compare.rank(table, self.rank_by)

    @staticmethod
    def _progress(counts: dict[str, int]) -> str:
        text = f"{counts.get('done', 0)}/{counts.get('running', 0)}/{counts.get('queued', 0)}"
        return text + (f" ({counts['failed']} failed)" if counts.get("failed") else "")

    def markdown(self, table: pd.DataFrame) -> str:
        done, total = len(self.rows), len(self.specs)
        config = self.config
        return (f"## {config.name}: every policy against `{config.baseline_label}`, best first by"
                f" `{self.rank_by}`\n\n"
                + (f"{config.description.strip()}\n\n" if config.description else "")
                + f"{done} of {total} replays finished; {len(config.seeds)} seed(s);"
                f" {compare.legend(config.baseline_label)}; knobs: parameters that differ from the policy's"
                " defaults.\n\n" + compare.to_markdown(table) + "\n")

    def publish(self, running: dict[str, Any] | None = None, figures: Sequence[Path] = (),
                suffix: str = "", final: bool = False) -> tuple[pd.DataFrame, str]:
        """Bring the parent run up to date: its policy rows, ``comparison.md``, ``comparison.csv``,
        the headline bars (``plots/headline__<trace>__<cluster>.png``), ``comparison.html`` and its
        note (the bars and ``figures``, already logged under ``plots/``, inline above the table).
        ``suffix``: markdown appended to the table (failed replays); the bars are redrawn every
        :data:`BARS_EVERY_S` at most unless ``final``. Returns the table and markdown."""
        table = self.table(running)
        text = self.markdown(table) + suffix
        c = client(self.uri)
        baseline = self.config.baseline_label
        mlflow_view.log_policy_runs(self.uri, self.experiment_id, self.parent_run_id, table, baseline,
                                    self.policy_params(), colours={k: v["color"] for k, v in self.styles.items()})
        with self._lock:
            rows = list(self.rows.values())
        seeds = pd.DataFrame(rows)
        with tempfile.TemporaryDirectory(prefix="schedlab-live-") as tmp:
            out = Path(tmp)
            (out / "plots").mkdir()
            if final or time.monotonic() - self._bars_at >= BARS_EVERY_S:
                drawn: dict[str, bytes] = {}
                for (trace, cluster), part in table[table["seeds"] > 0].groupby(compare.GROUP, sort=False):
                    if baseline not in set(part["policy"]):
                        continue
                    mine = seeds[(seeds["trace"] == trace) & (seeds["cluster"] == cluster)] if len(seeds) else None
                    path = plots.headline_bars(part, self.bar_metrics(), baseline,
                                               out / "plots" / f"headline__{group_suffix(trace, cluster)}.png",
                                               f"{trace} on {cluster}", seeds=mine, styles=self.styles)
                    drawn[path.name] = path.read_bytes()
                if drawn:  # none before the baseline has a finished replay
                    self._bars, self._bars_at = drawn, time.monotonic()
                    retrying(lambda: c.log_artifacts(self.parent_run_id, str(out / "plots"), "plots"))
            shown = [*self._bars.items(), *((p.name, p.read_bytes()) for p in figures)]
            done, total = len(self.rows), len(self.specs)
            page = report_html.comparison_html(
                table, rows, baseline, self.rank_by, f"{self.config.name}: every policy against {baseline}",
                f"{done} of {total} replays finished; {len(self.config.seeds)} seed(s); best first by {self.rank_by}",
                {k: v["color"] for k, v in self.styles.items()}, shown)
            (out / "comparison.html").write_text(page)
            (out / "comparison.md").write_text(text)
            table.to_csv(out / "comparison.csv", index=False)
            for name in ("comparison.md", "comparison.csv", "comparison.html"):
                retrying(lambda: c.log_artifact(self.parent_run_id, str(out / name)))
        inline = [*(name.removesuffix(".png") + ".svg" for name in self._bars), *(svg_or_png(p).name for p in figures)]
        images = "".join(f"![{name}]({artifact_src(self.parent_run_id, 'plots/' + name)})\n\n" for name in inline)
        note = self.podium(table) + images + text
        retrying(lambda: c.set_tag(self.parent_run_id, mlflow_view.NOTE_TAG, mlflow_view.note_text(note)))
        return table, text

    def podium(self, table: pd.DataFrame, top: int = 3) -> str:
        """The first lines of the parent run's description (all MLflow shows before "Show more"): per
        trace and cluster, the best ``top`` policies with the ranking metric, the speed-up over the
        baseline and ties."""
        baseline, lines = self.config.baseline_label, []
        for (trace, cluster), part in table.groupby(compare.GROUP, sort=False):
            part = part.dropna(subset=[self.rank_by]).head(top)
            if part.empty:
                continue
            ratio = compare.RATIOS.get(self.rank_by)
            cells = []
            for i, row in enumerate(part.to_dict("records")):
                speed = f", {row[ratio]:.2f}x {baseline}" if ratio and pd.notna(row.get(ratio)) else ""
                tie = f" ({row[compare.TIE]})" if row.get(compare.TIE) else ""
                cells.append(f"{i + 1}. **{row['policy']}** {compare._cell(row, self.rank_by)}"
                             f"{' h' if compare.in_hours(self.rank_by) else ''}{speed}{tie}")
            lines.append(f"**{trace} / {cluster}**, best by `{self.rank_by}`: " + " · ".join(cells))
        done = f"{len(self.rows)} of {len(self.specs)} replays finished"
        return ("  \n".join(lines) + f"  \n{done}; interactive table and plots: artifact `comparison.html`"
                " (Artifacts tab); bars and CDFs below.\n\n") if lines else ""

    def policy_params(self) -> dict[str, dict[str, str]]:
        """label -> the params of its policy run (policy, placement, preemption overhead, every parameter)."""
        out = {}
        for s in self.specs:
            out[s.label] = {
                "policy": s.policy, "placement": s.placement, "knobs": self._knobs.get(s.label) or "(defaults)",
                "preemption_overhead_s": mlflow_view.preemption_overhead(s.policy, s.preemption_overhead_s,
                                                                         s.policy_source),
                **{f"params.{k}": json.dumps(v)
                   for k, v in mlflow_view.policy_params(s.policy, s.params, s.policy_source).items()}}
        return out

    def in_flight(self, running: dict[str, tuple[float, str]]) -> str:
        """A line per replay in flight, longest first, with its elapsed time and, once its worker has
        reported it (with its lease, every 30 s), the jobs it has done."""
        if not running:
            return ""
        now, names = time.time(), {s.key: s.run_name for s in self.specs}
        lines = [f"  {names.get(key, key)}: running for {elapsed(now - start)}" + (f", {jobs}" if jobs else "")
                 for key, (start, jobs) in sorted(running.items(), key=lambda item: item[1][0])]
        return f"in flight ({len(running)}):\n" + "\n".join(lines)


@contextlib.contextmanager
def heartbeat(live: LiveComparison, every: float = HEARTBEAT_S) -> Iterator[None]:
    """While the ``with`` lasts, print the replays in flight every ``every`` seconds (a slow replay
    never leaves the terminal silent for long)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            with contextlib.suppress(Exception):  # a missed line, not a failed experiment
                text = live.in_flight(live.running())
                if text:
                    print(f"{len(live.rows)} of {len(live.specs)} replays finished; {text}", flush=True)

    thread = threading.Thread(target=beat, name="schedlab-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
