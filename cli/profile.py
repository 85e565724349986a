"""``schedlab profile``: run a profiling sweep into the profile store (Castor §7)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from schedlab import checks

from schedlab.profiling.collectors import MIN_INTERVAL_S


def _gpus(v: str) -> list[str]:
    out = [x.strip() for x in v.split(",") if x.strip()]
    if not out:
        raise argparse.ArgumentTypeError("--gpus needs at least one index or UUID")
    return out


def register(subparsers: Any) -> None:
    """Add the ``profile`` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser("profile", help="run a profiling sweep (solo and co-located pairs)",
                              description="Run a profiling sweep into the append-only Parquet profile store.")
    p.add_argument("--sweep", required=True, help="sweep name in conf/sweeps/ (smoke, nightly) or a YAML path")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default=None,
                   help="where the workloads run (default: the sweep's, else auto)")
    p.add_argument("--dcgm-url", default=None, help="dcgm-exporter metrics URL, e.g. http://localhost:9400/metrics")
    p.add_argument("--gpus", type=_gpus, default=None, help="GPU indices or UUIDs to use/record, e.g. 0,1")
    p.add_argument("--out", type=Path, default=None, help="store directory (default $SCHEDLAB_HOME/profiles)")
    p.add_argument("--force", action="store_true", help="re-measure configurations already in the store")
    p.add_argument("--interval", type=checks.number(float, ge=MIN_INTERVAL_S), default=None,
                   help=f"collector sampling interval in s (default: the sweep's, else 1; min {MIN_INTERVAL_S})")
    p.add_argument("--timeout", type=checks.number(float, gt=0), default=None,
                   help="per-configuration timeout in s (> 0; default: the sweep's)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point for ``schedlab profile``; returns the exit code."""
    from schedlab.profiling import device as D
    from schedlab.profiling.execute import Context
    from schedlab.profiling.profiler import Profiler
    from schedlab.profiling.store import ProfileStore
    from schedlab.profiling.sweep import SweepError, load

    try:
        sweep = load(args.sweep)
    except (FileNotFoundError, SweepError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    interval = args.interval if args.interval is not None else sweep.interval_s
    if interval < MIN_INTERVAL_S:
        print(f"error: --interval must be >= {MIN_INTERVAL_S}", file=sys.stderr)
        return 2
    try:
        device = D.resolve(args.device or sweep.device)
    except (RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    gpus = args.gpus or (D.visible_gpus() if device == "cuda" else ["0"])
    store = ProfileStore(args.out)
    ctx = Context(device=device, gpus=gpus, dcgm_url=args.dcgm_url, interval_s=interval)
    prof = Profiler(store, ctx, timeout_s=args.timeout or sweep.timeout_s, sweep_name=sweep.name)
    counts = prof.run(sweep, force=args.force, progress=not args.no_progress)
    summary = ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "nothing to do"
    print(f"sweep {sweep.name}: {summary}; store {store.root}")
    return 0

