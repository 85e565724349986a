"""dcgm-exporter client (Castor §6.1: the DCGM profiler indicators of Table 2).

Scrapes ``/metrics`` (default port 9400) and parses it with ``prometheus_client``'s
text parser.  Families are keyed by name (the parser adds ``_total`` to counter
*samples*, not to the family).  GPUs are selected by index (label ``gpu``) or UUID
(label ``UUID``); the host label is read as ``Hostname`` or ``hostname``.  A field
absent from the scrape, or NaN, is missing -- never 0.
"""
from __future__ import annotations

import math
import urllib.request
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from prometheus_client.parser import text_string_to_metric_families

from .collectors import DEFAULT_INTERVAL_S, Collector
from .indicators import DCGM_FIELDS, GPU_INDICATORS, Sample, mean_of

DEFAULT_URL = "http://localhost:9400/metrics"
_FIELD_TO_IND = {f: k for k, f in DCGM_FIELDS.items()}


@dataclass
class GpuLabels:
    """Identity of one GPU as labelled by dcgm-exporter."""

    index: str
    uuid: str
    model: str = ""
    host: str = ""
    driver: str = ""
    pci_bus_id: str = ""


@dataclass
class Scrape:
    """One parsed scrape: per-GPU indicator values and labels."""

    values: dict[str, dict[str, float]]  # gpu index -> indicator -> value (NaN kept)
    gpus: dict[str, GpuLabels]  # gpu index -> labels


def normalise_url(url: str) -> str:
    """Accept ``host:port``, ``http://host:port`` or a full ``…/metrics`` URL."""
    if "://" not in url:
        url = "http://" + url
    scheme, rest = url.split("://", 1)
    if "/" not in rest:
        rest += "/metrics"
    return f"{scheme}://{rest}"


def family_key(name: str) -> str:
    """Family name without a counter ``_total`` suffix (either case)."""
    return name[:-6] if name.lower().endswith("_total") and name[:-6] in DCGM_FIELDS.values() else name


_WANTED = set(DCGM_FIELDS.values()) | {f + "_total" for f in DCGM_FIELDS.values()}


def indicator_lines(text: str) -> str:
    """Only the lines of the eleven indicator families (the text parser costs ~20 us
    per line; a full 8-GPU scrape has several hundred lines)."""
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[2] in _WANTED:
                keep.append(line)
        elif line.split("{", 1)[0].split(" ", 1)[0] in _WANTED:
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_metrics(text: str, hostname: Optional[str] = None) -> Scrape:
    """Parse exporter text into per-GPU Castor indicators and GPU labels."""
    values: dict[str, dict[str, float]] = {}
    gpus: dict[str, GpuLabels] = {}
    for fam in text_string_to_metric_families(text):
        ind = _FIELD_TO_IND.get(family_key(fam.name))
        for s in fam.samples:
            lab = s.labels
            host = lab.get("Hostname", lab.get("hostname", ""))
            if hostname and host and host != hostname:
                continue
            idx = lab.get("gpu")
            if idx is None:
                continue
            if idx not in gpus:
                gpus[idx] = GpuLabels(idx, lab.get("UUID", lab.get("uuid", "")), lab.get("modelName", ""),
                                      host, lab.get("DCGM_FI_DRIVER_VERSION", ""), lab.get("pci_bus_id", ""))
            if ind is not None:
                values.setdefault(idx, {})[ind] = float(s.value)
    return Scrape(values, gpus)


def select_gpus(scrape: Scrape, selectors: Sequence[str]) -> list[str]:
    """GPU indices for selectors that are indices ("0") or UUIDs ("GPU-…")."""
    by_uuid = {g.uuid: i for i, g in scrape.gpus.items()}
    out = []
    for sel in selectors:
        sel = str(sel).strip()
        idx = by_uuid.get(sel) if sel.upper().startswith("GPU-") or sel.upper().startswith("MIG-") else sel
        if idx is not None and idx in scrape.gpus and idx not in out:
            out.append(idx)
    return out


def indicators_for(scrape: Scrape, selectors: Sequence[str]) -> Sample:
    """Mean over the selected GPUs of each indicator; None where missing on all."""
    idxs = select_gpus(scrape, selectors)
    out: Sample = {}
    for k in GPU_INDICATORS:
        vals = [scrape.values.get(i, {}).get(k) for i in idxs]
        v = mean_of(x for x in vals if x is not None and not math.isnan(x))
        out[k] = v
    return out


def fetch(url: str, timeout_s: float = 2.0) -> str:
    """HTTP GET of the exporter's metrics page."""
    with urllib.request.urlopen(normalise_url(url), timeout=timeout_s) as resp:  # noqa: S310
        return resp.read().decode("utf-8", "replace")


class DcgmCollector(Collector):
    """Samples the Castor GPU indicators from dcgm-exporter for the given GPUs."""

    name = "dcgm"
    indicators = GPU_INDICATORS

    def __init__(self, url: str = DEFAULT_URL, gpus: Iterable[str] = ("0",),
                 interval_s: float = DEFAULT_INTERVAL_S, hostname: Optional[str] = None) -> None:
        super().__init__(interval_s)
        self.url = normalise_url(url)
        self.gpus = [str(g) for g in gpus]
        self.hostname = hostname
        self.labels: list[GpuLabels] = []

    def sample(self) -> Sample:
        text = fetch(self.url, timeout_s=min(2.0, max(self.interval_s, 0.5)))
        if not self.labels:  # GPU identity from the full scrape, once
            full = parse_metrics(text, self.hostname)
            self.labels = [full.gpus[i] for i in select_gpus(full, self.gpus)]
        scrape = parse_metrics(indicator_lines(text), self.hostname)
        return indicators_for(scrape, self.gpus)
