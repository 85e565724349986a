"""Official Philly ``cluster_job_log`` (msr-fiddle/philly-traces): a JSON list of jobs
``{jobid, vc, user, status, submitted_time, attempts: [{start_time, end_time, detail: [{ip, gpus}]}]}``.

Rules (documented choices):

* ``duration`` = end of the last attempt - start of the first attempt (wall span of the job,
  including retries and the gaps between them; not the sum of attempts).
* ``num_gpus`` = the most GPUs any attempt held (sum of ``len(gpus)`` over its ``detail``).
* jobs with no attempt or no recorded start are dropped as ``never_ran``; jobs whose last attempt
  has no ``end_time`` (still running at snapshot) as ``no_end_time``; attempts holding no GPU as
  ``no_gpu``. All statuses (Pass, Killed, Failed) are kept: they all occupied GPUs.
* row N = the N-th job object in the list (1-based); JSON Lines (one job per line) also accepted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from .common import LoadOptions, Raw, TraceError, check_file, make_loader, not_utf8, seconds, suggest

KEYS = ("jobid", "submitted_time", "attempts")


def _jobs(path: Path) -> list[Any]:
    """The job objects of a JSON list, or of JSON Lines (one job a line; an error names its row)."""
    check_file(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise not_utf8(path, header=None) from None
    if text.lstrip().startswith("["):
        return _parse(text, path)
    return [_parse(line, path, row) for row, line in enumerate(filter(str.strip, text.splitlines()), start=1)]


def _parse(text: str, path: Path, row: int | None = None) -> Any:
    """JSON ``text``; any parser error (a syntax error, nesting too deep, a number too long) is a TraceError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TraceError(path, "invalid JSON: nested too deeply to parse (arrays or objects within each other "
                         f"more than {sys.getrecursionlimit()} levels)", row) from None
    except ValueError as exc:  # json.JSONDecodeError, and e.g. an integer of more than 4300 digits
        raise TraceError(path, f"invalid JSON: {exc}", row) from None


def _gpus(attempt: dict, file: str, row: int) -> int:
    detail = attempt.get("detail") or []
    if not isinstance(detail, list) or not all(isinstance(d, dict) and isinstance(d.get("gpus"), list)
                                               for d in detail):
        raise TraceError(file, "attempt detail must be a list of {ip, gpus[]}", row, "attempts", detail)
    return sum(len(d["gpus"]) for d in detail)


def read(path: Path | None, options: LoadOptions) -> Raw:
    """Flatten the job list, then parse and validate its times vectorised."""
    assert path is not None
    file = str(path)
    rows: list[tuple] = []
    reasons = {"never_ran": 0, "no_end_time": 0, "no_gpu": 0}
    for row, job in enumerate(_jobs(path), start=1):
        if not isinstance(job, dict):
            raise TraceError(file, "job entry is not a JSON object", row)
        for key in KEYS:
            if key not in job:
                raise TraceError(file, f"missing key {key!r}{suggest(key, list(job))}", row, key)
        if job["jobid"] is None or not str(job["jobid"]).strip():
            raise TraceError(file, "missing job id (null or empty)", row, "jobid")
        attempts = job["attempts"] or []
        if not isinstance(attempts, list):
            raise TraceError(file, "attempts must be a list", row, "attempts", attempts)
        for n, attempt in enumerate(attempts, start=1):
            if not isinstance(attempt, dict):
                raise TraceError(file, f"attempt {n} is not a JSON object "
                                 "{start_time, end_time, detail}", row, "attempts", attempt)
        starts = [a.get("start_time") for a in attempts]
        if not attempts or starts[0] is None:
            reasons["never_ran"] += 1
            continue
        end = attempts[-1].get("end_time")
        if end is None:
            reasons["no_end_time"] += 1
            continue
        gpus = max(_gpus(a, file, row) for a in attempts)
        if gpus == 0:
            reasons["no_gpu"] += 1
            continue
        rows.append((row, job["jobid"], job["submitted_time"], starts[0], end, gpus,
                     job.get("vc"), job.get("user")))
    raw = pd.DataFrame(rows, columns=["_row", "job_id", "submitted_time", "start_time", "end_time",
                                      "num_gpus", "vc", "user"])
    for c in ("job_id", "submitted_time", "start_time", "end_time", "vc", "user"):
        raw[c] = raw[c].astype("str")
    numbers = {c: bool(pd.to_numeric(raw[c], errors="coerce").notna().any())
               for c in ("submitted_time", "start_time", "end_time")}
    if len(set(numbers.values())) > 1:  # e.g. start 1.5 (s) and end 2017-10-01: a span of 47 years
        c = next(c for c, n in numbers.items() if n != numbers["submitted_time"])
        raise TraceError(file, f"{c} holds {'numbers of seconds' if numbers[c] else 'datetimes'} but "
                         f"submitted_time {'numbers of seconds' if numbers['submitted_time'] else 'datetimes'}: "
                         "give every time in the same form", column=c)
    out = pd.DataFrame(
        {
            "job_id": raw["job_id"],
            "submit_time": seconds(raw, "submitted_time", file),
            "num_gpus": raw["num_gpus"].astype("int64"),
            "duration": seconds(raw, "end_time", file) - seconds(raw, "start_time", file),
            "user": raw["user"],
            "vc": raw["vc"],
            "_row": raw["_row"],
        }
    )
    read_n = len(out) + sum(reasons.values())
    return Raw(out, file, read_n, {k: v for k, v in reasons.items() if v},
               columns={"job_id": "jobid", "submit_time": "submitted_time", "duration": "attempts"})


load = make_loader("philly-raw", read)
