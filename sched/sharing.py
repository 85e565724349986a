"""What the engine asks when jobs share GPUs: ξ for a pair, memory per GPU, and the slowdown of
gradient accumulation (Castor §3.1-3.2). One object, built from the workload catalog, the cluster's
GPU type and an interference source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schedlab.sched.annotate import catalog_gpu_type
from schedlab.sched.cluster import ClusterSpec
from schedlab.sched.interference import InterferenceSource, make_interference
from schedlab.sched.job import Job
from schedlab.sched.workloads import WorkloadCatalog, default_catalog, min_servers

MAX_JOBS_PER_GPU = 2  # C = 2 (Castor eq. 7)


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

    @classmethod
    def for_cluster(cls, spec: ClusterSpec, interference: str | InterferenceSource | None = None,
                    catalog: WorkloadCatalog | None = None) -> SharingModel:
        """``catalog``: where iteration times come from (default: the packaged catalog; a fitted
        model's :class:`~schedlab.sched.workloads.FittedCatalog`)."""
        catalog = catalog or default_catalog()
        pool = spec.training_pool
        source = interference if not isinstance(interference, (str, type(None))) else make_interference(interference)
        return cls(source, catalog, catalog_gpu_type(catalog, pool.gpu_type), pool.gpu_memory_gb, pool.gpus_per_server)

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
        return speed

    @staticmethod
    def _require_workload(job: Job) -> None:
        if job.model is None or job.batch_size != job.batch_size:
            raise SharingError(
                f"job {job.job_id} has no workload (model, batch_size): sharing policies need an annotated"
                " trace (replay with --annotate)"
            )
