"""Append-only Parquet profile store (Castor §7: profiled trace data for the predictor
and the simulator).

Layout: ``DIR/records/<config_key>.parquet`` -- one file per measured configuration
(one row for a solo run, two for a pair), written to a ``.tmp-*`` name and
``os.replace``d into place, so a killed sweep leaves either the whole file or nothing.
``--force`` re-measurements are appended as ``<config_key>.<n>.parquet``; readers get
every row and ``latest()`` keeps the newest per (config_key, job).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .indicators import ALL_INDICATORS

SCHEMA_VERSION = 1
STATUSES = ("ok", "oom", "timeout", "error")


def default_dir() -> Path:
    """``$SCHEDLAB_HOME/profiles`` (SCHEDLAB_HOME defaults to ``./.schedlab``)."""
    return Path(os.environ.get("SCHEDLAB_HOME", ".schedlab")) / "profiles"


@dataclass
class ProfileRecord:
    """One job's measurement in one run (solo, or one member of a pair)."""

    config_key: str
    sweep: str
    kind: str  # solo | pair | solo-mps (alone under an MPS cap: Gimbal's σ)
    workload: str
    size: str
    batch_size: int
    accum_steps: int
    num_gpus: int
    device: str
    status: str = "ok"
    message: Optional[str] = None
    amp: bool = False
    job: int = 0  # 0 or 1 within a pair
    partner: Optional[str] = None
    partner_batch_size: Optional[int] = None
    mode: str = "solo"  # solo | timeslice | mps
    share: Optional[float] = None  # MPS active-thread percentage
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    schema_version: int = SCHEMA_VERSION
    created_at: float = field(default_factory=time.time)
    host: str = field(default_factory=socket.gethostname)
    gpu_indices: Optional[str] = None
    gpu_model: Optional[str] = None
    gpu_uuid: Optional[str] = None
    driver_version: Optional[str] = None
    torch_version: Optional[str] = None
    cuda_version: Optional[str] = None
    warmup_iters: Optional[int] = None
    measured_iters: Optional[int] = None
    iter_time_mean_s: Optional[float] = None
    iter_time_p50_s: Optional[float] = None
    iter_time_p95_s: Optional[float] = None
    iter_time_std_s: Optional[float] = None
    iter_time_min_s: Optional[float] = None
    iter_time_max_s: Optional[float] = None
    iter_times_s: list[float] = field(default_factory=list)
    throughput: Optional[float] = None  # samples/s over all GPUs
    peak_mem_bytes: Optional[int] = None
    mem_source: Optional[str] = None
    t_solo_s: Optional[float] = None
    xi: Optional[float] = None  # t_coloc / t_solo
    window_start: Optional[float] = None
    window_end: Optional[float] = None
    wall_s: Optional[float] = None
    indicator_source: Optional[str] = None
    indicators_missing: Optional[str] = None
    gpu_util_mean: Optional[float] = None  # NVML utilisation (0-1) over the window: Gimbal eq. 2's u_j
    sm_clock_mean_mhz: Optional[float] = None  # NVML SM clock over the window (DVFS: ξ < 1 happens)
    ind: dict[str, Optional[float]] = field(default_factory=dict)  # flattened to <name>_mean/_p95

    def to_row(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "ind"}
        for name in ALL_INDICATORS:
            for stat in ("mean", "p95"):
                row[f"{name.lower()}_{stat}"] = self.ind.get(f"{name.lower()}_{stat}")
        return row


_PA = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


def _schema() -> pa.Schema:
    fields = []
    hints = {f.name: f.type for f in dataclasses.fields(ProfileRecord)}
    for name, t in hints.items():
        if name == "ind":
            continue
        t = str(t)
        if t.startswith("list"):
            typ = pa.list_(pa.float64())
        else:
            base = t.replace("Optional[", "").rstrip("]")
            typ = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}.get(base, pa.string())
        fields.append(pa.field(name, typ))
    fields += [pa.field(f"{n.lower()}_{s}", pa.float64()) for n in ALL_INDICATORS for s in ("mean", "p95")]
    return pa.schema(fields, metadata={"schedlab_schema_version": str(SCHEMA_VERSION)})


SCHEMA = _schema()


class ProfileStore:
    """Directory of Parquet record files; one file per configuration run."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_dir()
        self.records = self.root / "records"
        self.records.mkdir(parents=True, exist_ok=True)
        for stale in self.records.glob(".tmp-*"):  # half-written files of a killed sweep
            stale.unlink(missing_ok=True)

    def _files(self) -> list[Path]:
        return sorted(p for p in self.records.glob("*.parquet") if not p.name.startswith("."))

    def has(self, config_key: str) -> bool:
        return (self.records / f"{config_key}.parquet").exists()

    def write(self, records: Iterable[ProfileRecord]) -> Path:
        """Atomically add the records of one configuration run."""
        recs = list(records)
        if not recs or len({r.config_key for r in recs}) != 1:
            raise ValueError("write() takes the records of exactly one configuration")
        for r in recs:
            if r.status not in STATUSES:
                raise ValueError(f"bad status {r.status!r}")
        key = recs[0].config_key
        dest, n = self.records / f"{key}.parquet", 0
        while dest.exists():
            n += 1
            dest = self.records / f"{key}.{n}.parquet"
        table = pa.Table.from_pylist([r.to_row() for r in recs], schema=SCHEMA)
        tmp = self.records / f".tmp-{key}-{uuid.uuid4().hex}.parquet"
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        if dest.exists():  # a concurrent writer won; keep ours as a further version
            dest = self.records / f"{key}.{uuid.uuid4().hex[:8]}.parquet"
        os.replace(tmp, dest)
        return dest

    def table(self) -> pa.Table:
        """All rows (every version) as one Arrow table; the empty table of the current schema when none."""
        files = self._files()
        if not files:
            return SCHEMA.empty_table()
        return pa.concat_tables([pq.read_table(p) for p in files], promote_options="default")

    def read(self) -> pd.DataFrame:
        """All rows (every version), in the current schema."""
        return self.table().to_pandas()

    def latest(self) -> pd.DataFrame:
        """Newest row per (config_key, job)."""
        return newest(self.read())

    def solo_time(self, config_key: str) -> Optional[float]:
        """Mean iteration time of a stored ok solo run, if any."""
        paths = sorted(self.records.glob(f"{config_key}*.parquet"), key=lambda p: p.stat().st_mtime)
        for p in reversed(paths):
            t = pq.read_table(p, columns=["status", "iter_time_mean_s"]).to_pylist()
            if t and t[0]["status"] == "ok":
                return t[0]["iter_time_mean_s"]
        return None

    def pack(self, dest: str | os.PathLike[str]) -> pa.Table:
        """Write every row into one zstd-compressed Parquet file (what travels back from a GPU node, and
        what ``data/profiles/<gpu>/`` holds); returns the rows written."""
        table = self.table()
        tmp = Path(f"{dest}.tmp{os.getpid()}")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, dest)
        return table

    def unpack(self, src: str | os.PathLike[str]) -> int:
        """Add the rows of a packed file (:meth:`pack`) as record files, one per configuration key not yet
        in this store; returns how many configurations were added (a packed store resumes)."""
        try:
            table = pq.read_table(src)
        except (OSError, pa.ArrowInvalid) as exc:
            raise ValueError(f"{src}: not a packed profile store ({exc})") from None
        missing = {"config_key", "status", "job"} - set(table.column_names)
        if missing:
            raise ValueError(f"{src}: not a packed profile store (no column {', '.join(sorted(missing))})")
        added = 0
        for key in sorted(set(table.column("config_key").to_pylist())):
            if not key or "/" in key or key.startswith("."):
                raise ValueError(f"{src}: config_key {key!r} is not a record file name")
            if self.has(key):
                continue
            tmp = self.records / f".tmp-{key}-{uuid.uuid4().hex}.parquet"
            pq.write_table(table.filter(pc.equal(table["config_key"], key)), tmp)
            os.replace(tmp, self.records / f"{key}.parquet")
            added += 1
        return added


def newest(df: pd.DataFrame) -> pd.DataFrame:
    """Newest row per (config_key, job) of a store frame."""
    if df.empty:
        return df
    return df.sort_values("created_at").groupby(["config_key", "job"], as_index=False).tail(1).reset_index(drop=True)


def read_profiles(path: str | os.PathLike[str], allow_empty: bool = False) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The newest rows of a profile store folder or of a packed store file (:meth:`ProfileStore.pack`,
    e.g. ``data/profiles/h200/profiles.parquet``), and its version (path, schema, record count, newest
    record time, a hash of the record names or of the file)."""
    path = Path(path)
    if path.is_file():
        try:
            df = newest(pq.read_table(path).to_pandas())
        except (OSError, pa.ArrowInvalid) as exc:
            raise ValueError(f"{path}: not a packed profile store ({exc})") from None
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        records = int(df["config_key"].nunique()) if "config_key" in df else 0
    elif path.is_dir():
        store = ProfileStore(path)
        df = store.latest()
        names = sorted(p.name for p in store._files())
        digest, records = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16], len(names)
    else:
        raise ValueError(f"profile store not found: {path}")
    if df.empty and not allow_empty:
        raise ValueError(f"profile store {path} has no records")
    return df, {"path": str(path), "schema_version": SCHEMA_VERSION, "records": records,
                "newest_created_at": float(df["created_at"].max()) if len(df) else None, "files_sha256": digest}
