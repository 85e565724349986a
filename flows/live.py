"""The comparison while an experiment runs (issue #29 §1): after each finished replay the parent run's
policy rows (:func:`schedlab.tasks.mlflow_view.log_policy_runs`), its ``comparison.md`` and its note
are brought up to date, ranked by the chosen metric, with each policy's replays done / running /
queued and its knobs (the parameters that differ from the policy's defaults); the terminal gets the
ranked table every N finished replays and a line per replay in flight.

"Running" is read from the tracking store: a replay's run is RUNNING from the moment its worker
starts it (:func:`schedlab.tasks.replay.log_replay`), so the counts hold for any Dask cluster.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from schedlab.tasks import compare, mlflow_view
from schedlab.tasks.config import ExperimentConfig, ExperimentReplay
from schedlab.tasks.tracking import KIND_TAG, PARENT_TAG, PROGRESS_TAG, client, retrying

#: with nothing finishing, the replays in flight are printed this often (seconds)
HEARTBEAT_S = 60.0


def knobs(policy: str, params: dict[str, Any]) -> str:
    """``name=value`` of each parameter whose value differs from the policy's default (validated values)."""
    given, default = mlflow_view.policy_params(policy, params), mlflow_view.policy_params(policy, {})
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
        self._knobs = {s.label: knobs(s.policy, s.params) for s in self.specs}
        self._lock = threading.Lock()

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
        table = compare.comparison(rows, self.config.baseline_label, order)
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

    def publish(self, running: dict[str, Any] | None = None) -> pd.DataFrame:
        """Bring the parent run's policy rows, ``comparison.md`` and note up to date; the table."""
        table = self.table(running)
        text = self.markdown(table)
        c = client(self.uri)
        mlflow_view.log_policy_runs(self.uri, self.experiment_id, self.parent_run_id, table,
                                    self.config.baseline_label, self.policy_params())
        retrying(lambda: c.log_text(self.parent_run_id, text, "comparison.md"))
        retrying(lambda: c.set_tag(self.parent_run_id, mlflow_view.NOTE_TAG, mlflow_view.note_text(text)))
        return table

    def policy_params(self) -> dict[str, dict[str, str]]:
        """label -> the params of its policy run (policy, placement, preemption overhead, every parameter)."""
        out = {}
        for s in self.specs:
            out[s.label] = {
                "policy": s.policy, "placement": s.placement, "knobs": self._knobs.get(s.label) or "(defaults)",
                "preemption_overhead_s": mlflow_view.preemption_overhead(s.policy, s.preemption_overhead_s),
                **{f"params.{k}": json.dumps(v) for k, v in mlflow_view.policy_params(s.policy, s.params).items()}}
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
