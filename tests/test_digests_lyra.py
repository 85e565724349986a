"""Lyra's replays with loaning stay bit-identical: the 15-day set-up of ``schedlab.benchmarks.lyra_speed``
(Philly from day 40, Basic scenario, ``lyra-sim`` = 84 x 8 V100 + 99 x 8 T4, ServeGen ``m-small``
inference load) through every loaning variant: ``lyra`` (loaning + scaling, reclaim lyra / scf /
random), loaning only (``elastic: false``), the ``last`` predictor (7-minute ticks), ``opportunistic``
and scaling only. The job table, the summary without wall-clock fields and the utilization table,
hashed, against ``fixtures/digests/lyra.json``. Skipped without the Philly trace or the ServeGen load;
re-record with ``SCHEDLAB_RECORD_DIGESTS=1``."""

from __future__ import annotations

import pytest

from helpers import FIXTURES, check_digests, shared_data, summary_digest, table_digest

pytestmark = pytest.mark.slow

RECORDED = FIXTURES / "digests" / "lyra.json"
CASES = {  # name -> (lyra_speed case, params, loan option overrides)
    "lyra-loaning": ("lyra-loaning", None, {}),
    "lyra-loaning-scf": ("lyra-loaning", {"reclaim": "scf"}, {}),
    "lyra-loaning-random": ("lyra-loaning", {"reclaim": "random"}, {}),
    "lyra-loaning-only": ("lyra-loaning", {"elastic": False}, {}),
    # 7-minute ticks and the ``last`` predictor (5-minute ticks on 10-minute windows equal the oracle)
    "lyra-loaning-last-7min": ("lyra-loaning", None, {"predictor": "last", "period_s": 420.0}),
    "opportunistic": ("opportunistic", None, {}),
    "lyra-scaling": ("lyra-scaling", None, {}),
}


def _timing(key: str) -> bool:
    return key.endswith(("_solve_s", "wall_s"))


@pytest.fixture(scope="module")
def window():
    from schedlab.benchmarks.lyra_speed import load_table

    return load_table(shared_data("traces", "philly", "philly_jobs_pollux.csv"))


@pytest.mark.parametrize("name", list(CASES))
def test_lyra_replay_is_bit_identical_to_the_recorded_one(name, window):
    from schedlab.benchmarks.lyra_speed import run_case

    case, params, loan = CASES[name]
    inference = shared_data("inference", "servegen_total_rate_per_10min.csv")
    result, _, _ = run_case(window, case, str(inference), params, loan)
    found = {"table": table_digest(result.jobs), "summary": summary_digest(result.summary, _timing),
             "utilization": table_digest(result.utilization)}
    check_digests(RECORDED, name, found)
