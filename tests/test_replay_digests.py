"""Existing replays stay bit-identical as the engine grows (DESIGN.md: "A replay that uses none of
them is bit-identical to before"). The digests in ``fixtures/replay_digests.json`` were recorded with
the engine before elastic allocations, goodput jobs and calibration existed; re-record them only for a
change that is meant to alter results, and say so in the commit (``SCHEDLAB_RECORD_DIGESTS=1`` rewrites the
entries of the tests it runs, e.g. with ``-k CASE``; ``docs/contributing.md``)."""

from __future__ import annotations

import pytest

from helpers import FIXTURES, check_digests, table_digest
from schedlab.sched.replay import run
from schedlab.sched.spec import ReplaySpec

DIGESTS = FIXTURES / "replay_digests.json"
COLUMNS = ["job_id", "submit_time", "start_time", "end_time", "num_gpus", "preemptions", "queue_s", "jct_s",
           "run_s", "shared_s"]
CASES = {  # name -> (policy, cluster, interference)
    "fifo": ("fifo", "16x4", None), "sjf": ("sjf", "16x4", None), "ssf": ("ssf", "16x4", None),
    "srtf": ("srtf", "16x4", None), "tiresias": ("tiresias", "16x4", None), "backfill": ("backfill", "16x4", None),
    "sjf-ffs": ("sjf-ffs", "16x4", None), "sjf-bsbf": ("sjf-bsbf", "16x4", None), "castor": ("castor", "16x4", None),
    "lucid": ("lucid", "16x4", "analytic:1.1"), "gandiva": ("gandiva", "16x4", None), "gavel": ("gavel", "16x4", None),
    # the readings before issue #23, kept as options (their digests are the old tiresias / srtf ones)
    "tiresias-paper": ("tiresias", "16x4", None), "srtf-head": ("srtf", "16x4", None),
    # strict-consolidated placement (issue #23; the others use the default, fewest-servers)
    "fifo-strict": ("fifo", "16x4", None), "tiresias-strict": ("tiresias", "16x4", None),
    "srtf-strict": ("srtf", "16x4", None),
}
PARAMS = {"tiresias-paper": {"semantics": "paper"}, "srtf-head": {"repack": False}}
PLACEMENTS = {"fifo-strict": "strict-consolidated", "tiresias-strict": "strict-consolidated",
              "srtf-strict": "strict-consolidated"}


def digest(case: str) -> str:
    policy, cluster, interference = CASES[case]
    spec = ReplaySpec(format="synthetic", options={"num_jobs": 400, "load": 3.0, "seed": 7},
                      annotate=True, cluster=cluster, policies=[{"name": policy, "params": PARAMS.get(case, {})}],
                      seed=7, interference=interference or "analytic",
                      placement=PLACEMENTS.get(case, "fewest-servers"))
    [result] = run(spec)
    return table_digest(result.jobs[COLUMNS])


@pytest.mark.parametrize("case", sorted(CASES))
def test_replay_is_bit_identical_to_the_recorded_engine(case):
    check_digests(DIGESTS, case, digest(case))
