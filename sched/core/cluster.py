"""Clusters: the YAML spec (``conf/clusters/``) and the runtime GPU state the engine mutates.

A cluster is a list of pools (``training``, ``inference``); a pool is ``servers`` identical servers
with ``gpus_per_server`` GPUs of one type. GPUs are numbered 0..N-1, server by server, so a GPU's
server is a table look-up and a placement is a tuple of GPU ids.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator

from schedlab import conf
from schedlab.checks import load_yaml, validation_message
from schedlab.sched.strict import UserModel

CLUSTERS_DIR = conf.path("clusters")
_SHORTHAND = re.compile(r"^(?P<servers>-?\d+)x(?P<gpus>-?\d+)(?::(?P<type>[A-Za-z0-9_-]+))?$")
#: the GPU types a cluster may name (those the profiler names, ``profiling.fitting.gpu_type_of``, and
#: ``cpu``, its type for CPU runs, which fitted models of CPU rehearsals cover), with their memory (GiB)
#: for the shorthand ``NxG:type`` (a YAML spec states ``gpu_memory_gb``). A type the workload catalog
#: lacks runs at its reference type's iteration times unless a fitted model covers it (the replay's
#: ``iteration_time_note`` says so).
GPU_MEMORY_GB: dict[str, float] = {
    "k80": 12, "p100": 16, "v100": 32, "t4": 16, "a100": 80, "a40": 48, "a6000": 48,
    "rtx2080ti": 11, "h100": 80, "h200": 141, "gh200": 96, "a10": 24, "l4": 24, "l40": 48, "l40s": 48,
    "rtx3090": 24, "rtx4090": 24, "cpu": 32,
}
DEFAULT_GPU_TYPE = "v100"
#: the pools a cluster may have: training jobs run on ``training``; ``inference`` lends servers (Lyra)
POOL_NAMES = ("training", "inference")
#: size limits, checked before anything is allocated (the engine keeps a few hundred bytes per GPU)
MAX_SERVERS = 10_000  # servers in one pool
MAX_GPUS_PER_SERVER = 128
MAX_GPUS = 100_000  # GPUs of all pools together
MAX_GPU_MEMORY_GB = 1024


class ClusterError(ValueError):
    pass


class PoolSpec(UserModel):
    """``servers`` identical servers of ``gpus_per_server`` GPUs of ``gpu_type`` (a known type)."""

    model_config = ConfigDict(allow_inf_nan=False)

    name: Literal["training", "inference"] = "training"
    servers: int = Field(ge=1, le=MAX_SERVERS)
    gpus_per_server: int = Field(ge=1, le=MAX_GPUS_PER_SERVER)
    gpu_type: str = DEFAULT_GPU_TYPE
    gpu_memory_gb: float = Field(default=32, gt=0, le=MAX_GPU_MEMORY_GB)

    @field_validator("gpu_type")
    @classmethod
    def _gpu_type(cls, value: str) -> str:
        if value.lower() not in GPU_MEMORY_GB:
            raise ValueError(f"unknown GPU type {value!r}; known: {', '.join(GPU_MEMORY_GB)}")
        return value.lower()


class ClusterSpec(UserModel):
    """A named cluster: a ``training`` pool and, for loaning, an ``inference`` pool; within the size limits."""

    name: str = Field(min_length=1)
    pools: list[PoolSpec] = Field(min_length=1)

    @field_validator("pools")
    @classmethod
    def _pools(cls, pools: list[PoolSpec]) -> list[PoolSpec]:
        names = [p.name for p in pools]
        repeated = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if repeated is not None:
            raise ValueError(f"duplicate pool name {repeated!r}: each of {', '.join(POOL_NAMES)} at most once")
        if "training" not in names:
            raise ValueError(f"no pool named 'training' (the pool training jobs run on); pools: {', '.join(names)}")
        total = sum(p.servers * p.gpus_per_server for p in pools)
        if total > MAX_GPUS:
            raise ValueError(f"{total:,} GPUs in all (servers x gpus_per_server), above the limit of {MAX_GPUS:,}")
        return pools

    @property
    def total_gpus(self) -> int:
        return sum(p.servers * p.gpus_per_server for p in self.pools)

    @property
    def training_pool(self) -> PoolSpec:
        """The pool training jobs are placed on."""
        return self.pool("training")

    def pool(self, name: str) -> PoolSpec:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(f"cluster {self.name!r} has no pool {name!r} (pools: {[p.name for p in self.pools]})")

    def lending_pool(self) -> PoolSpec:
        """The pool lent to training (Lyra): ``inference``, with the training pool's GPUs per server."""
        names = [p.name for p in self.pools]
        if "inference" not in names:
            raise ClusterError(f"cluster {self.name!r} has no 'inference' pool to lend from"
                               f" (pools: {', '.join(names)})")
        pool, training = self.pool("inference"), self.training_pool
        if pool.gpus_per_server != training.gpus_per_server:
            raise ClusterError(f"cluster {self.name!r}: the inference pool has {pool.gpus_per_server} GPUs per"
                               f" server, the training pool {training.gpus_per_server}; loaning needs the same")
        return pool


def available_clusters() -> list[str]:
    return sorted(p.stem for p in CLUSTERS_DIR.glob("*.yaml"))


def load_cluster(ref: str | Path) -> ClusterSpec:
    """A cluster by shipped name (``castor-sim``), YAML path, or shorthand ``NxG[:type]`` (``16x4:v100``).

    Raises :class:`ClusterError` naming the file (or the shorthand) and the field."""
    text = str(ref)
    match = _SHORTHAND.match(text)
    if match:
        gpu_type = (match["type"] or DEFAULT_GPU_TYPE).lower()
        pool = {"servers": int(match["servers"]), "gpus_per_server": int(match["gpus"]), "gpu_type": gpu_type,
                **({"gpu_memory_gb": GPU_MEMORY_GB[gpu_type]} if gpu_type in GPU_MEMORY_GB else {})}
        try:
            return ClusterSpec(name=text, pools=[PoolSpec.model_validate(pool)])
        except ValidationError as err:
            raise ClusterError(f"cluster {text!r}: {validation_message(err)}") from None
    path = Path(text)
    if not path.is_file() and not path.suffix and (CLUSTERS_DIR / f"{text}.yaml").is_file():
        path = CLUSTERS_DIR / f"{text}.yaml"
    if path.is_dir():
        raise ClusterError(f"{path}: a folder, not a cluster file (give a cluster YAML file, a shipped name"
                           " or NxG[:type])")
    if not path.is_file():
        raise ClusterError(
            f"unknown cluster {text!r}: not a file, not a shipped cluster ({', '.join(available_clusters())}),"
            " and not the shorthand NxG[:type] (e.g. 64x8, 16x4:v100)"
        )
    try:
        data = load_yaml(path.read_text())
    except yaml.YAMLError as err:
        raise ClusterError(f"{path}: not valid YAML: {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ClusterError(f"{path}: cannot read the cluster file ({err})") from None
    if not isinstance(data, dict):
        raise ClusterError(f"{path}: expected a mapping with name and pools, got {type(data).__name__}")
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as err:
        raise ClusterError(f"{path}: invalid cluster spec: {validation_message(err)}") from None


class ClusterState:
    """Who holds which GPU, for one pool of a cluster (the training pool by default).

    Free GPUs are kept as one stack per server, so taking or returning a GPU is O(1) and a placement
    costs O(servers), never O(GPUs). ``holders[g]`` lists the jobs on GPU ``g`` (at most two, Castor
    eq. 7); ``single_gpus`` counts GPUs that hold exactly one job (Castor Alg. 1's G_OJ) and
    ``double_gpus`` those that hold two. ``servers_with_free[n]`` is a bit mask of the servers with
    exactly ``n`` free GPUs (bit ``s`` for server ``s``): a placement finds its server in O(GPUs per
    server) bit operations.
    """

    def __init__(self, spec: ClusterSpec, pool: str = "training") -> None:
        self.spec = spec
        self.pool = spec.training_pool if pool == "training" else spec.pool(pool)
        self.gpus_per_server = self.pool.gpus_per_server
        self.num_servers = self.pool.servers
        self.total_gpus = self.num_servers * self.gpus_per_server
        self.gpu_memory_gib = self.pool.gpu_memory_gb
        self.free_by_server: list[list[int]] = [
            list(range((s + 1) * self.gpus_per_server - 1, s * self.gpus_per_server - 1, -1))
            for s in range(self.num_servers)
        ]
        self.free_gpus = self.total_gpus
        self.servers_with_free: list[int] = [0] * (self.gpus_per_server + 1)
        self.servers_with_free[self.gpus_per_server] = (1 << self.num_servers) - 1
        self.holders: list[list] = [[] for _ in range(self.total_gpus)]
        self.single_gpus = 0
        self.double_gpus = 0
        self.single_by_server: list[int] = [0] * self.num_servers

    def take_from_servers(self, counts: list[tuple[int, int]], job) -> tuple[int, ...]:
        """Give ``job`` ``n`` free GPUs from each ``(server, n)``; returns the GPU ids.

        GPUs from one server (most starts in a trace replay) take a fast path with the same effect as
        :meth:`_take_general` (tests/test_cluster_fast_paths.py compares them)."""
        if len(counts) != 1 or counts[0][1] < 1:
            return self._take_general(counts, job)
        server, n = counts[0]
        stack = self.free_by_server[server]
        free = len(stack)
        if n > free:
            raise ValueError(f"server {server} has {free} free GPUs, {n} asked")
        bit = 1 << server
        masks = self.servers_with_free
        masks[free] ^= bit
        masks[free - n] |= bit
        self.single_by_server[server] += n
        self.free_gpus -= n
        self.single_gpus += n
        holders = self.holders
        if n == 1:
            g = stack.pop()
            holders[g] = [job]
            return (g,)
        got = stack[-n:]
        del stack[-n:]
        for g in got:
            holders[g] = [job]
        return tuple(got)

    def _take_general(self, counts: list[tuple[int, int]], job) -> tuple[int, ...]:
        taken: list[int] = []
        holders, masks = self.holders, self.servers_with_free
        for server, n in counts:
            stack = self.free_by_server[server]
            free = len(stack)
            if n > free:
                raise ValueError(f"server {server} has {free} free GPUs, {n} asked")
            got = stack[-n:]
            del stack[-n:]
            bit = 1 << server
            masks[free] ^= bit
            masks[len(stack)] |= bit
            for g in got:
                holders[g] = [job]
            self.single_by_server[server] += n
            taken += got
        self.free_gpus -= len(taken)
        self.single_gpus += len(taken)
        return tuple(taken)

    def set_free(self, server: int, gpus: list[int]) -> None:
        """Replace ``server``'s free stack (a pool lending a server or taking it back), masks included."""
        bit = 1 << server
        self.servers_with_free[len(self.free_by_server[server])] &= ~bit
        self.free_by_server[server] = gpus
        self.servers_with_free[len(gpus)] |= bit

    def share(self, gpus: tuple[int, ...], job) -> None:
        """Put ``job`` beside the one job on each of ``gpus``."""
        for g in gpus:
            if len(self.holders[g]) != 1:
                raise ValueError(f"GPU {g} holds {len(self.holders[g])} jobs; sharing needs exactly one")
        for g in gpus:
            self.holders[g].append(job)
            self.single_by_server[g // self.gpus_per_server] -= 1
        self.single_gpus -= len(gpus)
        self.double_gpus += len(gpus)

    def release(self, job, gpus) -> None:
        """Take ``job`` off ``gpus`` (some or all of its GPUs); a GPU left empty goes back to its server's
        free stack.

        GPUs on one server that only ``job`` holds (most stops in a trace replay) take a fast path with
        the same effect as :meth:`_release_general` (tests/test_cluster_fast_paths.py compares them)."""
        if not gpus:
            return
        holders, per = self.holders, self.gpus_per_server
        server = gpus[0] // per
        for g in gpus:
            held = holders[g]
            if len(held) != 1 or held[0] is not job or g // per != server:
                return self._release_general(job, gpus)
        for g in gpus:
            holders[g].pop()
        n = len(gpus)
        stack = self.free_by_server[server]
        free = len(stack)
        bit = 1 << server
        masks = self.servers_with_free
        masks[free] ^= bit  # as n steps of one GPU each would leave them
        masks[free + n] |= bit
        stack.extend(gpus)
        self.single_by_server[server] -= n
        self.single_gpus -= n
        self.free_gpus += n

    def _release_general(self, job, gpus) -> None:
        per, single_by_server, free_by_server = self.gpus_per_server, self.single_by_server, self.free_by_server
        masks = self.servers_with_free
        freed = 0
        for g in gpus:
            holders = self.holders[g]
            holders.remove(job)
            server = g // per
            if holders:
                self.double_gpus -= 1
                self.single_gpus += 1
                single_by_server[server] += 1
            else:
                freed += 1
                single_by_server[server] -= 1
                stack = free_by_server[server]
                bit = 1 << server
                masks[len(stack)] ^= bit
                masks[len(stack) + 1] |= bit
                stack.append(g)
        self.single_gpus -= freed
        self.free_gpus += freed

    def single_gpu_ids(self):
        """GPUs holding exactly one job, in id order (skips servers with none)."""
        per = self.gpus_per_server
        for server, count in enumerate(self.single_by_server):
            if count:
                for g in range(server * per, (server + 1) * per):
                    if len(self.holders[g]) == 1:
                        yield g
