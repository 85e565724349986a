"""Profile store: schema, atomic append-only writes, skip/force, reading."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from schedlab.profiling.store import SCHEMA, SCHEMA_VERSION, ProfileRecord, ProfileStore


def _rec(key: str, **kw: object) -> ProfileRecord:
    base: dict[str, object] = dict(sweep="t", kind="solo", workload="ncf", size="tiny", batch_size=4,
                                   accum_steps=1, num_gpus=1, device="cpu")
    base.update(kw)
    return ProfileRecord(config_key=key, **base)  # type: ignore[arg-type]


def test_write_read_roundtrip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    st = ProfileStore(tmp_path)
    r = _rec("k1", iter_times_s=[0.1, 0.2], iter_time_mean_s=0.15, ind={"smact_mean": 0.5, "smact_p95": None})
    path = st.write([r])
    assert path.parent == tmp_path / "records" and path.name == "k1.parquet"
    assert pq.read_schema(path).metadata[b"schedlab_schema_version"] == str(SCHEMA_VERSION).encode()
    df = st.read()
    assert list(df.columns) == SCHEMA.names
    row = df.iloc[0]
    assert row.schema_version == SCHEMA_VERSION and row.status == "ok"
    assert list(row.iter_times_s) == [0.1, 0.2] and row.smact_mean == 0.5
    assert row.smact_p95 != row.smact_p95  # missing is null/NaN, never 0
    assert st.has("k1") and not st.has("k2")
    assert st.solo_time("k1") == 0.15


def test_failed_and_pair_records(tmp_path) -> None:  # type: ignore[no-untyped-def]
    st = ProfileStore(tmp_path)
    st.write([_rec("oom1", status="oom", message="CUDA out of memory")])
    st.write([_rec("p", kind="pair", job=0, partner="bert", mode="mps", share=30.0, xi=1.4),
              _rec("p", kind="pair", job=1, workload="bert", partner="ncf", mode="mps", share=70.0, xi=1.1)])
    with pytest.raises(ValueError):
        st.write([_rec("a"), _rec("b")])
    with pytest.raises(ValueError):
        st.write([_rec("c", status="weird")])
    df = st.read()
    assert sorted(df.status) == ["ok", "ok", "oom"]
    assert st.solo_time("oom1") is None
    assert set(df[df.config_key == "p"].share) == {30.0, 70.0}


def test_append_only_versions_and_latest(tmp_path) -> None:  # type: ignore[no-untyped-def]
    st = ProfileStore(tmp_path)
    st.write([_rec("k", iter_time_mean_s=1.0, created_at=1.0)])
    st.write([_rec("k", iter_time_mean_s=2.0, created_at=2.0)])  # --force re-measure
    assert len(st.read()) == 2
    latest = st.latest()
    assert len(latest) == 1 and latest.iloc[0].iter_time_mean_s == 2.0


def test_stale_temp_files_are_ignored_and_removed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec_dir = tmp_path / "records"
    rec_dir.mkdir()
    (rec_dir / ".tmp-k-dead.parquet").write_bytes(b"PAR1 half written")
    st = ProfileStore(tmp_path)
    assert st.read().empty and not list(rec_dir.glob(".tmp-*"))


def test_default_dir(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SCHEDLAB_HOME", str(tmp_path / "home"))
    assert ProfileStore().root == tmp_path / "home" / "profiles"
