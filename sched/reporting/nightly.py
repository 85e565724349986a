"""The nightly flow's summary for Prefect's markdown artifact: per host what was profiled, per model the
version registered and its first metrics, the failures."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from schedlab.sched.reporting.markdown import text


def nightly_markdown(report: dict[str, Any], stamp: datetime) -> str:
    """The summary of a nightly ``report`` (:func:`schedlab.flows.nightly.nightly_profile`'s); the sweep's
    name, hosts, counts and error messages as text (:mod:`schedlab.sched.reporting.markdown`)."""
    lines = [f"## nightly {stamp:%Y-%m-%d}: sweep {text(report['sweep'])}"
             + (" (CPU fallback: no GPU worker)" if report["cpu_fallback_used"] else ""), "",
             "| host | configs | records merged | status |", "|---|---|---:|---|"]
    lines += [f"| {text(p.get('host', p.get('worker')))} | {text(p.get('counts', {}))} | {p.get('merged', 0)} |"
              f" {'FAILED: ' + text(p['error']) if 'error' in p else 'ok'} |" for p in report["profiles"]]
    lines += ["", "| model | version | metrics |", "|---|---|---|"]
    lines += [f"| {text(n)} | {text(f['model_uri'])} | "
              + ", ".join(f"{text(k)} {v:.3g}" for k, v in list(f["metrics"].items())[:6]) + " |"
              for n, f in report["fits"].items()]
    lines += [f"| {text(n)} | FAILED | {text(m)} |" for n, m in report["failures"].items() if n.startswith("fit ")]
    return "\n".join(lines) + "\n"
