"""The CPU sweep for real: solo + CPU-sharing pair into the store, dcgm-exporter
indicators end to end, skip on re-run, SIGKILL-and-resume, timeout/error/oom records."""
from __future__ import annotations

import argparse
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest
from schedlab.cli import profile as cli
from schedlab.profiling.execute import Context, outcome
from schedlab.profiling.profiler import Profiler
from schedlab.profiling.store import ProfileStore
from schedlab.profiling.sweep import PairConfig, SoloConfig, load

FIX = Path(__file__).parent / "fixtures" / "dcgm"
SWEEP = """name: {name}
device: cpu
size: tiny
warmup: 1
iters: 4
min_seconds: {min_s}
threads: 1
timeout_s: 60
collect: {{interval_s: 0.1}}
solo:
  workloads: {workloads}
  batch: {batch}
{pair}"""


@pytest.fixture(scope="module")
def exporter_url() -> Iterator[str]:
    body = (FIX / "h100x4-custom-counters.txt").read_bytes()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    srv.shutdown()


def _cli(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers(dest="cmd", required=True))
    args = ap.parse_args(argv)
    return int(args.func(args))


@pytest.mark.slow
def test_smoke_sweep_solo_and_pair_with_dcgm(tmp_path: Path, exporter_url: str) -> None:
    y = tmp_path / "mini.yaml"
    y.write_text(SWEEP.format(name="mini", min_s=0.4, workloads="[cifar10, ncf]", batch="[4]",
                              pair="pair:\n  workloads: [[cifar10, ncf]]\n  batch: [4]\n  modes: [timeslice]\n"))
    out = tmp_path / "store"
    argv = ["profile", "--sweep", str(y), "--out", str(out), "--dcgm-url", exporter_url, "--no-progress"]
    assert _cli(argv) == 0
    df = ProfileStore(out).read()
    assert len(df) == 4 and set(df.status) == {"ok"}
    solo, pair = df[df.kind == "solo"], df[df.kind == "pair"]
    assert sorted(solo.workload) == ["cifar10", "ncf"]
    assert sorted(zip(pair.workload, pair.partner)) == [("cifar10", "ncf"), ("ncf", "cifar10")]
    assert set(pair["mode"]) == {"timeslice"} and pair.config_key.nunique() == 1
    for _, r in pair.iterrows():
        s = solo[solo.workload == r.workload].iloc[0]
        assert r.t_solo_s == pytest.approx(s.iter_time_mean_s)
        assert r.xi == pytest.approx(r.iter_time_mean_s / s.iter_time_mean_s) and r.xi > 0
    for _, r in df.iterrows():  # GPU 0 of the exporter, recorded for a CPU run
        assert r.measured_iters >= 4 and len(r.iter_times_s) == r.measured_iters
        assert r.throughput > 0 and r.peak_mem_bytes > 0 and r.window_end > r.window_start
        assert r.smact_mean == pytest.approx(0.912345) and r.nvltx_p95 == pytest.approx(45123456789)
        assert r.gpu_uuid == "GPU-3b1e8c4f-9a2d-5e71-b0c6-1f2a3d4e5f60" and r.gpu_model == "NVIDIA H100 80GB HBM3"
        assert r.driver_version == "550.90.07" and r.torch_version and r.device == "cpu"
        assert 0 <= r.cpu_mean <= 1 and pd.isna(r.indicators_missing) and r.indicator_source == "dcgm+host"
    # a re-run measures nothing
    t = time.time()
    assert _cli(argv) == 0 and len(ProfileStore(out).read()) == 4 and time.time() - t < 5


@pytest.mark.slow
def test_kill_and_resume_yields_each_config_once(tmp_path: Path) -> None:
    y = tmp_path / "kr.yaml"
    y.write_text(SWEEP.format(name="kr", min_s=1.0, workloads="[ncf]", batch="[2, 4, 8]", pair=""))  # 1 s each: killable mid-batch
    out = tmp_path / "store"
    cmd = [sys.executable, "-m", "schedlab.cli", "profile", "--sweep", str(y), "--out", str(out),
           "--no-progress"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not list((out / "records").glob("*.parquet")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the next configuration is mid-run
    p.send_signal(signal.SIGKILL)
    p.wait()
    done_before = len(list((out / "records").glob("*.parquet")))
    assert 1 <= done_before < 3
    time.sleep(0.3)
    assert subprocess.run(["pgrep", "-f", f"--result {tmp_path}"], capture_output=True).stdout == b""
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    df = ProfileStore(out).read()
    n_keys = len(load(str(y)).configs)
    assert n_keys == 3 and len(df) == 3 and df.config_key.nunique() == 3
    assert sorted(df.batch_size) == [2, 4, 8] and set(df.status) == {"ok"}
    assert not list((out / "records").glob(".tmp-*"))


@pytest.mark.slow
def test_timeout_error_and_mps_on_cpu_are_recorded(tmp_path: Path, exporter_url: str) -> None:
    store = ProfileStore(tmp_path / "s")
    ctx = Context(device="cpu", interval_s=0.1, work_dir=tmp_path / "w")
    gpu2 = Context(device="cpu", gpus=["2"], dcgm_url=exporter_url, interval_s=0.1, work_dir=tmp_path / "w")
    (rec,) = Profiler(store, gpu2).solo(SoloConfig("ncf", 4, warmup=1, iters=3))
    assert rec.status == "ok" and rec.gpu_indices == "2" and rec.ind["fp32a_mean"] == pytest.approx(0.330123)
    assert rec.ind["fp16a_mean"] is None and rec.indicators_missing == "FP16A,NVLTX,NVLRX"  # NaN -> missing
    (rec,) = Profiler(store, ctx, timeout_s=0.5).solo(SoloConfig("ncf", 4, iters=10**9))
    assert rec.status == "timeout" and "0.5" in (rec.message or "")
    (rec,) = Profiler(store, ctx, timeout_s=60).solo(SoloConfig("nosuch", 4))
    assert rec.status == "error" and "unknown workload" in (rec.message or "")
    recs = Profiler(store, ctx).pair(PairConfig(SoloConfig("ncf", 4), SoloConfig("ncf", 8), "mps", (30, 70)))
    assert [r.status for r in recs] == ["error", "error"] and "CUDA" in (recs[0].message or "")
    assert [r.share for r in recs] == [30, 70]


def test_oom_classification_from_a_real_process(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    with open(log, "wb") as f:
        p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stderr.write("
                              "'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\\n'); sys.exit(1)"],
                             stdout=f, stderr=subprocess.STDOUT)
        p.wait()
    res = outcome(p, tmp_path / "none.json", log, False, 10)
    assert res["status"] == "oom" and "out of memory" in res["message"]


def test_cli_register_and_bad_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["profile", "--sweep", "no-such-sweep"]) == 2
    assert "smoke" in capsys.readouterr().err
    s = load("smoke")
    assert s.device == "cpu" and any(isinstance(c, PairConfig) for c in s.configs)
    assert os.path.basename(str(load("nightly").configs[0].size)) == "full"
