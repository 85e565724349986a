"""A model or option that changes nothing says so (``sched/results/applied.py``): a real CPU sweep (cifar10
and ncf solo at two batch sizes), then ``schedlab fit iteration-time`` on its profiles, registers a model
covering cifar10 and ncf on ``cpu``; a replay with it (``models:/iteration-time/1`` from a real MLflow
store on sqlite) either changes the result or says, in the output and in MLflow, that it applied to 0 jobs
and why; a co-locating policy on a CPU cluster is changed by it and counts the jobs (slow: the sweep
trains real models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import FIXTURES, cli_env, run_cli

SWEEP = FIXTURES / "flows" / "two-workloads-sweep.yaml"


def fit_and_register(folder: Path, home: Path) -> None:
    args = ["fit", "iteration-time"]
    done = run_cli(args, cli_env(home), folder, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "registered models:/iteration-time/1" in done.stdout and "cpu" in done.stdout


def replay(folder: Path, home: Path, out: str, *extra: str) -> tuple[str, dict]:
    done = run_cli(["replay", "--num-jobs", "200", "--no-progress", "--out", str(folder / out), *extra], cli_env(home),
                   folder, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summaries = {}  # policy ("" for one) -> its summary and, when models or options were given, applied.json
    for path in (folder / out).rglob("summary.json"):
        extra = path.with_name("applied.json")
        summaries[path.parent.name if path.parent.name != out else ""] = {
            **json.loads(path.read_text()), **(json.loads(extra.read_text()) if extra.exists() else {})}
    return done.stdout, summaries


def runs_of(home: Path) -> list:
    from schedlab.tasks import tracking

    client = tracking.client(f"sqlite:///{home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("replay")
    return [r for r in client.search_runs([experiment.experiment_id]) if "policy" in r.data.params]


def check_the_loop(folder: Path, home: Path) -> None:
    """The bar: the fitted model changes the result or the replay says it changed nothing (and never says so
    when it changed it); the summary stays what it is without the model (its digests)."""
    model = "models:/iteration-time/1"
    for cluster in ("castor-sim", "4x8:cpu"):
        out, fitted = replay(folder, home, f"fit-{cluster}", "--policy", "fifo", "--cluster", cluster,
                             "--iteration-time", model, "--track")
        _, catalog = replay(folder, home, f"catalog-{cluster}", "--policy", "fifo", "--cluster", cluster)
        assert fitted[""]["avg_jct_s"] == catalog[""]["avg_jct_s"]  # the same result ...
        assert fitted[""]["applied"] == {"iteration_time": 0}  # ... and it says so
        assert {k: v for k, v in fitted[""].items() if k not in ("applied", "unused", "iteration_time")}.keys() == \
            catalog[""].keys()
        assert (f"fifo: iteration-time model {model} applied to 0 of 200 jobs and changed nothing: the trace gives"
                " each job's duration, no workload") in out
    run = runs_of(home)[-1]
    assert run.data.metrics["applied.iteration_time"] == 0
    assert run.data.tags["schedlab.unused"].startswith(f"iteration-time model {model} applied to 0 of 200 jobs")

    # workloads from the catalog, durations from the trace: for each policy, a fitted model that changed
    # no number the replay used leaves the result as the catalog's and says so; one that did is counted
    out, fitted = replay(folder, home, "annotated", "--policy", "fifo", "castor", "sjf-bsbf", "--cluster", "4x8:cpu", "--annotate",
                         "--iteration-time", model)
    _, catalog = replay(folder, home, "annotated-catalog", "--policy", "fifo", "castor", "sjf-bsbf", "--cluster", "4x8:cpu",
                        "--annotate")
    for policy in ("fifo", "castor", "sjf-bsbf"):
        same = jobs(folder / "annotated" / policy).equals(jobs(folder / "annotated-catalog" / policy))
        count = fitted[policy]["applied"]["iteration_time"]
        assert same == (count == 0) == bool(fitted[policy]["unused"]), (policy, count)
        assert (policy in out.split("iteration-time model")[0].splitlines()[-1]) == same
    assert fitted["fifo"]["applied"]["iteration_time"] == 0 and "have their durations from the trace" in out


def jobs(folder: Path):
    import pandas as pd

    return pd.read_parquet(folder / "jobs.parquet")


@pytest.mark.parametrize("extra, message", [
    (["--policy", "fifo", "--interference", "analytic:1.3"],
     "fifo: ξ source analytic:1.3 applied to 0 of 200 jobs and changed nothing: it sets the speed of jobs sharing a"
     " GPU, and no job shared one (fifo does not share GPUs)"),
    (["--policy", "fifo", "--preemption-overhead", "10"],
     "fifo: preemption overhead 10 s applied to 0 of 200 jobs and changed nothing: no job was preempted"),
])
def test_options_that_change_nothing_say_so(tmp_path: Path, extra: list[str], message: str) -> None:
    out, summaries = replay(tmp_path, tmp_path / "home", "out", *extra)
    assert message in out and summaries[""]["unused"] == [message.removeprefix("fifo: ")]


@pytest.mark.slow
def test_a_cpu_sweep_fit_then_replay(tmp_path: Path, seed_home) -> None:
    home = seed_home(tmp_path / "home")
    done = run_cli(["profile", "--sweep", str(SWEEP), "--no-progress"], cli_env(home), tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    fit_and_register(tmp_path, home)
    check_the_loop(tmp_path, home)
