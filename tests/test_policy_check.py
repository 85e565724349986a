"""``schedlab check-policy`` (issue #28 item 3; ``sched/policy_check.py``): a deliberately broken policy per
rule is caught with a reproducing trace of at most 10 jobs, every shipped policy passes, and the CLI."""

from __future__ import annotations

import inspect
import itertools
import time
from typing import Any

import pandas as pd
import pytest

from helpers import cli_env, run_cli
from schedlab import cli
from schedlab.sched.core.job import Job
from schedlab.sched.policies import POLICIES
from schedlab.sched.policies.base import Policy
from schedlab.sched.policy_check import RULES, Case, CheckOptions, check_policy, run_case


class _Fifo(Policy):
    """A correct FIFO: the base every broken policy below breaks one rule of."""

    name = "test-fifo"

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.queue: list[Job] = []

    def on_arrival(self, engine: Any, job: Job) -> None:
        self.queue.append(job)

    def schedule(self, engine: Any) -> None:
        while self.queue and engine.start(self.queue[0]):
            self.queue.pop(0)


class OverCapacity(_Fifo):
    """Squeezes a job that does not fit beside a running one through the cluster object, unpaired."""

    name = "broken-capacity"

    def schedule(self, engine: Any) -> None:
        super().schedule(engine)
        if self.queue and engine.running:
            job, running = self.queue.pop(0), next(iter(engine.running))
            engine.cluster.share(running.gpus[:1], job)


class EarlyStart(_Fifo):
    """Peeks at the engine loop's arrival list and starts a job before it is submitted."""

    name = "broken-submit"

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.early: set[Job] = set()

    def on_arrival(self, engine: Any, job: Job) -> None:
        if job not in self.early:
            super().on_arrival(engine, job)
        frame = inspect.currentframe()
        while frame is not None and "arrivals" not in frame.f_locals:
            frame = frame.f_back
        later = [j for j in frame.f_locals["arrivals"] if j.submit_time > engine.now] if frame else []
        if later and later[0] not in self.early and engine.start(later[0]):
            self.early.add(later[0])


class NeverWide(_Fifo):
    """Never starts a job of more than one GPU."""

    name = "broken-finishes"

    def schedule(self, engine: Any) -> None:
        for job in [j for j in self.queue if j.requested_gpus == 1]:
            if engine.start(job):
                self.queue.remove(job)


class Spins(_Fifo):
    """Never starts a job; re-arms a timer a second later forever."""

    name = "broken-spins"

    def schedule(self, engine: Any) -> None:
        engine.set_timer(engine.now + 1.0)


class Rewind(_Fifo):
    """Gives a running job its work back when another arrives."""

    name = "broken-progress"

    def schedule(self, engine: Any) -> None:
        for job in engine.running:
            done = job.duration - engine.remaining(job)
            if done > 0:
                job.remaining += done  # the field is as of the last settle: add the work done since
        super().schedule(engine)


_RUNS = itertools.count()


class Alternating(_Fifo):
    """Every other replay in the process delays its starts by one second (state shared across runs)."""

    name = "broken-determinism"

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.late: bool | None = None
        self.ready: set[Job] = set()

    def on_arrival(self, engine: Any, job: Job) -> None:
        if self.late is None:
            self.late = next(_RUNS) % 2 == 1
        super().on_arrival(engine, job)
        if self.late:
            engine.set_timer(engine.now + 1.0, job)
        else:
            self.ready.add(job)

    def on_timer(self, engine: Any, payload: Any) -> None:
        self.ready.add(payload)

    def schedule(self, engine: Any) -> None:
        while self.queue and self.queue[0] in self.ready and engine.start(self.queue[0]):
            self.queue.pop(0)


class ReadsInternals(_Fifo):
    """Reads the engine's job list, which is not part of PolicyEngine."""

    name = "broken-api"

    def schedule(self, engine: Any) -> None:
        if len(self.queue) > 1:
            _ = engine.jobs
        super().schedule(engine)


class WritesJobField(_Fifo):
    """Writes a field the engine owns (a job's preemption count) outside any engine call."""

    name = "broken-api-write"

    def schedule(self, engine: Any) -> None:
        super().schedule(engine)
        for job in engine.running:
            job.preemptions += 1


class Slow(_Fifo):
    """Takes 0.1 s per decision once two jobs wait."""

    name = "broken-time"

    def schedule(self, engine: Any) -> None:
        if len(self.queue) >= 2:
            time.sleep(0.1)
        super().schedule(engine)


class Crashes(_Fifo):
    """Raises on a job of three or more GPUs."""

    name = "broken-crash"

    def on_arrival(self, engine: Any, job: Job) -> None:
        if job.requested_gpus >= 3:
            raise KeyError(job.job_id)
        super().on_arrival(engine, job)


BROKEN: dict[str, type[Policy]] = {
    "capacity": OverCapacity, "submit": EarlyStart, "finishes": NeverWide, "progress": Rewind,
    "determinism": Alternating, "api": ReadsInternals, "time": Slow, "crash": Crashes,
}


def spec(cls: type[Policy]) -> str:
    """The policy as ``module:Class``: the check's child process imports it by that spec (a class only
    registered in this process's memory would be unknown there)."""
    return f"{cls.__module__}:{cls.__name__}"


@pytest.mark.parametrize("rule", list(BROKEN))
def test_each_planted_violation_is_found_with_a_small_trace(rule: str) -> None:
    policy = spec(BROKEN[rule])
    # the planted sleeper takes 0.1 s a call; for the other rules the default deadline (1 s), so that a loaded
    # machine (a parallel test worker, another tenant) does not add a `time` finding to theirs
    report = check_policy(policy, CheckOptions(examples=40, deadline_s=0.05 if rule == "time" else 1.0))
    assert [v.rule for v in report.violations] == [rule], report.text()
    case = report.violations[0].case
    assert 1 <= case.jobs <= 10
    # the minimal case still breaks the rule, and Hypothesis shrank it to what the bug needs
    assert run_case(policy, case, report.options)[0] == rule
    assert case.jobs == (1 if rule in ("finishes", "determinism", "crash") else 2), report.text()
    if rule == "finishes":  # a one-GPU job would run: the minimal case is one job wider than one GPU
        assert case.table["num_gpus"].tolist() == [2]


def test_a_write_to_a_job_field_names_the_field() -> None:
    report = check_policy(spec(WritesJobField), CheckOptions(examples=20))
    assert [v.rule for v in report.violations] == ["api"]
    assert "preemptions" in report.violations[0].message
    assert report.violations[0].case.jobs == 1


def test_a_policy_that_spins_forever_is_stopped_at_the_bound() -> None:
    report = check_policy(spec(Spins), CheckOptions(examples=3, max_calls=500))
    assert [v.rule for v in report.violations] == ["finishes"]
    assert "policy calls and jobs still unfinished" in report.violations[0].message
    assert report.violations[0].case.jobs == 1


def test_the_correct_base_passes_every_rule() -> None:
    report = check_policy(spec(_Fifo), CheckOptions(examples=30))
    assert report.passed, report.text()
    assert report.examples == 30 and report.slowest_s > 0
    assert "crash: " not in report.text() and "FAIL" not in report.text()


def test_a_case_round_trips_through_the_canonical_csv(tmp_path) -> None:
    from schedlab.sched.traces import load_trace

    table = pd.DataFrame({"job_id": ["j0", "j1"], "submit_time": [0.0, 30.0], "num_gpus": [1, 2],
                          "duration": [60.0, 5.0], "elastic_min": [0, 2], "elastic_max": [0, 4]})
    path = tmp_path / "case.csv"
    path.write_text(Case(table, 1, 4).csv())
    loaded, _ = load_trace(str(path))
    pd.testing.assert_frame_equal(loaded[table.columns].reset_index(drop=True), table, check_dtype=False)


@pytest.mark.parametrize("options, message", [
    ({"examples": 0}, "--examples"), ({"max_jobs": 11}, "--max-jobs"), ({"seed": -1}, "--seed"),
    ({"deadline_s": 0.0}, "--deadline-s"), ({"deadline_s": float("inf")}, "--deadline-s"),
    ({"examples": True}, "--examples"),
])
def test_options_are_validated(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CheckOptions(**options)


# the sharing, elastic and goodput-capable policies the issue names, and the rest of the registry
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_shipped_policy_passes(policy: str) -> None:
    report = check_policy(policy, CheckOptions(examples=10))
    assert report.passed, report.text()


def test_cli_reports_saves_and_the_saved_trace_reproduces(tmp_path, capsys) -> None:
    save = tmp_path / "found"
    code = cli.main(["check-policy", spec(EarlyStart), "--examples", "20", "--save", str(save)])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL  submit" in out and "reproduce: schedlab replay --trace" in out
    assert sorted(p.name for p in save.iterdir()) == ["submit.csv"]
    command = next(line for line in out.splitlines() if "reproduce:" in line).split("schedlab ", 1)[1].split()
    replayed = tmp_path / "replay"
    assert cli.main([*command, "--out", str(replayed), "--no-progress"]) == 0
    jobs = pd.read_parquet(next(replayed.rglob("jobs.parquet")))
    assert (jobs["start_time"] < jobs["submit_time"]).any()  # the plain replay shows the early start


@pytest.mark.parametrize("argv, message", [
    (["nope"], "unknown policy 'nope'"),
    (["fifo", "--examples", "0"], "--examples: must be >= 1"),
    (["fifo", "--max-jobs", "11"], "--max-jobs: must be <= 10"),
    (["fifo", "--deadline-s", "0"], "--deadline-s: must be > 0"),
    (["fifo", "--set", "bogus=1"], "has no parameter 'bogus'"),
])
def test_cli_refuses_bad_options(argv: list[str], message: str, capsys) -> None:
    try:
        code = cli.main(["check-policy", *argv])
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_passes_parameters_to_the_policy(capsys) -> None:
    assert cli.main(["check-policy", "tiresias", "--set", "promote_knob=4", "--set", "tiresias.semantics=paper",
                     "--examples", "3", "--max-jobs", "3"]) == 0
    assert "check-policy tiresias: 3 generated cases" in capsys.readouterr().out


@pytest.mark.slow
def test_cli_subprocess_passes_fifo(tmp_path) -> None:
    done = run_cli(["check-policy", "fifo", "--examples", "5", "--max-jobs", "4"], cli_env(tmp_path), tmp_path,
                   timeout=120)
    assert done.returncode == 0, done.stderr
    assert "check-policy fifo: 5 generated cases" in done.stdout
    assert all(f"ok    {rule}" in done.stdout for rule in RULES)
