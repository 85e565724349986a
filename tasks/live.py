"""The comparison while an experiment runs, published: after a finished replay (at most every
:data:`PUBLISH_EVERY_S`, and at the end) the parent run's
policy rows (:func:`schedlab.tasks.mlflow_view.log_policy_runs`), ``comparison.md``, ``comparison.csv``,
``comparison.html``, headline bars and note are brought up to date (what they show:
:mod:`schedlab.sched.reporting.live`); the terminal gets a line per replay in flight.

"Running" is read from the tracking store: a replay's run is RUNNING from the moment its worker
starts it (:func:`schedlab.tasks.replay.log_replay`), so the counts hold for any Dask cluster.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from schedlab.sched.reporting.live import LiveTable, svg_or_png
from schedlab.sched.reporting.mlflow_view import NOTE_TAG
from schedlab.sched.spec import ExperimentReplay, ExperimentSpec
from schedlab.tasks.mlflow_view import log_policy_runs
from schedlab.tasks.tracking import KIND_TAG, PARENT_TAG, PROGRESS_TAG, client, retrying

#: while replays run, the parent run is brought up to date at most this often (seconds): each update
#: reads the runs in flight and logs the rows, tables and page, work that grows with the replays done, so
#: a sweep of thousands would otherwise spend its client's CPU on it (benchmarks/sweep_scale.py)
PUBLISH_EVERY_S = 5.0
#: ... and, after an update that took d seconds, not before d / PUBLISH_SHARE seconds have passed: the live
#: comparison takes at most this share of the client's time, however many replays it holds
PUBLISH_SHARE = 0.1
#: with nothing finishing, the replays in flight are printed this often (seconds)
HEARTBEAT_S = 60.0
#: while replays run, the headline bars are redrawn at most this often (seconds; each costs seconds
#: of the flow's CPU), always for the first finished replay and at the end
BARS_EVERY_S = 30.0


class LiveComparison(LiveTable):
    """The comparison of one experiment run on its parent run ``parent_run_id``, kept up to date."""

    def __init__(self, uri: str, experiment_id: str, parent_run_id: str, config: ExperimentSpec,
                 specs: list[ExperimentReplay], rank_by: str = "avg_jct_s") -> None:
        super().__init__(config, specs, rank_by)
        self.uri, self.experiment_id, self.parent_run_id = uri, experiment_id, parent_run_id
        self._bars_at = -math.inf  # when the headline bars were last drawn (time.monotonic)
        self._bars: dict[str, tuple[str, bytes]] = {}  # name -> (caption, PNG) (logged under plots/, with an SVG copy each)
        self._next_publish = -math.inf  # when the parent run may next be brought up to date (time.monotonic)
        self._published_rows = 0  # the finished replays the last publish showed
        self._publishing = threading.Lock()  # the flow's loop and the heartbeat's catch-up, one at a time

    def due(self) -> bool:
        """Whether a :meth:`publish` is due: the first finished replays at once, then at most every
        :data:`PUBLISH_EVERY_S` and within :data:`PUBLISH_SHARE` of the client's time."""
        return (self._published_rows == 0 and len(self.rows) > 0) or time.monotonic() >= self._next_publish

    def stale(self) -> bool:
        """Whether replays have finished since the last :meth:`publish` showed them."""
        return len(self.rows) > self._published_rows

    def running(self) -> dict[str, tuple[float, str]]:
        """Replay key -> (start time in epoch s, jobs done of all when reported) of the replays whose
        runs are RUNNING under the parent."""
        c = client(self.uri)
        page = retrying(lambda: c.search_runs(
            [self.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{self.parent_run_id}' and"
            f" tags.`{KIND_TAG}` = 'replay' and attributes.status = 'RUNNING'", max_results=1000))
        return {r.data.tags.get("schedlab.key"): ((r.info.start_time or 0) / 1000, r.data.tags.get(PROGRESS_TAG, ""))
                for r in page}

    def publish(self, running: dict[str, Any] | None = None, figures: Sequence[Path] = (),
                suffix: str = "", final: bool = False, figures_as_of: int | None = None,
                links: Sequence[tuple[str, str]] = ()) -> tuple[pd.DataFrame, str]:
        """Bring the parent run up to date: its policy rows, ``comparison.md``, ``comparison.csv``,
        the headline bars (``plots/headline__<trace>__<cluster>.png``; none with ``figures: false``),
        ``comparison.html`` and its note (the bars and ``figures``, already logged under ``plots/``, inline
        above the table).
        ``suffix``: markdown appended to the table (failed replays); the bars are redrawn every
        :data:`BARS_EVERY_S` at most unless ``final``; ``figures_as_of``: the replays ``figures`` include
        (their captions say so; default: every finished one). Returns the table and markdown."""
        with self._publishing:
            return self._publish(running, figures, suffix, final, figures_as_of, links)

    def _publish(self, running: dict[str, Any] | None, figures: Sequence[Path], suffix: str, final: bool,
                 figures_as_of: int | None, links: Sequence[tuple[str, str]]) -> tuple[pd.DataFrame, str]:
        started, shown_rows = time.monotonic(), len(self.rows)
        table = self.table(running)
        text = self.markdown(table) + suffix
        c = client(self.uri)
        log_policy_runs(self.uri, self.experiment_id, self.parent_run_id, table, self.config.baseline_label,
                        self.policy_params(), colours={k: v["color"] for k, v in self.styles.items()})
        with tempfile.TemporaryDirectory(prefix="schedlab-live-") as tmp:
            out = Path(tmp)
            (out / "plots").mkdir()
            if self.config.figures and (final or time.monotonic() - self._bars_at >= BARS_EVERY_S):
                drawn = self.headline_bars(table, out / "plots")
                if drawn:  # none before the baseline has a finished replay
                    self._bars, self._bars_at = drawn, time.monotonic()
                    retrying(lambda: c.log_artifacts(self.parent_run_id, str(out / "plots"), "plots"))
            shown = [*self._bars.values(),
                     *((f"{p.name}, {self.stamp(figures_as_of)}", p.read_bytes()) for p in figures)]
            (out / "comparison.html").write_text(self.page(table, shown, links))
            (out / "comparison.md").write_text(text)
            self.csv(table).to_csv(out / "comparison.csv", index=False)
            for name in ("comparison.md", "comparison.csv", "comparison.html"):
                retrying(lambda: c.log_artifact(self.parent_run_id, str(out / name)))
        inline = [*(name.removesuffix(".png") + ".svg" for name in self._bars), *(svg_or_png(p).name for p in figures)]
        note = self.note(table, text, self.parent_run_id, inline)
        retrying(lambda: c.set_tag(self.parent_run_id, NOTE_TAG, note))
        took = time.monotonic() - started
        self._next_publish = started + max(PUBLISH_EVERY_S, took / PUBLISH_SHARE)
        self._published_rows = shown_rows
        return table, text


@contextlib.contextmanager
def heartbeat(live: LiveComparison, catch_up: Callable[[], None], every: float = HEARTBEAT_S) -> Iterator[None]:
    """While the ``with`` lasts, print the replays in flight every ``every`` seconds (a slow replay
    never leaves the terminal silent for long), and every :data:`PUBLISH_EVERY_S` call ``catch_up`` when
    finished replays wait to be published (an update skipped while updates were not due is made
    without waiting for the next replay to finish)."""
    stop = threading.Event()

    def beat() -> None:
        last_line = time.monotonic()
        while not stop.wait(PUBLISH_EVERY_S):
            with contextlib.suppress(Exception):  # a missed update or line, not a failed experiment
                if live.stale() and live.due():
                    catch_up()
                if time.monotonic() - last_line >= every:
                    last_line = time.monotonic()
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
