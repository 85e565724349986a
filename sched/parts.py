"""A replay's parts, built once from a validated :class:`~schedlab.sched.spec.ReplaySpec`: the cluster
(read by the spec), the iteration-time catalog, the ξ source, the inference load that loaned servers
follow, the goodput models of the applications, and per policy its decider, its sharing model and its
cluster state (with the pools' orchestrator). The only module that builds them: what a file holds is
read once here, and a part that keeps counts (the ξ source's fallbacks) is handed out fresh per policy.

The SM-activity profile is read from the profile store by the caller (``schedlab.profiling.smact``:
sched/ reads no profile store) and given to :func:`build`.

An error names the spec's field it comes from (:class:`~schedlab.sched.spec.fields.SpecError`): the command line words it with the
flag's name, an experiment file with its key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedlab.sched.core.cluster import ClusterSpec, ClusterState
from schedlab.sched.models.fitted import Fetch, make_iteration_time
from schedlab.sched.models.interference import InterferenceSource, fresh, make_interference
from schedlab.sched.models.sharing import SharingModel
from schedlab.sched.models.workloads import WorkloadCatalog
from schedlab.sched.policies import Policy, make_policy
from schedlab.sched.spec.fields import SpecError

if TYPE_CHECKING:
    from schedlab.sched.core.pools import Orchestrator
    from schedlab.sched.models.inference import InferenceLoad
    from schedlab.sched.models.smact import SmactProfile
    from schedlab.sched.spec import PolicyRun, ReplaySpec


def iteration_times(text: str, fetch: Fetch | None = None) -> WorkloadCatalog:
    """The catalog a replay takes iteration times from (``catalog``, or a fitted model's path, shipped name
    or ``models:/`` URI through ``fetch``)."""
    try:
        return make_iteration_time(text, fetch)
    except (ValueError, OSError) as err:
        raise SpecError("iteration_time", str(err)) from None


def interference_source(text: str, fetch: Fetch | None = None) -> InterferenceSource:
    """The ξ source, its tables or model read (a ``models:/`` URI through ``fetch``)."""
    try:
        return make_interference(text, fetch)
    except (ValueError, OSError) as err:
        raise SpecError("interference", str(err)) from None


def inference_load(load: str) -> InferenceLoad:
    """The inference-load series loaned servers follow (a CSV, ServeGen's CSV[:MODEL], constant:U, …)."""
    from schedlab.sched.models.inference import InferenceLoadError, load_inference

    try:
        return load_inference(load)
    except (InferenceLoadError, OSError) as err:
        raise SpecError("inference.load", str(err)) from None


@dataclass
class ReplayParts:
    """What a replay of a spec is built from, each read once."""

    cluster: ClusterSpec
    timing: WorkloadCatalog  # iteration times: the packaged catalog, or a fitted model's parameters over it
    interference: InterferenceSource  # as read: each policy's replay takes a fresh copy (:meth:`sharing`)
    inference_load: InferenceLoad | None = None
    smact: SmactProfile | None = None
    goodput_root: str | None = None

    def goodput_models(self) -> dict[str, Any]:
        """The applications' goodput models (``goodput_root``, default the packaged ones; read once per
        process and folder)."""
        from schedlab.sched.models.goodput import load_applications

        return load_applications(self.goodput_root)

    def policy(self, run: PolicyRun) -> Policy:
        """A new decider for ``run`` (a policy keeps state: one per replay)."""
        return make_policy(run.name, run.params, source=run.source)

    def sharing(self) -> SharingModel:
        """The sharing model of one policy's replay: the ξ source (its own fallback count) and the
        iteration times that give it solo speeds."""
        return SharingModel.for_cluster(self.cluster, fresh(self.interference), self.timing)

    def cluster_state(self, spec: ReplaySpec) -> tuple[ClusterState, Orchestrator | None]:
        """One policy's cluster state, and with ``spec.inference`` the pooled cluster whose inference
        servers are lent to training and the orchestrator that lends and reclaims them."""
        if spec.inference is None:
            return ClusterState(self.cluster), None
        from schedlab.sched.core.pools import Orchestrator, PooledCluster

        state = PooledCluster(self.cluster, spec.inference)
        return state, Orchestrator(self.inference_load, spec.inference, spec.seed)


def build(spec: ReplaySpec, fetch: Fetch | None = None, smact: SmactProfile | None = None) -> ReplayParts:
    """The parts of ``spec``'s replay (a :class:`~schedlab.sched.spec.fields.SpecError` naming the field of a part that cannot be
    built); ``fetch`` downloads the models named by MLflow URI, ``smact``: the SM-activity profile read
    from ``spec.smact_profiles`` (required when the spec names one)."""
    if spec.smact_profiles is not None and smact is None:
        raise SpecError("smact_profiles", f"smact_profiles {spec.smact_profiles}: the replay needs the SMACT profile"
                        " read from it (prepare(spec, ..., smact=schedlab.profiling.smact.profile_for(spec)))")
    return ReplayParts(
        cluster=spec.cluster_spec(),
        timing=iteration_times(spec.iteration_time, fetch),
        interference=interference_source(spec.interference, fetch),
        inference_load=inference_load(spec.inference.load) if spec.inference is not None else None,
        smact=smact,
        goodput_root=spec.goodput_root,
    )
