"""``schedlab replay --track``: an ad-hoc replay as MLflow runs, kept in step with its ``--out`` folder.

The runs are created ``RUNNING`` before the first policy is replayed (params, the ``--out`` folder as
tag ``schedlab.out``) and each ends ``FINISHED`` once its policy's results are in ``--out`` and in the
run: a replay killed mid-way leaves in MLflow exactly what ``--out`` holds, the policies not done
still ``RUNNING`` (Ctrl-C and SIGTERM mark them ``KILLED``, an error ``FAILED``).

As an experiment's replays (:mod:`schedlab.tasks.replay`), every run carries its idempotency key
(``schedlab.key``: a hash of its configuration and the code version) and its owner (``host:pid``
and a renewed lease). Replaying the same configuration again retires the earlier runs of its key
that no live process owns (:func:`schedlab.tasks.tracking.supersede`: a run left ``RUNNING`` by a
killed replay ends ``KILLED``; all are soft-deleted, tagged with the run that replaces them), so a
configuration has one run, the newest, whose ``schedlab.out`` is where its results are.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedlab.sched.reporting import compare, plots
from schedlab.sched.reporting.markdown import text as md
from schedlab.sched.reporting.mlflow_view import applied_metrics, run_metrics, run_url, standard_tags
from schedlab.tasks import tracking
from schedlab.tasks.mlflow_view import describe_experiment
from schedlab.tasks.tracking import ERROR_TAG, KEY_TAG, KIND_TAG, PARENT_TAG, UNUSED_TAG, client, retrying

ADHOC_TAG = "schedlab.adhoc"
OUT_TAG = "schedlab.out"


def _key(blob: Any) -> str:
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:32]


@dataclass
class AdhocRuns:
    """The runs of one tracked replay: policy -> run id (and ``"parent"`` for several policies)."""

    uri: str
    experiment_id: str
    total_gpus: int
    run_ids: dict[str, str]
    unfinished: set[str] = field(default_factory=set)  # run ids not ended yet
    end_leases: list[Callable[[], None]] = field(default_factory=list)

    def log(self, result: Any) -> None:
        """A policy's replay is done and written to ``--out``: its metrics and artifacts, then FINISHED."""
        from mlflow.entities import Metric, RunTag

        c, rid = client(self.uri), self.run_ids[result.policy]
        now = int(time.time() * 1000)
        metrics = {**run_metrics(result.summary), **applied_metrics(result)}
        unused = result.unused  # a model or option that changed nothing
        retrying(lambda: c.log_batch(rid, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
                                     tags=[RunTag(UNUSED_TAG, "; ".join(unused)[:4000])] if unused else []))
        with tempfile.TemporaryDirectory(prefix="schedlab-replay-") as tmp:
            out = Path(tmp)
            result.write(out)
            plots.cdf_plot(result.jobs["jct_s"], out / "jct_cdf.png", f"JCT CDF: {result.policy}", "JCT")
            plots.cdf_plot(result.jobs["wait_s"], out / "wait_cdf.png", f"wait CDF: {result.policy}", "wait")
            plots.utilization_plot(result.utilization, self.total_gpus, out / "gpu_util.png",
                                   f"GPU utilisation: {result.policy}")
            if result.smact is not None:
                plots.smact_cdf({result.policy: [result.smact]}, out / "smact_cdf.png", f"SM activity: {result.policy}")
            retrying(lambda: c.log_artifacts(rid, str(out)))
        self._end(rid, "FINISHED")

    def fail(self, policy: str, message: str) -> None:
        """A policy's replay failed (``schedlab.sched.contained.PolicyFailed``): its run ends FAILED with
        the message as its error."""
        rid = self.run_ids[policy]
        retrying(lambda: client(self.uri).set_tag(rid, ERROR_TAG, message[:4000]))
        self._end(rid, "FAILED")

    def finish(self, results: list[Any], failed: bool = False) -> str:
        """Every policy logged or failed: the parent run (several policies) gets ``comparison.csv`` of the
        finished ones and ends FAILED if some failed. Returns the link to the parent run (or the one run)
        in the MLflow UI."""
        parent = self.run_ids.get("parent")
        if parent is not None:
            import pandas as pd

            with tempfile.TemporaryDirectory(prefix="schedlab-replay-") as tmp:
                path = Path(tmp) / "comparison.csv"
                pd.DataFrame([{"policy": r.policy, **{m: r.summary.get(m) for m in compare.METRICS}}
                              for r in results]).to_csv(path, index=False)
                retrying(lambda: client(self.uri).log_artifact(parent, str(path)))
            self._end(parent, "FAILED" if failed else "FINISHED")
        return run_url(self.uri, self.experiment_id, parent or next(iter(self.run_ids.values())))

    def abort(self, err: BaseException) -> None:
        """The replay stopped: the runs not finished end KILLED (interrupted) or FAILED (an error)."""
        interrupted = isinstance(err, (KeyboardInterrupt, SystemExit))
        for rid in sorted(self.unfinished):
            with contextlib.suppress(Exception):  # the original error matters more
                if not interrupted:
                    retrying(lambda: client(self.uri).set_tag(rid, ERROR_TAG, f"{type(err).__name__}: {err}"[:4000]))
                self._end(rid, "KILLED" if interrupted else "FAILED")

    def _end(self, run_id: str, status: str) -> None:
        retrying(lambda: client(self.uri).set_terminated(run_id, status=status))
        self.unfinished.discard(run_id)


def _create(uri: str, experiment_id: str, key: str, name: str, tags: dict[str, str], params: dict[str, Any],
            runs: AdhocRuns) -> str:
    """One RUNNING run of ``key`` (its lease renewed until the replay ends); the key's earlier runs
    that no live process owns are retired."""
    from mlflow.entities import Param

    c = client(uri)
    earlier = tracking.runs_with_tag(uri, experiment_id, KEY_TAG, [key])
    run = retrying(lambda: c.create_run(experiment_id, run_name=name, tags={KEY_TAG: key, ADHOC_TAG: "true",
                                                                          **tracking.owner_tags(), **tags}))
    rid = run.info.run_id
    runs.unfinished.add(rid)
    runs.end_leases.append(tracking.start_lease(uri, rid))
    tracking.supersede(uri, earlier, by=rid)
    retrying(lambda: c.log_batch(rid, params=[Param(k, str(v)[:6000]) for k, v in params.items()]))
    return rid


@contextlib.contextmanager
def adhoc_runs(uri: str, experiment: str, artifact_root: Path | None, config: dict[str, Any], total_gpus: int,
               out: Path) -> Iterator[AdhocRuns]:
    """The runs of a replay of the policies in ``config`` (policy -> its effective params, plus the
    shared settings under ``"*"``), created now; whatever is not logged when the ``with`` ends by an
    exception is marked KILLED or FAILED (see the module docstring)."""
    experiment_id = tracking.ensure_experiment(uri, experiment, artifact_root)
    describe_experiment(uri, experiment_id, None)
    shared = config["*"]
    policies = [p for p in config if p != "*"]
    keys = {p: _key({"experiment": experiment, "shared": shared, "policy": p, "params": config[p]}) for p in policies}
    runs = AdhocRuns(uri, experiment_id, total_gpus, {})
    where = {OUT_TAG: str(out.resolve())}
    try:
        if len(policies) > 1:
            runs.run_ids["parent"] = _create(
                uri, experiment_id, _key(sorted(keys.values())), f"replay: {', '.join(policies)}",
                {KIND_TAG: "experiment", **where, **standard_tags("Ad-hoc `schedlab replay --track` of several"
                                                                   " policies; one child run each.")},
                shared, runs)
        for policy in policies:
            tags = {KIND_TAG: "replay", "schedlab.policy": policy, **where,
                    **standard_tags(f"Ad-hoc replay of **{md(policy)}** (`schedlab replay --track`) on"
                                    f" {md(shared.get('trace.source'))}, cluster {md(shared.get('cluster'))},"
                                    f" seed {md(shared.get('seed'))}; results in {md(out)}.")}
            if "parent" in runs.run_ids:
                tags[PARENT_TAG] = runs.run_ids["parent"]
            runs.run_ids[policy] = _create(uri, experiment_id, keys[policy],
                                           f"{policy} | {shared.get('cluster')} | seed {shared.get('seed')}", tags,
                                           {**shared, "policy": policy, **config[policy]}, runs)
        yield runs
    except BaseException as err:
        runs.abort(err)
        raise
    finally:
        for end in runs.end_leases:
            end()
