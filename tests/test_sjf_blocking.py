"""``sjf`` with ``blocking: true`` (Lucid's and Helios' artifact ``sjf``) against a hand-computed schedule."""

from __future__ import annotations

import pytest
from helpers import make_table
from pydantic import ValidationError
from helpers import replay_table

# One 4-GPU server: A holds 2 GPUs for 10 s; B (the shortest, 2 s) needs all 4; C (5 s) needs 1.
TRACE = make_table([("A", 0, 2, 10), ("B", 1, 4, 2), ("C", 2, 1, 5)])


def _times(result) -> dict[str, tuple[float, float]]:
    jobs = result.jobs.set_index("job_id")
    return {j: (jobs.at[j, "start_time"], jobs.at[j, "end_time"]) for j in jobs.index}


def test_default_sjf_lets_a_longer_job_pass_the_shortest():
    assert _times(replay_table(TRACE, "1x4", "sjf")) == {"A": (0, 10), "B": (10, 12), "C": (2, 7)}


def test_blocking_sjf_waits_behind_the_shortest_job():
    result = replay_table(TRACE, "1x4", "sjf", {"blocking": True})
    assert _times(result) == {"A": (0, 10), "B": (10, 12), "C": (12, 17)}


def test_blocking_must_be_a_boolean():
    with pytest.raises((ValidationError, ValueError)):
        replay_table(TRACE, "1x4", "sjf", {"blocking": "sometimes"})
    with pytest.raises((ValidationError, ValueError)):
        replay_table(TRACE, "1x4", "sjf", {"block": True})
