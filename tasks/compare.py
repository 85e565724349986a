"""The per-job tables of two policies' replays of an experiment, read from the tracking store (for
``schedlab compare``; the analysis is :mod:`schedlab.sched.reporting.drilldown`)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from schedlab.tasks import tracking


def replay_jobs(uri: str, experiment: str, labels: tuple[str, str], trace: str | None = None,
                cluster: str | None = None) -> dict[tuple[str, str, int], dict[str, pd.DataFrame]]:
    """``(trace, cluster, seed) -> {label: jobs}`` for the FINISHED replays of ``labels`` in ``experiment``
    (optionally one trace label and one cluster); only the (trace, cluster, seed) both labels have. A
    missing experiment or label is a ValueError naming what the store has."""
    c = tracking.client(uri)
    found = c.get_experiment_by_name(experiment)
    if found is None:
        names = sorted(e.name for e in c.search_experiments())
        raise ValueError(f"no experiment {experiment!r} in {uri} (there: {', '.join(names) or 'none'})")
    runs = [r for r in tracking.runs_with_tag(uri, found.experiment_id, "schedlab.kind", ["replay"])
            if r.info.status == "FINISHED"]
    present = sorted({r.data.tags.get("schedlab.label", "") for r in runs})
    for label in labels:
        if label not in present:
            raise ValueError(f"experiment {experiment!r} has no finished replay of {label!r} (labels: {', '.join(present)})")
    chosen: dict[tuple[str, str, int], dict[str, object]] = {}
    for r in runs:
        tags = r.data.tags
        if tags.get("schedlab.label") not in labels or (trace and tags.get("schedlab.trace") != trace) or (
                cluster and tags.get("schedlab.cluster") != cluster):
            continue
        key = (tags["schedlab.trace"], tags["schedlab.cluster"], int(tags["schedlab.seed"]))
        chosen.setdefault(key, {}).setdefault(tags["schedlab.label"], r)
    pairs = {k: v for k, v in chosen.items() if len(v) == 2}
    if not pairs:
        where = " ".join(f"{n} {v!r}" for n, v in (("trace", trace), ("cluster", cluster)) if v)
        raise ValueError(f"experiment {experiment!r}: no trace, cluster and seed has finished replays of both"
                         f" {labels[0]!r} and {labels[1]!r}{' for ' + where if where else ''}")
    out: dict[tuple[str, str, int], dict[str, pd.DataFrame]] = {}
    with tempfile.TemporaryDirectory(prefix="schedlab-compare-") as tmp:
        for (key, by_label) in sorted(pairs.items()):
            out[key] = {}
            for label, run in by_label.items():
                dst = Path(tmp) / run.info.run_id
                dst.mkdir()
                out[key][label] = pd.read_parquet(tracking.download(uri, run.info.run_id, "jobs.parquet", dst))
    return out


def cluster_gpus(clusters: Iterable[str]) -> dict[str, int]:
    """Each cluster's training GPUs, the cluster read as the replays read it (finish-time fairness's share)."""
    from schedlab.sched.spec import fields

    return {c: (pool := fields.cluster(c).training_pool).servers * pool.gpus_per_server for c in set(clusters)}
