"""``sjf`` and ``ssf`` with ``blocking: true`` (Lucid's and Helios' artifact ``sjf``; Helios' QSSF order)
against hand-computed schedules."""

from __future__ import annotations

import pytest
from helpers import make_table
from pydantic import ValidationError
from helpers import replay_table

# One 4-GPU server: A holds 2 GPUs for 10 s; B (the shortest, 2 s) needs all 4; C (5 s) needs 1.
TRACE = make_table([("A", 0, 2, 10), ("B", 1, 4, 2), ("C", 2, 1, 5)])
# ssf's key is GPUs x duration: B (4 x 2 = 8 GPU-s) first, then C (1 x 9), then D (1 x 20).
SERVICE = make_table([("A", 0, 2, 10), ("B", 1, 4, 2), ("C", 2, 1, 9), ("D", 3, 1, 20)])


def _times(result) -> dict[str, tuple[float, float]]:
    jobs = result.jobs.set_index("job_id")
    return {j: (jobs.at[j, "start_time"], jobs.at[j, "end_time"]) for j in jobs.index}


def test_default_sjf_lets_a_longer_job_pass_the_shortest():
    assert _times(replay_table(TRACE, "1x4", "sjf")) == {"A": (0, 10), "B": (10, 12), "C": (2, 7)}


def test_blocking_sjf_waits_behind_the_shortest_job():
    result = replay_table(TRACE, "1x4", "sjf", {"blocking": True})
    assert _times(result) == {"A": (0, 10), "B": (10, 12), "C": (12, 17)}


def test_default_ssf_lets_larger_services_pass_the_smallest():
    # C and D fit beside A at 2 and 3; B (the smallest service) waits for A, then for C and D
    assert _times(replay_table(SERVICE, "1x4", "ssf")) == {"A": (0, 10), "B": (23, 25), "C": (2, 11),
                                                           "D": (3, 23)}


def test_blocking_ssf_waits_behind_the_smallest_service():
    # B blocks C and D until A ends; then B, then C and D together
    assert _times(replay_table(SERVICE, "1x4", "ssf", {"blocking": True})) == {
        "A": (0, 10), "B": (10, 12), "C": (12, 21), "D": (12, 32)}


@pytest.mark.parametrize("policy", ["sjf", "ssf"])
def test_blocking_must_be_a_boolean(policy):
    with pytest.raises((ValidationError, ValueError)):
        replay_table(TRACE, "1x4", policy, {"blocking": "sometimes"})
    with pytest.raises((ValidationError, ValueError)):
        replay_table(TRACE, "1x4", policy, {"block": True})
