"""``strict-best-fit`` placement (Lucid's ``consolidate`` placer) and the policies that wait when it refuses."""

from __future__ import annotations

import pytest
from helpers import make_table
from schedlab.sched.core.engine import EngineError
from helpers import replay_table


def _starts(result) -> dict[str, float]:
    jobs = result.jobs.set_index("job_id")
    return {j: jobs.at[j, "start_time"] for j in jobs.index}


def test_a_single_server_job_waits_for_one_server_that_holds_it():
    # 2x4: A and B take 3 GPUs of each server; C (2 GPUs) would span both servers, so it waits for A.
    trace = make_table([("A", 0, 3, 100), ("B", 0, 3, 50), ("C", 1, 2, 10)])
    assert _starts(replay_table(trace, "2x4", "fifo", placement="strict-best-fit"))["C"] == 50
    assert _starts(replay_table(trace, "2x4", "fifo"))["C"] == 1  # fewest-servers spreads it at once


def test_best_fit_picks_the_fullest_server_that_holds_the_job():
    # 3x4: A on server 0 (1 free left), B on server 1 (2 free); C (1 GPU) goes to server 0, so that
    # D (2 GPUs) still fits on server 1 and E (4 GPUs) on server 2, all at once.
    trace = make_table([("A", 0, 3, 100), ("B", 0, 2, 100), ("C", 1, 1, 100), ("D", 2, 2, 100), ("E", 3, 4, 100)])
    assert _starts(replay_table(trace, "3x4", "fifo", placement="strict-best-fit")) == {
        "A": 0, "B": 0, "C": 1, "D": 2, "E": 3}


def test_a_multi_server_job_takes_whole_servers_and_the_most_free_one_for_the_rest():
    # 2x4: A holds 1 GPU of server 0; B (6 GPUs) gets server 1 whole and 2 of server 0's 3 free GPUs.
    trace = make_table([("A", 0, 1, 100), ("B", 1, 6, 10)])
    assert _starts(replay_table(trace, "2x4", "fifo", placement="strict-best-fit"))["B"] == 1
    # 3x4: servers 0 and 1 keep 1 free GPU each; B gets server 2 whole, but no server has 2 free GPUs
    # for its rest, so it waits although 6 GPUs are free.
    trace = make_table([("A", 0, 3, 100), ("A2", 0, 3, 50), ("B", 1, 6, 10)])
    assert _starts(replay_table(trace, "3x4", "fifo", placement="strict-best-fit"))["B"] == 50


# 2x4: A and B leave one free GPU per server; C (2 GPUs) is refused; D (1 GPU, as short as C) fits.
REFUSED = make_table([("A", 0, 3, 100), ("B", 0, 3, 100), ("C", 1, 2, 10), ("D", 2, 1, 10)])


@pytest.mark.parametrize(("policy", "params", "d_start"), [
    ("lucid", {}, 2),  # Lucid: a job that cannot start blocks no one
    ("sjf", {}, 2),
    ("ssf", {}, 2),
    ("sjf", {"blocking": True}, 100),  # C comes first (a tie, earlier in the trace) and blocks
    ("fifo", {}, 100),
])
def test_a_refused_job_blocks_only_where_the_policy_says_so(policy, params, d_start):
    table = REFUSED.assign(model="bert", batch_size=12.0) if policy == "lucid" else REFUSED
    starts = _starts(replay_table(table, "2x4", policy, params, placement="strict-best-fit"))
    assert starts["C"] == 100 and starts["D"] == d_start


def test_a_policy_that_assumes_any_free_gpus_do_is_refused_with_a_clear_error():
    """Refused by the replay's spec, before any work (and by the engine, for a caller that builds one)."""
    from schedlab.sched.core.cluster import ClusterState, load_cluster
    from schedlab.sched.core.engine import Engine
    from schedlab.sched.core.job import jobs_from_table
    from schedlab.sched.policies import make_policy

    message = "strict-best-fit.*'optimus' assumes.*use one of backfill, fifo, gandiva"
    with pytest.raises(ValueError, match=message):
        replay_table(REFUSED, "2x4", "optimus", placement="strict-best-fit")
    with pytest.raises(EngineError, match=message):
        Engine(jobs_from_table(REFUSED), ClusterState(load_cluster("2x4")), make_policy("optimus"),
               placement="strict-best-fit").run()


def _shared(result) -> dict[str, float]:
    jobs = result.jobs.set_index("job_id")
    return {j: jobs.at[j, "shared_s"] for j in jobs.index}


@pytest.mark.parametrize(("params", "partner"), [({}, "B"), ({"artifact_pass": True}, "A")])
def test_lucid_partner_default_longest_class_head_artifact_first_started(params, partner):
    # 1x2: A (100 s) and B (300 s) start alone at 0, A first (lower priority value); C (150 s) arrives
    # at 1 and may pack beside either (150 <= 2 x 100). Lucid's simulator takes the first started (A);
    # schedlab's default the class head, the longest alone job (B). ξ = 1.05 scores every workload 0.
    table = make_table([("A", 0, 1, 100), ("B", 0, 1, 300), ("C", 1, 1, 150)]).assign(model="cifar10", batch_size=32.0)
    shared = _shared(replay_table(table, "1x2", "lucid", params, interference="analytic:1.05"))
    other = "A" if partner == "B" else "B"
    assert shared["C"] > 0 and shared[partner] > 0 and shared[other] == 0


def test_artifact_pass_refuses_options_it_does_not_implement():
    with pytest.raises(ValueError, match="artifact_pass"):
        replay_table(REFUSED.assign(model="bert", batch_size=12.0), "2x4", "lucid", {"artifact_pass": True, "unequal": True})
