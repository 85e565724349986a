"""Duration knowledge (``docs/estimates.md``): every policy that reads durations, in estimate mode, decides
on its estimator's figures only.

- **Poisoning**: in estimate mode the true durations are hidden (reading one fails the replay); the same
  replay with every hidden read answered by garbage instead (``truth_poisoned``) must end job for job as
  the hidden one: a policy that read the truth anywhere would decide otherwise. A canary policy that does
  read ``job.duration`` shows that both runs catch it.
- **sigma 0**: ``noisy`` with sigma 0 is the truth: every policy replays as under the oracle, job for job.
"""

from __future__ import annotations

import math
import textwrap
import warnings

import numpy as np
import pandas as pd
import pytest
from helpers import make_table, replay_table
from schedlab.sched.core.cluster import ClusterSpec, PoolSpec
from schedlab.sched.estimators.knowledge import TruthHidden
from schedlab.sched.estimators.seam import KnowledgeWarning, truth_poisoned
from schedlab.sched.policies import POLICIES
from schedlab.sched.replay import ReplaySpec, prepare, run
from schedlab.sched.traces import LoadOptions, load_trace

COLUMNS = ["job_id", "start_time", "end_time", "num_gpus", "preemptions", "run_s", "shared_s"]


def named_trace(num_jobs: int, seed: int, max_gpus: int = 16, load: float = 2.0) -> pd.DataFrame:
    """The synthetic trace with users and recurring job names: each user runs a few names, and a
    name's jobs have similar lengths (what the history estimator learns from)."""
    table, _ = load_trace(None, fmt="synthetic", options=LoadOptions(num_jobs=num_jobs, load=load, seed=seed))
    table = table[table["num_gpus"] <= max_gpus].reset_index(drop=True)
    rng = np.random.default_rng(seed)
    user = rng.integers(0, 8, len(table))
    kind = np.clip(np.log10(table["duration"].to_numpy()).astype(int), 0, 5)  # recurring jobs, similar lengths
    return table.assign(user=[f"u{u}" for u in user], name=[f"u{u}-{k}" for u, k in zip(user, kind)])


def pooled() -> ClusterSpec:
    return ClusterSpec(name="lyra-small", pools=[
        PoolSpec(servers=4, gpus_per_server=8),
        PoolSpec(name="inference", servers=6, gpus_per_server=8, gpu_type="t4", gpu_memory_gb=16)])


LYRA = {"annotate": {"scheme": "lyra", "scenario": "basic"}, "cluster": pooled(),
        "inference": {"load": "diurnal:0.3:0.9"}}
SHARING = {"annotate": True, "cluster": "4x4"}
GIMBAL = {"annotate": True, "cluster": "4x2:a40", "interference": "mpscap:analytic:1.1", "max_gpus": 8}
#: every policy that takes the option (test_every_duration_reading_policy_is_covered), with a set-up
#: that makes it read durations: (policy, its params, replay fields and trace size)
CASES = {
    "sjf": ("sjf", {}, {}), "sjf-blocking": ("sjf", {"blocking": True}, {}), "ssf": ("ssf", {}, {}),
    "ssf-blocking": ("ssf", {"blocking": True}, {}), "srtf": ("srtf", {}, {}),
    "srtf-head": ("srtf", {"repack": False}, {}), "backfill": ("backfill", {}, {}),
    "sjf-ffs": ("sjf-ffs", {}, SHARING), "sjf-bsbf": ("sjf-bsbf", {}, SHARING), "castor": ("castor", {}, SHARING),
    "lucid": ("lucid", {}, {**SHARING, "interference": "analytic:1.1"}),
    "gavel": ("gavel", {"objective": "makespan"}, SHARING),
    "gimbal-jct": ("gimbal-jct", {}, GIMBAL), "gimbal-deadline": ("gimbal-deadline", {}, GIMBAL),
    "gimbal-makespan": ("gimbal-makespan", {}, GIMBAL),
    "lyra": ("lyra", {}, LYRA), "opportunistic": ("opportunistic", {}, LYRA),
    "afs": ("afs", {}, {"annotate": {"scheme": "lyra", "scenario": "basic"}, "cluster": "4x8"}),
}


def replay(case: str, knowledge: dict, poisoned: bool = False):
    policy, params, fields = CASES[case]
    fields = dict(fields)
    max_gpus = fields.pop("max_gpus", 16)
    cluster = fields.pop("cluster", "4x4")
    spec = ReplaySpec(cluster=cluster, policies=[{"name": policy, "params": {**params, **knowledge}}], seed=3,
                      **fields)
    table = named_trace(150, seed=3, max_gpus=max_gpus)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # capability fallbacks of tiny set-ups
        prepared = prepare(spec, table)
        if not poisoned:
            return run(spec, prepared)[0]
        with truth_poisoned():
            return run(spec, prepared)[0]


def schedule(result) -> str:
    return result.jobs[COLUMNS].to_csv(index=False, float_format=repr)


def test_every_duration_reading_policy_is_covered():
    takes = {name for name, cls in POLICIES.items() if "estimator" in cls.Params.model_fields}
    assert takes == {policy for policy, _, _ in CASES.values()}


HISTORY = {"knowledge": "estimate", "estimator": "history"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_policy_in_estimate_mode_never_reads_a_true_duration(case):
    hidden = replay(case, HISTORY)  # any read of the truth would fail this replay (TruthHidden)
    assert hidden.summary["estimate_reads"] > 0  # it did decide on estimates
    poisoned = replay(case, HISTORY, poisoned=True)  # ... and garbage in place of the truth changes nothing
    assert schedule(poisoned) == schedule(hidden)


@pytest.mark.parametrize("case", sorted(CASES))
def test_noisy_with_sigma_zero_is_the_oracle_job_for_job(case):
    oracle = replay(case, {})
    exact = replay(case, {"knowledge": "estimate", "estimator": "noisy", "sigma": 0})
    assert schedule(exact) == schedule(oracle)
    assert exact.summary["estimate_log_error"] == 0 and exact.summary["estimate_under_fraction"] == 0


@pytest.mark.parametrize("estimator", [{"estimator": "requested"}, {"estimator": "noisy", "sigma": 1.0},
                                       {"estimator": "learned", "refit_every": 20}])
def test_every_estimator_behind_the_blindfold(estimator):
    for case in ("sjf", "srtf", "backfill"):
        knowledge = {"knowledge": "estimate", **estimator}
        hidden = replay(case, knowledge)
        assert schedule(replay(case, knowledge, poisoned=True)) == schedule(hidden)
        assert schedule(hidden) != schedule(replay(case, {}))  # the estimates were not the truth


CANARY = '''
from schedlab.sched.api import DemandQueue, KnowledgeParams, Policy


class Peeking(Policy):
    """sjf written without the seam: its key reads the job's true duration."""
    name = "peeking-sjf"
    Params = KnowledgeParams
    waits_when_refused = True
    honest = False

    def __init__(self, params=None):
        super().__init__(params)
        self.queue = DemandQueue(self.key)

    def key(self, job):
        return self.duration(job) if self.honest else job.duration

    def on_arrival(self, engine, job):
        self.queue.push(job)

    def schedule(self, engine):
        while (job := self.queue.peek(engine.cluster.free_gpus)) is not None and engine.start(job):
            self.queue.pop(job)


class Honest(Peeking):
    name = "honest-sjf"
    honest = True


class ReadsEnds(Honest):
    """Reads the engine's true expected ends."""
    name = "reads-ends-sjf"

    def schedule(self, engine):
        list(engine.by_end)
        super().schedule(engine)
'''


def test_the_canary_that_reads_the_truth_is_caught_both_ways(tmp_path):
    path = tmp_path / "canary.py"
    path.write_text(textwrap.dedent(CANARY))
    table = named_trace(150, seed=3)
    history = {"knowledge": "estimate", "estimator": "history"}
    with pytest.raises(TruthHidden, match=r"peeking-sjf read job .*'s duration .* read self\.duration\(job\)"):
        replay_table(table, "4x4", f"{path}:Peeking", history, seed=3)
    with pytest.raises(TruthHidden, match=r"engine\.by_end .* self\.ends\(engine\)"):
        replay_table(table, "4x4", f"{path}:ReadsEnds", history, seed=3)
    honest = replay_table(table, "4x4", f"{path}:Honest", history, seed=3)
    with truth_poisoned():
        peeking = replay_table(table, "4x4", f"{path}:Peeking", history, seed=3)
        assert schedule(replay_table(table, "4x4", f"{path}:Honest", history, seed=3)) == schedule(honest)
    assert schedule(peeking) != schedule(honest)
    # in oracle mode the same code reads the truth, as every policy did before
    assert schedule(replay_table(table, "4x4", f"{path}:Peeking", seed=3)) == \
        schedule(replay_table(table, "4x4", "sjf", seed=3))


def test_sjf_noisy_sigma_zero_on_a_real_trace():
    from helpers import shared_data

    table, _ = load_trace(shared_data("traces", "itp", "cluster01.csv"), options=LoadOptions(max_gpus=64))
    oracle = replay_table(table, "8x8", "sjf")
    exact = replay_table(table, "8x8", "sjf", {"knowledge": "estimate", "estimator": "noisy", "sigma": 0})
    assert schedule(exact) == schedule(oracle)


# ---- remaining work under an estimate: hand-computed schedules ------------------------------------------------------
def _times(result) -> dict[str, tuple[float, float]]:
    jobs = result.jobs.set_index("job_id")
    return {j: (float(jobs.at[j, "start_time"]), float(jobs.at[j, "end_time"])) for j in jobs.index}


def test_srtf_decides_on_requested_times_and_a_job_past_its_estimate_is_about_to_end():
    # one GPU. A really needs 100 s but asked for 20; B needs 10, asked for 30. At 5 the oracle preempts A
    # for B; on the requests A has 15 s left against B's 30, so it runs on, and past 20 s it reads as
    # ending now: never preempted. B waits for it.
    table = make_table([("A", 0, 1, 100), ("B", 5, 1, 10)]).assign(time_limit=[20.0, 30.0])
    oracle = replay_table(table, "1x1", "srtf", preemption_overhead_s=0)
    assert _times(oracle) == {"A": (0, 110), "B": (5, 15)}
    requested = replay_table(table, "1x1", "srtf", {"knowledge": "estimate", "estimator": "requested"},
                             preemption_overhead_s=0)
    assert _times(requested) == {"A": (0, 100), "B": (100, 110)}
    assert requested.summary["requested_from_limit"] == 2 and requested.summary["estimate_under_fraction"] == 0.5


def test_backfill_plans_on_requested_times():
    # 4 GPUs. R runs on 2 until 100 (requested 300). H needs 4: reserved for when R ends. S (2 GPUs, 150 s,
    # requested 160) may jump ahead only if it ends before H's reservation: not on the truth (152 > 100);
    # on the requests it does (162 <= 300), and then delays H, since R really ends at 100.
    table = make_table([("R", 0, 2, 100), ("H", 1, 4, 10), ("S", 2, 2, 150)]).assign(time_limit=[300.0, 20.0, 160.0])
    assert _times(replay_table(table, "1x4", "backfill")) == {"R": (0, 100), "H": (100, 110), "S": (110, 260)}
    slurm = replay_table(table, "1x4", "backfill", {"knowledge": "estimate", "estimator": "requested"})
    assert _times(slurm) == {"R": (0, 100), "S": (2, 152), "H": (152, 162)}


# ---- the estimators ----------------------------------------------------------------------------------------------------
def _features(rows: list[tuple], **extra):
    from schedlab.sched.estimators.features import JobFeatures

    table = pd.DataFrame(rows, columns=["job_id", "submit_time", "num_gpus", "duration", "user", "name"])
    return JobFeatures.of(table.assign(**extra))


def test_history_prefers_the_users_name_then_the_name_then_the_user_then_everyone():
    from schedlab.sched.estimators.history import History

    rows = [("a", 0, 1, 100, "u1", "bert"), ("b", 1, 2, 300, "u1", "bert"), ("c", 2, 1, 50, "u2", "bert"),
            ("d", 3, 1, 1000, "u2", "gpt"), ("e", 4, 2, 0, "u1", "bert"), ("f", 5, 4, 0, "u1", "bert"),
            ("g", 6, 1, 0, "u3", "bert"), ("h", 7, 1, 0, "u2", "resnet"), ("i", 8, 1, 0, "u9", None),
            ("j", 9, 1, 0, None, None)]
    history = History(_features(rows), prior_s=42.0)
    assert history.estimate(4) == 42.0  # nothing has finished
    for i in range(4):
        history.observe(i, rows[i][3])
    assert history.estimate(4) == 300  # u1's bert at 2 GPUs
    assert history.estimate(5) == 200  # u1's bert, no 4-GPU one: any GPU count
    assert history.estimate(6) == 150  # u3 never ran bert: everyone's bert
    assert history.estimate(7) == 525  # nobody finished resnet: u2's jobs
    assert history.estimate(8) == history.estimate(9) == 362.5  # an unknown user: every job


def test_requested_uses_the_limit_or_the_f_model_per_job_whatever_the_order():
    from schedlab.sched.estimators.requested import Requested

    rows = [(f"j{i}", i, 1, 100.0 + i, "u", "n") for i in range(6000)]
    limits = [np.nan if i % 2 else 50.0 for i in range(6000)]
    forward = Requested(_features(rows, time_limit=limits), badness=3.0, seed=7)
    backward = Requested(_features(rows, time_limit=limits), badness=3.0, seed=7)
    ahead = [forward.estimate(i) for i in range(6000)]
    assert ahead == [backward.estimate(i) for i in reversed(range(6000))][::-1]
    assert all(e == 50.0 for e in ahead[0::2])
    ratios = np.array(ahead[1::2]) / np.array([100.0 + i for i in range(1, 6000, 2)])
    assert ratios.min() >= 1 and ratios.max() <= 4 and 2.4 < np.median(ratios) < 2.6  # U(1, 4)
    other = Requested(_features(rows, time_limit=limits), badness=3.0, seed=8)
    assert [other.estimate(i) for i in range(1, 9, 2)] != ahead[1:9:2]
    no_limits = Requested(_features(rows), badness=0.0, seed=7)
    assert [no_limits.estimate(i) for i in range(5)] == [100.0 + i for i in range(5)]  # f = 0: the truth


def test_noisy_is_log_normal_around_the_truth():
    from schedlab.sched.estimators.noisy import Noisy

    features = _features([(f"j{i}", i, 1, 100.0, "u", "n") for i in range(20000)])
    noisy = Noisy(features, sigma=0.5, seed=1)
    logs = np.log([noisy.estimate(i) / 100.0 for i in range(20000)])
    assert abs(logs.mean()) < 0.02 and abs(logs.std() - 0.5) < 0.02
    exact = Noisy(features, sigma=0.0, seed=1)
    assert [exact.estimate(i) for i in range(3)] == [100.0] * 3


@pytest.mark.parametrize("name", ["history", "learned"])
def test_learning_estimators_never_see_a_jobs_own_future(name):
    from schedlab.sched.estimators.history import History
    from schedlab.sched.estimators.learned import Learned

    rng = np.random.default_rng(0)
    n = 600
    rows = [(f"j{i}", i, int(rng.choice([1, 2, 4])), float(rng.lognormal(6, 1)), f"u{rng.integers(5)}",
             f"n{rng.integers(12)}") for i in range(n)]
    changed = [(*row[:3], row[3] * 7.0, *row[4:]) if i >= 400 else row for i, row in enumerate(rows)]

    def estimates(table):
        features = _features(table)
        estimator = History(features) if name == "history" else Learned(features, seed=0, refit_every=50)
        out = []
        for i, row in enumerate(table):  # each job ends before the next arrives
            out.append(estimator.estimate(i))
            estimator.observe(i, row[3])
        return out, estimator

    before, learned = estimates(rows)
    after, _ = estimates(changed)
    assert before[:401] == after[:401]  # job 400's own duration (and later ones) never reach its estimate
    assert before[401:] != after[401:]
    if name == "learned":
        assert learned.fits == n // 50


def test_learned_learns_what_the_history_does_not_read():
    from schedlab.sched.estimators.history import History
    from schedlab.sched.estimators.learned import Learned

    # every job a new name, one user: the history knows only the mean; the length follows the GPU count
    # and the submit hour (night jobs 20x longer), which the model reads
    rng = np.random.default_rng(1)
    n = 3000
    submit = np.sort(rng.random(n)) * 10 * 86400
    gpus = rng.choice([1, 8], n)
    night = (submit % 86400) < 6 * 3600
    length = 100.0 * gpus * np.where(night, 20, 1) * rng.lognormal(0, 0.1, n)
    rows = [(f"j{i}", submit[i], int(gpus[i]), float(length[i]), "u", f"n{i}") for i in range(n)]
    learned, history = Learned(_features(rows), seed=0, refit_every=500), History(_features(rows))
    errors = {"learned": [], "history": []}
    for i, row in enumerate(rows):
        for name, estimator in (("learned", learned), ("history", history)):
            errors[name].append(abs(math.log(estimator.estimate(i) / row[3])))
            estimator.observe(i, row[3])
    assert errors["learned"][:500] == errors["history"][:500]  # before the first fit: the history
    assert np.mean(errors["history"][1000:]) > 1 and np.mean(errors["learned"][1000:]) < 0.2
    assert learned.fits == n // 500


# ---- validation --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("params", "says"), [
    ({"sigma": 0.5}, "sigma applies to knowledge: estimate only"),
    ({"knowledge": "oracle", "estimator": "history"}, "estimator applies to knowledge: estimate only"),
    ({"knowledge": "estimate"}, "needs an estimator: one of history, requested, noisy, learned"),
    ({"knowledge": "estimate", "estimator": "noisy"}, "noisy needs sigma"),
    ({"knowledge": "estimate", "estimator": "history", "sigma": 1}, "sigma applies to estimator noisy, not history"),
    ({"knowledge": "estimate", "estimator": "noisy", "sigma": 1, "refit_every": 5}, "refit_every applies to"),
    ({"knowledge": "estimate", "estimator": "noisy", "sigma": -1}, "sigma"),
    ({"knowledge": "estimate", "estimator": "guess"}, "estimator"),
    ({"knowledge": "maybe"}, "knowledge"),
])
def test_bad_knowledge_parameters_are_refused_before_any_work(params, says):
    from schedlab.sched.policies import make_policy

    with pytest.raises(ValueError, match=says):
        make_policy("sjf", params)


def test_policy_specific_refusals():
    from schedlab.sched.policies import make_policy

    with pytest.raises(ValueError, match="changes nothing with objective 'max_min_fairness'"):
        make_policy("gavel", {"knowledge": "estimate", "estimator": "history"})
    with pytest.raises(ValueError, match="base_params: knowledge is set on the Gimbal policy itself"):
        make_policy("gimbal-jct", {"base_params": {"knowledge": "estimate"}})
    with pytest.raises(ValueError, match="has no parameter 'knowledge'"):
        make_policy("tiresias", {"knowledge": "estimate"})  # reads no durations: takes no such option
    assert make_policy("pollux", {"knowledge": "oracle"}).params.knowledge == "oracle"  # its goodput knowledge


def test_a_policy_that_reads_no_duration_on_the_trace_warns_that_estimates_changed_nothing():
    table = make_table([("a", 0, 1, 100), ("b", 10, 2, 50)])  # no elastic jobs: afs reads no duration
    with pytest.warns(KnowledgeWarning, match="afs read no duration"):
        result = replay_table(table, "1x4", "afs", {"knowledge": "estimate", "estimator": "history"})
    assert result.summary["estimate_reads"] == 0


def test_an_estimate_mode_policy_without_an_estimator_says_how_to_give_it_one():
    from schedlab.sched.core.cluster import ClusterState, load_cluster
    from schedlab.sched.core.engine import Engine, EngineError
    from schedlab.sched.core.job import jobs_from_table
    from schedlab.sched.policies import make_policy

    policy = make_policy("sjf", {"knowledge": "estimate", "estimator": "history"})
    engine = Engine(jobs_from_table(make_table([("a", 0, 1, 100)])), ClusterState(load_cluster("1x4")), policy)
    with pytest.raises(EngineError, match="no estimator: replay it through schedlab.sched.replay.run"):
        engine.run()


def test_the_cli_takes_knowledge_as_any_set(tmp_path):
    from helpers import cli_env, run_cli

    done = run_cli(["replay", "--num-jobs", "60", "--cluster", "2x4", "--policy", "sjf", "--out", str(tmp_path / "o"),
                    "--set", "sjf.knowledge=estimate", "--set", "sjf.estimator=noisy", "--set", "sjf.sigma=0.5",
                    "--no-progress"], cli_env(tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    bad = run_cli(["replay", "--num-jobs", "60", "--cluster", "2x4", "--policy", "sjf", "--out", str(tmp_path / "p"),
                   "--set", "sjf.sigma=0.5", "--no-progress"], cli_env(tmp_path), tmp_path)
    assert bad.returncode == 2 and "sigma applies to knowledge: estimate only" in bad.stderr
