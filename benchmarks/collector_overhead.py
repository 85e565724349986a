"""How much does background indicator sampling slow a workload?  (target: < 1 %)

Runs the same runner subprocess (as a sweep does) with and without the collectors
sampling in the parent -- host (psutil), dcgm-exporter (a local server serving recorded
exporter text, when no --dcgm-url is given), and NVML when a GPU is present -- in
interleaved A/B order, and compares the medians over runs of each run's median iteration time.

    python -m schedlab.benchmarks.collector_overhead [--reps 5] [--seconds 4] [--threads 2]
"""
from __future__ import annotations

import argparse
import http.server
import os
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from schedlab.profiling import nvml
from schedlab.profiling.collectors import Collector, HostCollector
from schedlab.profiling.dcgm import DcgmCollector
from schedlab.profiling.device import resolve
from schedlab.profiling.execute import Job, launch, wait_all

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "dcgm" / "h100x4-custom-counters.txt"


def _serve(body: bytes) -> str:
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}/metrics"


def one_run(spec: dict, collectors: list[Collector], wd: Path, i: int) -> float:
    """Median iteration time of one runner process (robust to preemption by other tenants)."""
    res, log = wd / f"r{i}.json", wd / f"l{i}.txt"
    p = launch(Job([spec]), res, log, dict(os.environ), sys.executable)
    for c in collectors:
        c.start()
    try:
        if wait_all([p], 600, [res]) != "ok":
            raise RuntimeError("benchmark run timed out")
    finally:
        for c in collectors:
            c.stop()
    out = json.loads(res.read_text())["results"][0]
    if out["status"] != "ok":
        raise RuntimeError(out)
    return statistics.median(out["iter_times_s"])


def cpu_cost(cols: list[Collector], n: int = 200) -> float:
    """CPU seconds one sampling round of all collectors costs (incl. the local fixture
    server's side of the HTTP request, so an over-estimate for a real exporter)."""
    t0 = time.process_time()
    for _ in range(n):
        for c in cols:
            c._take()
    return (time.process_time() - t0) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="cifar10")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--size", default=None, help="tiny on CPU, full on GPU by default")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--intervals", default="1.0,0.1")
    ap.add_argument("--dcgm-url", default=None)
    a = ap.parse_args()
    dev = resolve(a.device)
    size = a.size or ("full" if dev == "cuda" else "tiny")
    spec = {"workload": a.workload, "batch": a.batch, "size": size, "device": dev, "threads": a.threads,
            "warmup": 5, "iters": 20, "min_seconds": a.seconds}
    url = a.dcgm_url or _serve(FIXTURE.read_bytes())
    has_nvml = nvml.probe()[0]
    wd = Path(tempfile.mkdtemp(prefix="schedlab-bench-"))
    print(f"device={dev} workload={a.workload}/{size} b={a.batch} threads={a.threads} "
          f"collectors=host+dcgm{'+nvml' if has_nvml else ''} reps={a.reps} {a.seconds:g}s/run")
    k = 0
    for interval in (float(x) for x in a.intervals.split(",")):
        off, on = [], []
        for _ in range(a.reps):
            cols: list[Collector] = [HostCollector(interval), DcgmCollector(url, ["0"], interval)]
            if has_nvml:
                cols.append(nvml.NvmlCollector(["0"], interval))
            for label, group in (("off", []), ("on", cols)):
                k += 1
                (off if label == "off" else on).append(one_run(spec, group, wd, k))
        m_off, m_on = statistics.median(off), statistics.median(on)
        spread = (max(off) - min(off)) / m_off * 100
        print(f"  off: {' '.join(f'{x * 1e3:.3f}' for x in off)}\n  on:  {' '.join(f'{x * 1e3:.3f}' for x in on)}")
        print(f"interval {interval:g}s: off {m_off * 1e3:.3f} ms/iter, on {m_on * 1e3:.3f} ms/iter, "
              f"overhead {100 * (m_on - m_off) / m_off:+.2f}% (run-to-run spread without collectors {spread:.1f}%)")
    cols = [HostCollector(1.0), DcgmCollector(url, ["0"], 1.0)] + ([nvml.NvmlCollector(["0"], 1.0)] if has_nvml else [])
    per_round = cpu_cost(cols)
    for c in cols:
        c.close()
    ncpu = os.cpu_count() or 1
    for interval in (float(x) for x in a.intervals.split(",")):
        frac = per_round / interval
        print(f"CPU cost: {per_round * 1e3:.3f} ms per sampling round -> at {interval:g}s {100 * frac:.3f}% of one core, "
              f"{100 * frac / ncpu:.3f}% of this {ncpu}-core host (upper bound on the slowdown of a CPU-bound workload)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
