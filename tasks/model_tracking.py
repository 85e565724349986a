"""Log fitted models to MLflow and register them (``iteration-time``, ``interference-ratio``).

A fit is one MLflow run in the ``models`` experiment: metrics (flattened), parameters, the training
data's hash and the profile store version as tags, the artifact under ``model/``; then a new version
of the registered model whose source is ``runs:/<run>/model``. Load it back with
``InterferenceModel.load("models:/interference-ratio/<version>", fetcher(uri))``: :func:`fetcher` is how
a ``models:/`` or ``runs:/`` URI reaches sched/, which reads files only. The tracking store is
``$MLFLOW_TRACKING_URI`` or ``sqlite:///$SCHEDLAB_HOME/mlflow.db`` (:class:`schedlab.settings.Settings`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedlab.settings import artifact_root, mlflow_env, registry_uri, tracking_uri

if TYPE_CHECKING:
    from schedlab.sched.models.fitted import Fetch

EXPERIMENT = "models"


def fetcher(tracking: str, registry: str | None = None) -> Fetch:
    """The :data:`~schedlab.sched.models.fitted.Fetch` that downloads ``models:/…`` and ``runs:/…``
    artifacts from the tracking store ``tracking`` and its model registry (``registry``, default
    :func:`schedlab.settings.registry_uri`): what the replay entry points (CLI, experiment worker) hand
    to :func:`schedlab.sched.replay.run`, so that sched/ never imports MLflow. A failed download raises
    :class:`~schedlab.sched.models.fitted.ModelError` naming the URI and the store."""
    registry = registry or registry_uri(tracking)

    def fetch(spec: str, dst: Path) -> Path:
        from schedlab.sched.models.fitted import ModelError

        import mlflow

        try:
            with mlflow_env(tracking, registry):  # MLflow reads the registry for models:/… from the environment
                return Path(mlflow.artifacts.download_artifacts(artifact_uri=spec, dst_path=str(dst),
                                                                tracking_uri=tracking, registry_uri=registry))
        except Exception as err:  # noqa: BLE001 - MLflow raises several kinds
            raise ModelError(f"{spec}: cannot download the model from MLflow ({tracking}): {err}") from None

    return fetch


def log_model(artifact: Path, registered_name: str, metrics: dict[str, Any], *, params: dict[str, Any] | None = None,
              tags: dict[str, str] | None = None, uri: str | None = None) -> dict[str, str]:
    """Log ``artifact`` (a directory or one file) with its metrics; register a new model version.
    Returns ``run_id``, ``version`` and ``model_uri``."""
    from schedlab.sched.reporting.mlflow_view import flat_metrics
    from schedlab.tasks.tracking import check_tracking, client, code_version, ensure_experiment, retrying

    uri = uri or tracking_uri()
    check_tracking(uri)
    c = client(uri)
    exp = ensure_experiment(uri, EXPERIMENT, None if uri.startswith(("http://", "https://")) else artifact_root())
    run = retrying(lambda: c.create_run(exp, run_name=f"fit-{registered_name}",
                                        tags={"schedlab.kind": "fit", "schedlab.model": registered_name,
                                              "schedlab.code_version": code_version(), **(tags or {})}))
    rid = run.info.run_id
    try:
        for key, value in (params or {}).items():
            retrying(lambda: c.log_param(rid, key, str(value)[:500]))
        for key, value in flat_metrics(metrics).items():
            retrying(lambda: c.log_metric(rid, key, value))
        if artifact.is_dir():
            c.log_artifacts(rid, str(artifact), "model")
        else:
            c.log_artifact(rid, str(artifact), "model")
    except Exception:
        retrying(lambda: c.set_terminated(rid, status="FAILED"))
        raise
    retrying(lambda: c.set_terminated(rid))
    try:
        retrying(lambda: c.create_registered_model(registered_name))
    except Exception as err:  # noqa: BLE001 - already registered
        if "already exists" not in str(err).lower() and "RESOURCE_ALREADY_EXISTS" not in str(err):
            raise
    version = retrying(lambda: c.create_model_version(registered_name, source=f"runs:/{rid}/model", run_id=rid))
    return {"run_id": rid, "version": str(version.version),
            "model_uri": f"models:/{registered_name}/{version.version}", "tracking_uri": uri}


#: experiment key in ``models`` -> registered model name
REGISTERED = {"iteration_time": "iteration-time", "interference": "interference-ratio"}
_VERSION_URI = re.compile(r"^(?:model:)?models:/([^/]+)/(\d+)$")


def newest_version(name: str, uri: str | None = None) -> str:
    """The newest registered version of ``name``; ValueError naming the store when there is none."""
    from schedlab.tasks.tracking import client, retrying

    uri = uri or tracking_uri()
    versions = retrying(lambda: client(uri).search_model_versions(f"name='{name}'"))
    if not versions:
        raise ValueError(f"latest: no registered version of {name!r} in {uri}; fit one first"
                         f" (`schedlab fit {'interference' if name == 'interference-ratio' else name}`)")
    return str(max(int(v.version) for v in versions))


def resolve_latest(models: dict[str, str], uri: str | None = None) -> dict[str, str]:
    """``models`` with every ``latest`` replaced by the newest registered version's URI
    (``models:/iteration-time/N``, ``model:models:/interference-ratio/N``), so an experiment's replays
    all use, and record, the same versions."""
    out = dict(models)
    for key, spec in models.items():
        if spec == "latest":
            name = REGISTERED[key]
            out[key] = ("model:" if key == "interference" else "") + f"models:/{name}/{newest_version(name, uri)}"
    return out


def lineage(models: dict[str, str], uri: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(params, tags) that tie a run to the registered model versions it used: per model given as
    ``models:/NAME/N``, params ``model.<key>.name/.version/.run_id`` (the fit's run) and tags
    ``schedlab.model_version.NAME`` and ``schedlab.model_link.NAME`` (the MLflow UI page of the
    version). Models given as a path or a built-in source add nothing."""
    from schedlab.tasks.tracking import client, retrying

    params: dict[str, str] = {}
    tags: dict[str, str] = {}
    for key, spec in sorted(models.items()):
        match = _VERSION_URI.match(str(spec))
        if not match:
            continue
        name, version = match.groups()
        mv = retrying(lambda: client(uri or tracking_uri()).get_model_version(name, version))
        params |= {f"model.{key}.name": name, f"model.{key}.version": version, f"model.{key}.run_id": mv.run_id or ""}
        tags |= {f"schedlab.model_version.{name}": version, f"schedlab.model_link.{name}": f"#/models/{name}/versions/{version}"}
    return params, tags
