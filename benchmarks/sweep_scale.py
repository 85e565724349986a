"""Sweeps of thousands of replays: what one client costs per replay, and how many workers it can feed.

A load x seed x policy grid of small replays (default 5 loads x 50 seeds x 4 policies = 1,000; a 40-job
synthetic trace on a 2x8 cluster) runs through the experiment flow on a Dask cluster of separate
processes: a ``dask scheduler``, N ``dask worker`` processes (default 2), a real ``prefect server`` and a
real ``mlflow server`` (so that each part's CPU is its own). Prints

* the client's CPU time per replay (this process: the flow, its Dask client, the live comparison, the
  Prefect and MLflow clients; target at most 0.2 s), over the whole run and in the middle 80 % of the
  sweep (the cost of one more replay), and its resident memory at 10 %, 50 % and 90 % of the sweep
  (target: flat);
* the Prefect server's and the MLflow server's CPU per replay, the workers' CPU per replay (the replay,
  its logging and figures) and the wall time;
* the projection: the number of workers one client (and each server) can keep busy, = worker CPU per
  replay / its CPU per replay.

    python -m schedlab.benchmarks.sweep_scale [--loads 5] [--seeds 50] [--workers 2] [--jobs 40]

Each run uses a fresh experiment name and folder (nothing is skipped as already logged).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

POLICIES = ["fifo", "sjf", "srtf", "tiresias"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    """CPU seconds of a process and its descendants (user + system), living ones."""
    import psutil

    total = 0.0
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = proc.cpu_times()
                total += times.user + times.system
    return total


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 1e6


class Services:
    """The servers, the scheduler and the workers, each a process group of its own."""

    def __init__(self, folder: Path, workers: int) -> None:
        self.folder, self.procs = folder, {}
        bin_dir = Path(sys.executable).parent
        env = {**os.environ, "PREFECT_HOME": str(folder / "prefect-server")}
        env.pop("PREFECT_API_URL", None)
        ports = {name: free_port() for name in ("mlflow", "prefect", "dask")}
        self.mlflow = f"http://127.0.0.1:{ports['mlflow']}"
        self.prefect = f"http://127.0.0.1:{ports['prefect']}/api"
        self.scheduler = f"tcp://127.0.0.1:{ports['dask']}"
        self.start("mlflow", [bin_dir / "mlflow", "server", "--host", "127.0.0.1", "--port", ports["mlflow"], "--workers",
                              "1", "--backend-store-uri", f"sqlite:///{folder}/mlflow.db",
                              "--artifacts-destination", folder / "artifacts"], env)
        self.start("prefect", [bin_dir / "prefect", "server", "start", "--host", "127.0.0.1", "--port", ports["prefect"]], env)
        self.start("scheduler", [bin_dir / "dask", "scheduler", "--host", "127.0.0.1", "--port", ports["dask"],
                                 "--no-dashboard"], env)
        worker_env = {**env, "PREFECT_API_URL": self.prefect, "MLFLOW_TRACKING_URI": self.mlflow}
        for i in range(workers):
            self.start(f"worker{i}", [bin_dir / "dask", "worker", self.scheduler, "--nthreads", "1", "--no-dashboard"],
                       worker_env)
        for url in (self.mlflow + "/health", self.prefect + "/health"):
            self.wait(url)
        from distributed import Client

        with Client(self.scheduler, timeout=60, set_as_default=False) as client:
            client.wait_for_workers(workers, timeout=120)

    def start(self, name: str, args: list, env: dict) -> None:
        log = open(self.folder / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen([str(a) for a in args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, cwd=self.folder)

    def wait(self, url: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(url, timeout=2):
                    return
            time.sleep(0.5)
        sys.exit(f"{url} did not answer in {timeout} s (logs in {self.folder})")

    def cpu(self) -> dict[str, float]:
        workers = sum(cpu_s(p.pid) for name, p in self.procs.items() if name.startswith("worker"))
        return {"workers": workers, "prefect": cpu_s(self.procs["prefect"].pid),
                "mlflow": cpu_s(self.procs["mlflow"].pid), "scheduler": cpu_s(self.procs["scheduler"].pid)}

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)


def write_config(folder: Path, name: str, loads: int, seeds: int, jobs: int) -> Path:
    path = folder / f"{name}.yaml"
    load_list = ", ".join(f"{0.5 + 0.5 * i:g}" for i in range(loads))
    path.write_text(
        f"name: {name}\nbaseline: fifo\nseeds: [{', '.join(str(s) for s in range(seeds))}]\n"
        f"traces: [{{name: synthetic, format: synthetic, options: {{num_jobs: {jobs}, load: [{load_list}]}}}}]\n"
        f"clusters: [2x8]\npolicies: [{', '.join(POLICIES)}]\n")
    return path


class Sampler:
    """The client's resident memory every half second; read at 10 %, 50 % and 100 % of the sweep's wall time
    (the replays finish at a steady rate: the shares of time are shares of replays)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []  # (seconds since start, RSS MB, CPU s)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        started = time.perf_counter()
        while not self.stop.wait(0.5):
            self.samples.append((time.perf_counter() - started, rss_mb(), self_cpu_s()))

    def at(self, share: float) -> tuple[float, float]:
        """(RSS MB, CPU s) when ``share`` of the sweep's wall time had passed."""
        end = self.samples[-1][0]
        return next((mb, cpu) for t, mb, cpu in self.samples if t >= share * end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=40, help="jobs in the synthetic trace of each replay")
    parser.add_argument("--keep", action="store_true", help="keep the folder (servers' stores and logs)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="schedlab-sweep-"))
    os.environ.update(SCHEDLAB_HOME=str(folder / "home"), SCHEDLAB_CODE_VERSION="benchmark")
    services = Services(folder, args.workers)
    os.environ.update(MLFLOW_TRACKING_URI=services.mlflow, PREFECT_API_URL=services.prefect)
    from schedlab.settings import Settings

    Settings.from_env().apply().prefect_ready()
    sampler = Sampler()
    config = write_config(folder, f"sweep-{time.strftime('%H%M%S')}", args.loads, args.seeds, args.jobs)
    try:
        from schedlab.flows.experiment import run_experiment

        sampler.thread.start()
        before, cpu0, started = services.cpu(), self_cpu_s(), time.perf_counter()
        report = run_experiment(config, dask_address=services.scheduler, table_every=10**9)
        wall, client = time.perf_counter() - started, self_cpu_s() - cpu0
        after = services.cpu()
        sampler.stop.set()
    finally:
        from schedlab.flows.api_server import flush_api_logs

        flush_api_logs()  # the flow's last log lines, before the Prefect server stops
        services.stop()
    assert not report["failures"], report["failures"]
    used = {k: after[k] - before[k] for k in after}
    n = report["replays_run"]
    print(f"\n{n:,} replays ({args.loads} loads x {args.seeds} seeds x {len(POLICIES)} policies, {args.jobs}-job"
          f" synthetic trace, 2x8) on {args.workers} Dask workers, {os.cpu_count()} CPUs here")
    print(f"  wall: {wall:.0f} s ({wall / n:.3f} s per replay)")
    print(f"  client CPU: {client:.1f} s = {client / n:.3f} s per replay (target <= 0.2)")
    steady = (sampler.at(0.9)[1] - sampler.at(0.1)[1]) / (0.8 * n)
    print(f"  client CPU in the sweep's middle 80 % (start-up and the final comparison left out): {steady:.3f} s per"
          " replay")
    marks = ", ".join(f"{int(share * 100)} %: {sampler.at(share)[0]:.0f} MB" for share in (0.1, 0.5, 0.9))
    print(f"  client memory at 10/50/90 % of the sweep: {marks}; peak {max(s[1] for s in sampler.samples):.0f} MB")
    for name in ("workers", "prefect", "mlflow", "scheduler"):
        print(f"  {name} CPU: {used[name]:.1f} s = {used[name] / n:.3f} s per replay")
    per_replay = used["workers"] / n
    for name, cost in (("client", steady), ("Prefect server", used["prefect"] / n),
                       ("MLflow server", used["mlflow"] / n), ("Dask scheduler", used["scheduler"] / n)):
        print(f"  workers one {name} can keep busy: {per_replay / cost:.0f} (worker CPU per replay / its CPU per replay)")
    if args.keep:
        print(f"data: {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
