"""dcgm-exporter client against recorded exporter text served on 127.0.0.1."""
from __future__ import annotations

import csv
import http.server
import math
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from schedlab.profiling.dcgm import (
    DcgmCollector,
    fetch,
    indicators_for,
    normalise_url,
    parse_metrics,
    select_gpus,
)
from schedlab.profiling.indicators import DCGM_FIELDS, GPU_INDICATORS

FIX = Path(__file__).parent / "fixtures" / "dcgm"
ROOT = Path(__file__).resolve().parent.parent
GPU1 = "GPU-7c2d9e5a-0b3e-6f82-c1d7-2a3b4c5d6e71"


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802
        if self.path != "/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def exporter() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"body": (FIX / "h100x4-custom-counters.txt").read_bytes()})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics", handler
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("name", ["h100x4-custom-counters.txt", "h100x4-custom-counters-lowercase-hostname.txt"])
def test_parse_both_hostname_spellings(name: str) -> None:
    s = parse_metrics((FIX / name).read_text())
    assert sorted(s.gpus) == ["0", "1", "2", "3"]
    g = s.gpus["1"]
    assert (g.uuid, g.model, g.host, g.driver, g.pci_bus_id) == (
        GPU1, "NVIDIA H100 80GB HBM3", "dgx-a07", "550.90.07", "00000000:2A:00.0")
    assert s.values["0"]["SMACT"] == pytest.approx(0.912345)
    assert s.values["0"]["NVLTX"] == pytest.approx(45123456789)
    assert set(s.values["0"]) == set(GPU_INDICATORS)
    assert parse_metrics((FIX / name).read_text(), hostname="other-node").gpus == {}


def test_select_by_index_and_uuid_and_average() -> None:
    s = parse_metrics((FIX / "h100x4-custom-counters.txt").read_text())
    assert select_gpus(s, ["0", GPU1, "7", "GPU-nope"]) == ["0", "1"]
    both = indicators_for(s, ["0", GPU1])
    assert both["SMACT"] == pytest.approx((0.912345 + 0.893001) / 2)
    assert both["PCIRX"] == pytest.approx((1523456789 + 1498765432) / 2)


def test_nan_and_absent_fields_are_missing_not_zero() -> None:
    s = parse_metrics((FIX / "h100x4-custom-counters.txt").read_text())
    g2 = indicators_for(s, ["2"])
    assert g2["FP16A"] is None and g2["NVLTX"] is None and g2["NVLRX"] is None
    assert g2["TENSO"] == 0.0  # a real zero stays a zero
    g3 = indicators_for(s, ["3"])
    assert g3["SMACT"] == 0.0
    d = indicators_for(parse_metrics((FIX / "h100x4-default-counters.txt").read_text()), ["0"])
    for k in ("SMACT", "SMOCC", "FP32A", "FP16A", "NVLTX", "NVLRX"):
        assert d[k] is None, k
    assert d["GRACT"] == pytest.approx(0.981234) and d["DRAMA"] == pytest.approx(0.387654)
    assert all(v is None for v in indicators_for(s, ["9"]).values())


def test_counter_family_keyed_by_family_name() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families((FIX / "h100x4-custom-counters.txt").read_text())}
    fam = fams["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
    assert fam.type == "counter" and fam.samples[0].name.endswith("_total")
    # a counter-typed indicator family still maps (the parser renames samples, not families)
    text = ("# HELP DCGM_FI_PROF_PCIE_TX_BYTES x\n# TYPE DCGM_FI_PROF_PCIE_TX_BYTES counter\n"
            'DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",UUID="GPU-x",hostname="h"} 42\n')
    assert parse_metrics(text).values["0"]["PCITX"] == 42.0


def test_counters_csv_turns_every_indicator_on() -> None:
    rows = [r for r in csv.reader((ROOT / "conf" / "dcgm-counters.csv").read_text().splitlines())
            if r and not r[0].startswith("#")]
    fields = {r[0].strip(): r[1].strip() for r in rows}
    assert all(len(r) >= 3 for r in rows)
    for name in DCGM_FIELDS.values():
        assert fields.get(name) == "gauge", name
    assert set(fields.values()) <= {"gauge", "counter"}


def test_http_scrape_and_collector(exporter: tuple[str, type[_Handler]]) -> None:
    url, handler = exporter
    assert "DCGM_FI_PROF_SM_ACTIVE" in fetch(url)
    assert normalise_url("127.0.0.1:9400") == "http://127.0.0.1:9400/metrics"
    col = DcgmCollector(url, gpus=[GPU1], interval_s=0.1)
    with col:
        time.sleep(0.35)
        handler.body = (FIX / "h100x4-default-counters.txt").read_bytes()  # exporter restarted with defaults
        time.sleep(0.3)
    assert not col.errors and len(col.samples) >= 4
    assert col.labels[0].index == "1" and col.labels[0].uuid == GPU1
    first, last = col.samples[0], col.samples[-1]
    assert first["SMACT"] == pytest.approx(0.893001) and last["SMACT"] is None
    mean, p95 = col.summary(col.times[0] - 1, col.times[-1] + 1)["SMACT"]
    assert mean == pytest.approx(0.893001) and p95 == pytest.approx(0.893001)  # missing samples skipped
    assert col.summary(col.times[-1] + 5, col.times[-1] + 6)["SMACT"] == (None, None)


def test_unreachable_exporter_records_missing() -> None:
    col = DcgmCollector("http://127.0.0.1:9/metrics", interval_s=0.1)
    col.start()
    time.sleep(0.15)
    col.stop()
    assert col.errors and all(s["SMACT"] is None for s in col.samples)
    m, p = col.summary(0, math.inf)["TENSO"]
    assert m is None and p is None


@pytest.mark.parametrize("name", ["h100x4-custom-counters.txt", "h100x4-default-counters.txt"])
def test_indicator_line_filter_is_lossless(name: str) -> None:
    from schedlab.profiling.dcgm import indicator_lines

    text = (FIX / name).read_text()
    full, small = parse_metrics(text), parse_metrics(indicator_lines(text))
    for sel in (["0"], ["1", "2"], ["3"]):
        assert indicators_for(full, sel) == indicators_for(small, sel)
