"""What the engine asks when jobs share GPUs: ξ for a pair, memory per GPU, and the slowdown of
gradient accumulation (Castor §3.1-3.2). One object, built from the workload catalog, the cluster's
GPU type and an interference source.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from schedlab.sched.models.annotate import catalog_gpu_type
from schedlab.sched.core.cluster import ClusterSpec
from schedlab.sched.models.interference import InterferenceSource, make_interference
from schedlab.sched.core.job import Job
from schedlab.sched.models.workloads import FittedCatalog, WorkloadCatalog, default_catalog, min_servers

MAX_JOBS_PER_GPU = 2  # C = 2 (Castor eq. 7)
DEFAULT_RHO = 0.5  # σ(p) = p^-ρ for sources without a restriction model (docs/explanation/gimbal.md, OURS)


class SharingError(ValueError):
    pass


@dataclass
class SharingModel:
    interference: InterferenceSource
    catalog: WorkloadCatalog
    gpu_type: str  # the catalog's name for the cluster's GPU type (or its reference type)
    gpu_memory_gib: float
    gpus_per_server: int
    _speed: dict[tuple, float] = field(default_factory=dict, repr=False)
    _compute: dict[str, tuple[float, float]] = field(default_factory=dict, repr=False)
    _memory: dict[tuple, float] = field(default_factory=dict, repr=False)
    #: with a fitted iteration-time model, the packaged catalog and its GPU type: each value read from the
    #: fit is compared with the catalog's, and the jobs it differs for are kept in :attr:`fit_changed`
    #: (what the fit applied to: ``sched/results/applied.py``); None with the catalog itself
    shadow: tuple[WorkloadCatalog, str] | None = field(default=None, repr=False)
    fit_changed: set[str] = field(default_factory=set, repr=False)
    _differs: dict[tuple, bool] = field(default_factory=dict, repr=False)

    @classmethod
    def for_cluster(cls, spec: ClusterSpec, interference: str | InterferenceSource | None = None,
                    catalog: WorkloadCatalog | None = None) -> SharingModel:
        """``catalog``: where iteration times come from (default: the packaged catalog; a fitted
        model's :class:`~schedlab.sched.models.workloads.FittedCatalog`)."""
        catalog = catalog or default_catalog()
        pool = spec.training_pool
        source = interference if not isinstance(interference, (str, type(None))) else make_interference(interference)
        shadow = None
        if isinstance(catalog, FittedCatalog):
            packaged = default_catalog()
            shadow = (packaged, catalog_gpu_type(packaged, pool.gpu_type))
        return cls(source, catalog, catalog_gpu_type(catalog, pool.gpu_type), pool.gpu_memory_gb, pool.gpus_per_server,
                   shadow=shadow)

    def ratio(self, a: Job, b: Job, mode: str, shares: tuple[float, float] | None = None) -> tuple[float, float]:
        self._require_workload(a)
        self._require_workload(b)
        return self.interference.ratio(a, b, mode, shares)

    def memory_gib(self, job: Job, accumulation_steps: int | None = None) -> float:
        self._require_workload(job)
        steps = accumulation_steps or job.accumulation_steps
        return self.catalog.memory_gib(job.model, job.batch_size / steps)

    def fits_together(self, a: Job, b: Job, steps_a: int | None = None, steps_b: int | None = None) -> bool:
        """GPU memory feasibility: both jobs' per-GPU footprints fit on one GPU."""
        return self.memory_gib(a, steps_a) + self.memory_gib(b, steps_b) <= self.gpu_memory_gib

    def memory_at(self, job: Job, batch_per_gpu: float) -> float:
        """GiB one worker of ``job`` needs at local batch ``batch_per_gpu`` (LISS changes it per worker)."""
        key = (job.model, batch_per_gpu / job.accumulation_steps)
        hit = self._memory.get(key)
        if hit is None:
            self._require_workload(job)
            hit = self._memory[key] = self.catalog.memory_gib(*key)
        return hit

    def max_batch(self, job: Job, partner_gib: float = 0.0) -> float:
        """The largest local batch of ``job`` that fits on one GPU beside ``partner_gib`` GiB (the
        memory estimate is linear in the batch), or ``inf`` when the catalog has no memory estimate."""
        self._require_workload(job)
        memory = self.catalog.workload(job.model).memory
        if memory is None:
            return math.inf
        per_sample = (memory.gib - memory.static_gib) / memory.reference_batch
        room = self.gpu_memory_gib - partner_gib - memory.static_gib
        return math.inf if per_sample <= 0 else max(0.0, room / per_sample) * job.accumulation_steps

    def compute_params(self, job: Job) -> tuple[float, float]:
        """(α, β) of the catalog's eq. 1, ``t_comp(b) = α + β·b``, at the cluster's GPU type."""
        hit = self._compute.get(job.model)
        if hit is None:
            self._require_workload(job)
            params = self.catalog.params(job.model, self.gpu_type)
            hit = self._compute[job.model] = (params.alpha_comp, params.beta_comp)
        if self.shadow is not None:
            self._note_fit(job, ("compute", job.model), hit, lambda catalog, gpu: (
                (p := catalog.params(job.model, gpu)).alpha_comp, p.beta_comp))
        return hit

    def compute_time(self, job: Job, batch_per_gpu: float) -> float:
        """Seconds of compute of one iteration of ``job`` at local batch ``batch_per_gpu`` (eq. 1)."""
        alpha, beta = self.compute_params(job)
        return alpha + beta * batch_per_gpu

    def restricted_solo(self, job: Job, share: float) -> float:
        """σ(p): the slowdown of a worker of ``job`` alone on its GPU under an MPS cap ``share``
        (fraction). From the ξ source when it models caps (``mpscap:``, a ``table:`` with solo rows),
        else schedlab's default ``p^-0.5`` (docs/explanation/gimbal.md, OURS)."""
        if share >= 1.0:
            return 1.0
        if share <= 0.0:
            return math.inf
        solo = getattr(self.interference, "restricted_solo", None)
        value = solo(job, share) if solo is not None else None
        return share ** -DEFAULT_RHO if value is None else value

    def utilization(self, job: Job) -> float:
        """u_j, the job's solo GPU utilisation (Gimbal eq. 2's JCT priority): the catalog's
        ``gpu_util`` of the workload when it has one, else its memory footprint over the GPU's memory
        (the stand-in Gandiva uses here too; OURS)."""
        self._require_workload(job)
        util = getattr(self.catalog.workload(job.model), "gpu_util", None)
        if isinstance(util, dict):  # per GPU type
            util = util.get(self.gpu_type, next(iter(util.values()), None))
        if util is not None:
            return float(util)
        return min(1.0, self.memory_gib(job) / self.gpu_memory_gib)

    def accumulation_speed(self, job: Job, steps: int) -> float:
        """Solo speed with ``steps`` accumulation steps relative to none: t_iter(B, 1) / t_iter(B, s)."""
        if steps == 1:
            return 1.0
        key = (job.model, job.batch_size, job.num_gpus, steps)
        speed = self._speed.get(key)
        if speed is None:
            servers = min_servers(job.num_gpus, self.gpus_per_server)
            base, slow = (
                self.catalog.solo_iteration_time(
                    job.model, job.batch_size, job.num_gpus, self.gpu_type, servers, accumulation_steps=s
                )
                for s in (1, steps)
            )
            speed = self._speed[key] = base / slow
        if self.shadow is not None:
            servers = min_servers(job.num_gpus, self.gpus_per_server)
            self._note_fit(job, ("speed", *key), speed, lambda catalog, gpu: (
                catalog.solo_iteration_time(job.model, job.batch_size, job.num_gpus, gpu, servers)
                / catalog.solo_iteration_time(job.model, job.batch_size, job.num_gpus, gpu, servers,
                                              accumulation_steps=steps)))
        return speed

    def _note_fit(self, job: Job, key: tuple, value: object, packaged: Callable[[WorkloadCatalog, str], object]) -> None:
        """With a fitted model: ``job`` among :attr:`fit_changed` when ``value`` (from the fit) is not what
        the packaged catalog gives (``packaged(catalog, gpu_type)``; a workload it lacks: differs)."""
        differs = self._differs.get(key)
        if differs is None:
            catalog, gpu = self.shadow  # type: ignore[misc]
            try:
                differs = packaged(catalog, gpu) != value
            except (KeyError, ValueError):
                differs = True
            self._differs[key] = differs
        if differs:
            self.fit_changed.add(job.job_id)

    @staticmethod
    def _require_workload(job: Job) -> None:
        if job.model is None or job.batch_size != job.batch_size:
            raise SharingError(
                f"job {job.job_id} has no workload (model, batch_size): sharing policies need an annotated"
                " trace (replay with --annotate)"
            )
