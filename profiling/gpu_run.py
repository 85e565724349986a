"""The whole measurement on a lent GPU node in one call (``docs/how-to/gpu-node.md``).

    profiling/gpu_run.sh OUT [--sweep gpu-node] [--budget-s 540] [--resume PACKED] [--device cpu --size tiny]

1. machine facts (nvidia-smi, driver, torch, NVML/GPM support, whether an MPS control daemon starts and
   serves a capped client, DCGM) into ``OUT/facts.json``;
2. the sweep (``conf/sweeps/gpu-node.yaml``: phases in order of value) under a deadline ``--budget-s``
   after this process started: no configuration starts within ``--stop-margin-s`` of it and runners
   still working at it are killed, so the call ends by itself;
3. the store packed into ``OUT/profiles.parquet`` (every row, zstd) and ``OUT/summary.json``
   (counts, what is still pending, failures); ``gpu_run.sh`` adds ``OUT/run.log``.  Four files:
   within the node's eight.

A second call continues: ``--resume OUT_OF_THE_FIRST/profiles.parquet`` unpacks the earlier rows, and
configurations already measured are skipped.  Keys name the GPU model, not the host (a fresh node of
the same kind resumes; another kind measures anew).

Imports only what the node's image has (torch, numpy, pandas, pyarrow, pyyaml, tqdm, psutil,
nvidia-ml-py): no pydantic, xgboost, prefect, mlflow or dask.  Bottom layer: nothing of flows/tasks.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

from schedlab import checks

from .store import newest

STARTED = time.time()
#: what comes back from the node: at most 8 files of at most 16 MiB (device README, Limits)
MAX_FILES, MAX_FILE_BYTES = 8, 16 * 1024 * 1024
_MPS_CLIENT = ("import time, torch; t = time.time(); x = torch.randn(2048, 2048, device='cuda'); "
               "y = (x @ x).sum().item(); torch.cuda.synchronize(); print(round(time.time() - t, 3))")


def _cmd(argv: list[str], timeout_s: float = 30.0, env: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Run a command; its exit code, output (trimmed) and seconds, or why it could not run."""
    if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
        return {"ok": False, "error": f"{argv[0]}: not found on PATH"}
    t = time.time()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout_s:g}s", "seconds": round(time.time() - t, 2)}
    return {"ok": p.returncode == 0, "exit": p.returncode, "stdout": p.stdout[-6000:], "stderr": p.stderr[-2000:],
            "seconds": round(time.time() - t, 2)}


def torch_facts(device: str) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                           "cuda_available": torch.cuda.is_available()}
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        out.update(gpu=p.name, capability=f"{p.major}.{p.minor}", sm_count=p.multi_processor_count,
                   memory_gib=round(p.total_memory / 2**30, 1), gpus_visible=torch.cuda.device_count())
    return out


def nvml_facts() -> dict[str, Any]:
    """NVML, GPM support, and which indicators one pair of samples 0.5 s apart gives on GPU 0."""
    from .nvml import NvmlCollector, probe

    ok, why = probe()
    out: dict[str, Any] = {"available": ok, "detail": why}
    if not ok:
        return out
    try:
        c = NvmlCollector(["0"], 0.5)
        try:
            c.sample()
            time.sleep(0.5)
            s = c.sample()
            out.update(gpm=c.gpm[0], source=c.source, model=c.models[0], driver=c.driver,
                       indicators_read=sorted(k for k, v in s.items() if v is not None),
                       indicators_missing=sorted(k for k, v in s.items() if v is None))
        finally:
            c.close()
    except Exception as exc:  # recorded: the sweep then runs without NVML indicators
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def mps_facts(root: Path) -> dict[str, Any]:
    """Can an MPS control daemon start here, and does a client capped at 50 % run under it?"""
    from .mps import CONTROL, MpsDaemon, MpsError

    out: dict[str, Any] = {"control_binary": shutil.which(CONTROL)}
    if not out["control_binary"]:
        out.update(ok=False, error=f"{CONTROL} not on PATH")
        return out
    try:
        with MpsDaemon(root, ["0"]) as daemon:
            out["daemon_started"] = True
            client = _cmd([sys.executable, "-c", _MPS_CLIENT], 45, daemon.env(50))
            out["client"] = client
            out["ok"] = bool(client.get("ok"))
            if not out["ok"]:
                log = root / "log" / "control.log"
                out["control_log"] = log.read_text(errors="replace")[-2000:] if log.exists() else None
    except MpsError as exc:
        out.update(ok=False, daemon_started=False, error=str(exc))
    return out


def dcgm_facts() -> dict[str, Any]:
    out: dict[str, Any] = {b: shutil.which(b) for b in ("dcgmi", "nv-hostengine", "dcgm-exporter")}
    try:
        with urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=1) as r:
            out["exporter_9400"] = f"answers ({len(r.read())} bytes)"
    except Exception as exc:
        out["exporter_9400"] = f"no answer ({type(exc).__name__})"
    return out


def machine_facts(device: str, mps_root: Path) -> dict[str, Any]:
    """Everything worth knowing about the node before measuring; each probe's failure is a fact."""
    facts: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": socket.gethostname(),
        "kernel": platform.release(), "machine": platform.machine(), "cpus": os.cpu_count(),
        "python": sys.version.split()[0], "device": device,
        "nvidia_smi": _cmd(["nvidia-smi"]),
        "nvidia_smi_query": _cmd(["nvidia-smi", "--query-gpu=name,uuid,driver_version,memory.total,compute_mode,"
                                  "mig.mode.current,clocks.max.sm,power.limit", "--format=csv"]),
        "nvcc": _cmd(["nvcc", "--version"]),
        "dcgm": dcgm_facts(),
    }
    t = time.time()
    facts["torch"] = torch_facts(device)
    facts["torch"]["import_and_init_s"] = round(time.time() - t, 2)
    if device == "cuda":
        facts["nvml"] = nvml_facts()
        facts["mps"] = mps_facts(mps_root)
    else:
        facts["nvml"] = facts["mps"] = {"ok": False, "error": "not tried: --device cpu"}
    return facts


def pack(store: Any, out: Path, counts: dict[str, int], facts: dict[str, Any], key_host: str) -> dict[str, Any]:
    """``profiles.parquet`` and ``summary.json`` into ``out``; checks the node's limits on what returns."""
    packed = store.pack(out / "profiles.parquet")
    rows, df = packed.num_rows, newest(packed.to_pandas())
    failed = df[df.status != "ok"] if len(df) else df
    summary = {
        "counts_this_call": counts, "rows": rows, "key_host": key_host,
        "configurations": int(df.config_key.nunique()) if len(df) else 0,
        "by_kind_status": ({f"{k}/{s}": int(n) for (k, s), n in df.groupby(["kind", "status"]).size().items()}
                           if len(df) else {}),
        "failures": [f"{r.kind} {r.workload} b{r.batch_size} {r.mode} {r.share}: {r.status}: {str(r.message)[:300]}"
                     for r in failed.head(40).itertuples()],
        "wall_s": round(time.time() - STARTED, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "facts.json").write_text(json.dumps(facts, indent=1, default=str))
    files = [p for p in out.rglob("*") if p.is_file()]
    big = [f"{p.name} ({p.stat().st_size} bytes)" for p in files if p.stat().st_size > MAX_FILE_BYTES]
    if len(files) > MAX_FILES or big:
        print(f"warning: {out} holds {len(files)} files (max {MAX_FILES}); over {MAX_FILE_BYTES} bytes: {big}",
              file=sys.stderr)
    return summary


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_run", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the folder that comes back (at most 8 files)")
    ap.add_argument("--sweep", default="gpu-node", help="sweep name in conf/sweeps/ or a YAML path (default gpu-node)")
    ap.add_argument("--budget-s", type=checks.number(float, gt=10), default=540.0,
                    help="seconds from this process's start to the end of packing (default 540: a 600 s command)")
    ap.add_argument("--stop-margin-s", type=checks.number(float, ge=0), default=30.0,
                    help="no configuration starts this close to the measuring deadline (default 30)")
    ap.add_argument("--pack-margin-s", type=checks.number(float, ge=5), default=20.0,
                    help="seconds kept for packing after measuring stops (default 20)")
    ap.add_argument("--resume", type=Path, default=None, help="a profiles.parquet of an earlier call to continue")
    ap.add_argument("--store", type=Path, default=None, help="store folder (default: a new temporary one)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: the sweep's")
    ap.add_argument("--size", choices=["tiny", "full"], default=None,
                    help="model size for every configuration (default: the sweep's; tiny for a CPU rehearsal)")
    ap.add_argument("--threads", type=checks.count, default=None,
                    help="torch threads per runner (default: the sweep's; 1 for a CPU rehearsal on few cores)")
    ap.add_argument("--batch-size", type=checks.count, default=8, help="configurations per runner process (default 8)")
    args = ap.parse_args(argv)

    from . import device as D
    from .execute import Context
    from .profiler import Profiler
    from .store import ProfileStore
    from .sweep import SweepError, find, mapping, parse

    try:
        raw = mapping(find(args.sweep).read_text(), find(args.sweep))
        for key, value in (("size", args.size), ("threads", args.threads)):
            if value is not None:
                raw[key] = value
        sweep = parse(raw, find(args.sweep).stem)
        device = D.resolve(args.device or sweep.device)
    except (FileNotFoundError, SweepError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.resume is not None and not args.resume.is_file():
        print(f"error: --resume {args.resume}: no such file", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    store_dir = args.store or Path(tempfile.mkdtemp(prefix="schedlab-gpu-store-"))
    store = ProfileStore(store_dir)
    mps_root = Path(tempfile.mkdtemp(prefix="schedlab-mps-"))

    facts = machine_facts(device, mps_root)
    print(json.dumps({k: facts[k] for k in ("date_utc", "host", "kernel", "cpus", "python", "torch")}, default=str))
    print(facts["nvidia_smi"].get("stdout") or facts["nvidia_smi"].get("error"))
    print("nvml:", json.dumps(facts["nvml"], default=str))
    print("mps:", json.dumps({k: v for k, v in facts["mps"].items() if k != "control_log"}, default=str)[:1500])
    print("dcgm:", json.dumps(facts["dcgm"]))

    if args.resume is not None:
        try:
            print(f"resume: {store.unpack(args.resume)} configurations from {args.resume}")
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    model = facts["torch"].get("gpu") if device == "cuda" else "cpu"
    key_host = f"node:{model}"
    gpus = D.visible_gpus()[:1] if device == "cuda" else ["0"]
    ctx = Context(device=device, gpus=gpus, interval_s=sweep.interval_s, mps_root=mps_root,
                  mps=bool(facts["mps"].get("ok")), key_host=key_host)
    prof = Profiler(store, ctx, timeout_s=sweep.timeout_s, sweep_name=sweep.name, batch_size=args.batch_size)
    deadline = STARTED + args.budget_s - args.pack_margin_s
    print(f"sweep {sweep.name}: {len(sweep.configs)} configurations; measuring until "
          f"{deadline - STARTED:.0f}s (now {time.time() - STARTED:.0f}s)", flush=True)
    counts = prof.run(sweep, progress=False, deadline=deadline, stop_margin_s=args.stop_margin_s,
                      echo=lambda line: print(line, flush=True))
    summary = pack(store, args.out, dict(counts), facts, key_host)
    print("summary:", json.dumps({k: v for k, v in summary.items() if k != "failures"}))
    for line in summary["failures"][:10]:
        print("  failed:", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
