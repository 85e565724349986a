"""One place builds a replay (issue #27 item 3): :func:`schedlab.sched.replay.run` on a
:class:`~schedlab.sched.replay.ReplaySpec`. The CLI, the tasks, the flows, the benchmarks, the studies and the
tools build a spec and call it, none builds an engine; the spec is plain, validated data."""

from __future__ import annotations

import ast
import json
import pickle
from pathlib import Path

import pytest
from pydantic import ValidationError

from schedlab.sched.replay import prepare, run

from schedlab.sched.spec import AUTO, ReplaySpec
from schedlab.sched.traces import LoadOptions, load_trace

ROOT = Path(__file__).resolve().parents[1]
#: what callers outside sched/ may take from sched.replay
PUBLIC = {"AUTO", "PolicyRun", "Prepared", "ReplayResult", "ReplaySpec", "prepare", "run", "write_atomic"}
#: modules outside sched/ allowed to build an engine, and why (the speed benchmarks import it to time it)
ENGINE_ALLOWED = {"benchmarks/pollux_optimiser.py": "reads the pollux policy's recorded optimiser problems"}
#: the folders of modules that replay (besides cli/)
CALLER_FOLDERS = ("tasks", "flows", "benchmarks", "studies", "tools")


def _callers() -> list[Path]:
    files = [*sorted((ROOT / "cli").glob("*.py")),
             *(path for folder in CALLER_FOLDERS for path in sorted((ROOT / folder).rglob("*.py")))]
    assert len(files) > 20 and all(f.exists() for f in files)
    return files


def _imports(tree: ast.AST) -> list[tuple[str, str]]:
    """(module, name) of every ``from M import name`` and ``import M``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return found


def _called(tree: ast.AST) -> set[str]:
    return {node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))}


def test_callers_outside_sched_replay_only_through_run():
    problems = []
    for path in _callers():
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), rel)
        for module, name in _imports(tree):
            if module == "schedlab.sched.replay" and name and name not in PUBLIC:  # `import M`: instrumentation
                problems.append(f"{rel}: imports {name} from schedlab.sched.replay")
        if "Engine" in _called(tree) and rel not in ENGINE_ALLOWED:
            problems.append(f"{rel}: builds an Engine")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rel", ["cli/replay.py", "tasks/replay.py"])
def test_the_cli_and_the_replay_task_call_run(rel):
    tree = ast.parse((ROOT / rel).read_text(), rel)
    assert ("schedlab.sched.replay", "run") in _imports(tree) and "run" in _called(tree)


def test_the_grep_finds_a_second_way(tmp_path):
    """The checks above fail on the code they forbid (a test that cannot fail proves nothing)."""
    tree = ast.parse("from schedlab.sched.replay import _replay\nfrom schedlab.sched.core.engine import Engine\n"
                     "Engine(jobs, cluster, policy).run()\n")
    assert ("schedlab.sched.replay", "_replay") in _imports(tree) and "Engine" in _called(tree)


SMALL = {"options": {"num_jobs": 30, "seed": 3}, "cluster": "4x4"}


def test_spec_is_plain_data():
    spec = ReplaySpec(**SMALL, policies=["fifo", {"name": "tiresias", "params": {"promote_knob": 4}}],
                      placement="consolidated", inference=None, annotate={"scheme": "gimbal"})
    assert spec.placement == "fewest-servers"  # the alias resolved: what the summaries record
    assert pickle.loads(pickle.dumps(spec)) == spec  # to Dask workers
    assert ReplaySpec.model_validate(json.loads(spec.model_dump_json())) == spec
    with pytest.raises(ValidationError):
        spec.seed = 4  # frozen


@pytest.mark.parametrize(("fields", "message"), [
    ({"policies": []}, "policies"),
    ({"policies": ["nosuch"]}, "unknown policy 'nosuch'"),
    ({"policies": [{"name": "tiresias", "params": {"promote_knob": "x"}}]}, "promote_knob"),
    ({"policies": [{"name": "tiresias", "params": {"nope": 1}}]}, "no parameter 'nope'"),
    ({"format": "csv"}, "unknown trace format 'csv'"),
    ({"cluster": "0x4"}, "cluster"),
    ({"seed": -1}, "seed"),
    ({"preemption_overhead_s": -1.0}, "preemption_overhead_s"),
    ({"allocation_stall_s": float("inf")}, "allocation_stall_s"),
    ({"placement": "tightest"}, "unknown placement 'tightest'"),
    ({"placement": "strict-best-fit", "policies": ["optimus"]}, "'optimus' assumes any free GPUs will do"),
    ({"annotate": "nosuch"}, "unknown annotation scheme"),
    ({"options": {"load": 0}}, "load"),
    ({"polices": ["fifo"]}, "unknown key.*did you mean 'policies'"),
])
def test_spec_validation_names_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        ReplaySpec(**{"policies": ["fifo"], **fields})


def test_model_uris_need_the_tasks_layers_fetch():
    spec = ReplaySpec(**SMALL, policies=["fifo"], iteration_time="models:/iteration-time/1")
    with pytest.raises(ValueError, match="models:/iteration-time/1: an MLflow URI"):
        run(spec)


@pytest.mark.parametrize(("policies", "annotated"), [(["fifo"], False), (["fifo", "sjf-ffs"], True)])
def test_auto_annotates_when_a_policy_of_the_replay_shares_gpus(policies, annotated):
    """``annotate: auto`` (the CLI's default): workloads for the whole comparison when any policy needs
    them, so that each policy replays the same jobs."""
    spec = ReplaySpec(**SMALL, policies=policies, annotate=AUTO)
    prepared = prepare(spec)
    assert ("model" in prepared.table.columns) is annotated and prepared.notes.get("annotated", False) is annotated
    results = run(spec, prepared)
    assert [r.policy for r in results] == policies
    assert results[0].summary["load_report"]["read"] == 30


def test_run_loads_the_trace_with_the_clusters_capacity():
    """Unset ``max_gpus``: the cluster's training GPUs (the synthetic generator sizes its jobs and load
    for them; a file's larger job is refused), as the CLI and the experiments always did."""
    spec = ReplaySpec(**SMALL, policies=["fifo"])
    table, _ = load_trace(None, "synthetic", LoadOptions(num_jobs=30, seed=3, max_gpus=16))
    assert prepare(spec).table.equals(table)
    [direct] = run(spec)
    [given] = run(spec, prepare(spec, table))
    assert direct.jobs.equals(given.jobs)
