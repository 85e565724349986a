"""The comparison of an experiment while it runs, as content (pure: the MLflow calls that publish it are
:mod:`schedlab.tasks.live`): per policy its rank by the chosen metric, its replays done / running / queued
and its knobs (the parameters that differ from the policy's defaults), the note's first lines (who leads),
the headline bars and ``comparison.html``, and a line per replay in flight."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from schedlab import settings
from schedlab.sched.reporting import bars, comparison_html, compare, markdown, mlflow_view, plots
from schedlab.sched.spec import ExperimentReplay, ExperimentSpec



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
    """One finished replay as a row of :func:`schedlab.sched.reporting.compare.comparison`."""
    return {"trace": spec.trace_label, "trace_name": spec.trace, "load": spec.load, "cluster": spec.cluster,
            "policy": spec.label, "seed": spec.seed, **metrics}


def elapsed(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class LiveTable:
    """The comparison of one experiment run, kept up to date as replays finish (:meth:`finished`)."""

    def __init__(self, config: ExperimentSpec, specs: list[ExperimentReplay], rank_by: str = "avg_jct_s") -> None:
        self.config, self.specs, self.rank_by = config, specs, rank_by
        self.rows: dict[str, dict[str, Any]] = {}  # replay key -> row
        self.failed: set[str] = set()
        compare.rank(compare.comparison([], self.config.baseline_label), self.rank_by)  # ValueError: unknown metric
        self._knobs = {s.label: knobs(s.policy, s.params, s.policy_source) for s in self.specs}
        self.fallbacks = self.config.fallbacks()  # same_as says why a policy decides as another
        self._lock = threading.Lock()
        #: one colour and style per policy for the whole experiment (config order: stable while ranks change)
        self.styles = plots.policy_styles(list(dict.fromkeys(
            [e.label or e.name for e in self.config.policy_entries()] + [s.label for s in self.specs])))

    def finished(self, spec: ExperimentReplay, metrics: dict[str, float]) -> None:
        with self._lock:
            self.rows[spec.key] = replay_row(spec, metrics)

    def finished_rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.rows.values())

    def table(self, running: dict[str, Any] | None = None) -> pd.DataFrame:
        """The comparison ranked by :attr:`rank_by`, with every policy of the grid (those with no finished
        replay yet last, without values), its knobs and its replays done/running/queued."""
        rows = self.finished_rows()
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
        return compare.rank(table, self.rank_by, rows, self.config.baseline_label, self.config.paired_interval)

    def csv(self, table: pd.DataFrame) -> pd.DataFrame:
        """``comparison.csv``: the table with each policy's paired comparisons (:func:`compare.csv_frame`)."""
        pairs = compare.pairs_of(table, self.finished_rows(), self.config.baseline_label, self.rank_by,
                                 self.config.paired_interval)
        return compare.csv_frame(table, pairs)

    def seeds_needed(self, table: pd.DataFrame, as_markdown: bool = False) -> str:
        """The lines shown with the table (a Markdown list with ``as_markdown``): the seeds that would separate
        the two best policies."""
        lines = compare.seeds_needed_lines(table, self.finished_rows(), self.rank_by)
        if not lines:
            return ""
        items = [f"- {markdown.text(line)}" if as_markdown else f"  {line}" for line in lines]
        return "\n".join(["seeds needed (paired t test, 95 %, 80 % power, from the observed spread):", *items])

    @staticmethod
    def _progress(counts: dict[str, int]) -> str:
        text = f"{counts.get('done', 0)}/{counts.get('running', 0)}/{counts.get('queued', 0)}"
        return text + (f" ({counts['failed']} failed)" if counts.get("failed") else "")

    def markdown(self, table: pd.DataFrame) -> str:
        done, total = len(self.rows), len(self.specs)
        config = self.config
        baseline = markdown.text(config.baseline_label)  # user text as text (sched/reporting/markdown.py)
        return (f"## {markdown.text(config.name)}: every policy against {baseline}, best first by"
                f" `{self.rank_by}`\n\n"
                + (f"{markdown.block(config.description.strip())}\n\n" if config.description else "")
                + f"{done} of {total} replays finished; {len(config.seeds)} seed(s);"
                f" {compare.legend(baseline)}; knobs: parameters that differ from the policy's"
                " defaults.\n\n" + compare.to_markdown(table, self.config.baseline_label) + "\n"
                + (f"\n{needed}\n" if (needed := self.seeds_needed(table, as_markdown=True)) else ""))

    def stamp(self, done: int | None = None) -> str:
        """Which replays a view includes: ``as of 40 of 42 replays`` (``done``: default, those finished)."""
        return f"as of {len(self.rows) if done is None else done} of {len(self.specs)} replays"

    def headline_bars(self, table: pd.DataFrame, folder: Path) -> dict[str, tuple[str, bytes]]:
        """The normalised bars (:func:`bars.bars_figure`) of each (trace, cluster) whose baseline has a
        finished replay, drawn in ``folder`` as ``headline__<trace>__<cluster>.png``: name -> (caption:
        the replays it includes and the metrics left out, PNG bytes)."""
        baseline, drawn = self.config.baseline_label, {}
        rows = self.finished_rows()
        seeds, stamp = pd.DataFrame(rows), self.stamp(len(rows))
        for (trace, cluster), part in table[table["seeds"] > 0].groupby(compare.GROUP, sort=False):
            if baseline not in set(part["policy"]):
                continue
            mine = seeds[(seeds["trace"] == trace) & (seeds["cluster"] == cluster)]
            fig, omitted = bars.bars_figure(mine, list(part["policy"]), baseline, f"{trace} on {cluster}", stamp,
                                            rank_by=self.rank_by, styles=self.styles,
                                            method=self.config.paired_interval)
            path = plots.save(fig, folder / f"headline__{group_suffix(trace, cluster)}.png")
            left = "; ".join(f"{m} left out: {why}" for m, why in omitted.items())
            drawn[path.name] = (f"{path.name}: normalised bars, {stamp}" + (f"; {left}" if left else ""),
                                path.read_bytes())
        return drawn

    def page(self, table: pd.DataFrame, figures: list[tuple[str, bytes]], links: Sequence[tuple[str, str]] = ()) -> str:
        """``comparison.html`` with ``figures`` (caption, PNG) inline: the table stamped with the replays it
        includes, each figure's caption with its own (a figure redrawn less often can lag the table)."""
        baseline = self.config.baseline_label
        return comparison_html.comparison_html(
            table, self.finished_rows(), baseline, self.rank_by, f"{self.config.name}: every policy against {baseline}",
            f"table {self.stamp()} ({len(self.config.seeds)} seed(s)); best first by {self.rank_by},"
            f" {baseline} first",
            {k: v["color"] for k, v in self.styles.items()}, figures, links)

    def note(self, table: pd.DataFrame, text: str, run_id: str, inline: list[str]) -> str:
        """The comparison run's description: who leads, the figures ``inline`` (under ``plots/`` of run
        ``run_id``), then ``text`` (the table)."""
        images = "".join(f"![{markdown.text(name)}]({artifact_src(run_id, 'plots/' + name)})\n\n" for name in inline)
        return mlflow_view.note_text(self.podium(table) + images + text)

    def podium(self, table: pd.DataFrame, top: int = 3) -> str:
        """The first lines of the parent run's description (all MLflow shows before "Show more"): per
        trace and cluster, the best ``top`` policies with the ranking metric, the speed-up over the
        baseline and the paired verdict against the policy above."""
        baseline, lines = markdown.text(self.config.baseline_label), []
        for (trace, cluster), part in table.groupby(compare.GROUP, sort=False):
            part = part.dropna(subset=[self.rank_by]).head(top)
            if part.empty:
                continue
            ratio = compare.RATIOS.get(self.rank_by)
            cells = []
            for i, row in enumerate(part.to_dict("records")):
                speed = f", {row[ratio]:.2f}x {baseline}" if ratio and pd.notna(row.get(ratio)) else ""
                tie = f" ({markdown.text(row[compare.VS_ABOVE])})" if row.get(compare.VS_ABOVE) else ""
                cells.append(f"{i + 1}. **{markdown.text(row['policy'])}** {compare._cell(row, self.rank_by)}"
                             f"{' h' if compare.in_hours(self.rank_by) else ''}{speed}{tie}")
            lines.append(f"**{markdown.text(trace)} / {markdown.text(cluster)}**, best by `{self.rank_by}`: "
                         + " · ".join(cells))
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


