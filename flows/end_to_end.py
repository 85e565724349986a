"""The ``end_to_end`` flow: profile -> fit -> an experiment that uses the freshly fitted models.

1. **profile** a sweep into the store on this machine (default ``smoke``, the CPU sweep; resumable:
   configurations already in the store are not measured again);
2. **fit** the iteration-time and interference models from the store (content-named artifacts under
   ``$SCHEDLAB_HOME/models``; logged to MLflow and registered unless ``track=False``);
3. run an **experiment** (default ``quickstart``) whose replays use both fitted models: the
   registered versions (``models.interference: model:models:/interference-ratio/N``,
   ``models.iteration_time: models:/iteration-time/N``; the artifacts' paths when ``track=False``).
   The ξ model decides co-located speeds; the iteration-time model's parameters replace the
   catalog's for the workloads and GPU types it covers (solo durations, accumulation). Each replay
   run records the versions it used (params ``model.<key>.version``, tags
   ``schedlab.model_version.<name>`` and a link to the version). The derived experiment file is written to
   ``$SCHEDLAB_HOME/end-to-end/<name>-<hash>.yaml`` (trace paths made absolute) and logged with the
   experiment's comparison run, which is tagged with the fit runs.

>>> report = run_end_to_end()                                    # smoke -> fit -> quickstart
>>> report = run_end_to_end(sweep="tiny.yaml", experiment="exp.yaml", track=False)
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from schedlab import settings

import yaml
from prefect import flow
from prefect.states import Failed
from schedlab.sched.spec import load_config
from schedlab.tasks import tracking
from schedlab.tasks.fit import KINDS, fit_task
from schedlab.tasks.profile import profile_task, read_sweep
from schedlab.tasks.tracking import client, retrying

DEFAULT_SWEEP = "smoke"
DEFAULT_EXPERIMENT = "quickstart"


def derived_config(experiment: str, interference_dir: str, iteration_time: str | None, out_dir: Path) -> Path:
    """The experiment file with the fitted models (``interference_dir``: the ξ model's folder or
    ``models:/`` URI), trace sources made absolute, written to
    ``out_dir/<name>-<hash>.yaml`` (the same models give the same file: re-runs resume)."""
    config = load_config(experiment)
    raw = yaml.safe_load(Path(config._path).read_text())
    for trace in raw.get("traces") or []:
        if trace.get("source") not in (None, "synthetic"):
            trace["source"] = config.resolve_source(trace["source"])
    raw["models"] = {**(raw.get("models") or {}), "interference": f"model:{interference_dir}"}
    if iteration_time:
        raw["models"]["iteration_time"] = iteration_time
    text = (f"# {config._path} with the models fitted by the end_to_end flow\n"
            + yaml.safe_dump(raw, sort_keys=False))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{settings.path_name(config.name)}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.yaml"
    if not path.exists():
        path.write_text(text)
    load_config(path)  # still valid
    return path


@flow(name="end-to-end", log_prints=True, persist_result=False)
def end_to_end(dask_address: str, sweep: str = DEFAULT_SWEEP, experiment: str = DEFAULT_EXPERIMENT,
               store: str | None = None, models_dir: str | None = None, tracking_uri: str | None = None,
               track: bool = True, artifact_root: str | None = None, code_version: str | None = None,
               holdout: float = 0.2, seed: int = 0) -> dict[str, Any]:
    """Profile ``sweep`` here, fit both models, run ``experiment`` (its replays on the Dask cluster at
    ``dask_address``) with both fitted models. Returns the experiment's report plus
    ``profile``, ``fits`` and ``config_path``."""
    from prefect_dask import DaskTaskRunner
    from schedlab.flows.experiment import experiment_flow

    home = settings.Settings.from_env().apply().home
    uri = tracking_uri or settings.tracking_uri(home)
    store_dir = str(Path(store).expanduser().resolve() if store else home / "profiles")
    models = str(Path(models_dir).expanduser().resolve() if models_dir else home / "models")
    chosen = read_sweep(sweep)

    profile = profile_task(chosen["yaml"], chosen["name"], store_dir)
    profile.pop("records", None)
    print(f"profiled {chosen['name']!r} ({profile['device']}): {profile['counts'] or 'nothing to do'}; store {store_dir}")

    fits = {}
    for kind, name in KINDS.items():
        fits[name] = fit_task(kind, store_dir, models, holdout, seed, uri if track else None, None,
                              {"schedlab.end_to_end": "true"})
        print(f"fitted {name}: {fits[name]['path']}" + (f" -> {fits[name]['model_uri']}" if track else ""))

    used = {name: fit.get("model_uri") or fit["path"] for name, fit in fits.items()}  # registered versions
    config_path = derived_config(experiment, used["interference-ratio"], used["iteration-time"], home / "end-to-end")
    print(f"experiment file with the fitted models: {config_path}")
    state = experiment_flow.with_options(task_runner=DaskTaskRunner(address=dask_address))(
        str(config_path), uri, artifact_root, code_version or tracking.code_version(), return_state=True)
    report = state.result(raise_on_failure=False)
    if isinstance(report, BaseException):
        raise report
    c = client(uri)
    for name, fit in fits.items():
        retrying(lambda: c.set_tag(report["parent_run_id"], f"schedlab.model_path.{name}", fit["path"]))
        if fit.get("run_id"):
            retrying(lambda: c.set_tag(report["parent_run_id"], f"schedlab.fit_run_id.{name}", fit["run_id"]))
    report = {**report, "profile": profile, "config_path": str(config_path),
              "fits": {n: {k: f.get(k) for k in ("path", "run_id", "version", "model_uri", "metrics")}
                       for n, f in fits.items()}}
    if report["failures"]:
        return Failed(message=f"{len(report['failures'])} replays failed", data=report)
    return report


def run_end_to_end(sweep: str = DEFAULT_SWEEP, experiment: str = DEFAULT_EXPERIMENT, *,
                   dask_address: str | None = None, workers: int | None = None, track: bool = True,
                   tracking_uri: str | None = None, home: Path | None = None, code_version: str | None = None,
                   **options: Any) -> dict[str, Any]:
    """Check the sweep, the experiment file, the tracking store and the Dask address, then run
    :func:`end_to_end` (replays on a LocalCluster unless ``dask_address``). Raises FileNotFoundError /
    ValueError (sweep), ConfigError, TrackingError or DaskUnreachable before any work."""
    from schedlab.flows.orchestration import orchestration

    home = settings.Settings.from_env(home).apply().home
    logging.getLogger("distributed").setLevel(logging.WARNING)
    read_sweep(sweep)
    load_config(experiment)
    with orchestration(home, tracking_uri, dask_address, workers) as run:
        state = end_to_end(run.address, sweep, experiment, tracking_uri=run.uri, track=track,
                           artifact_root=run.artifact_root,
                           code_version=code_version or tracking.code_version(), return_state=True, **options)
    report = state.result(raise_on_failure=False)
    if isinstance(report, BaseException):
        raise report
    return report


__all__ = ["derived_config", "end_to_end", "run_end_to_end"]
