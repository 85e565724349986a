"""What users write is read strictly (issue #30): cluster files as strictly as experiment files, sizes
bounded before anything is allocated, pool names unique, a key given twice refused in every YAML the
project reads from users, a boolean never taken for a number, numpy numbers shown as plain numbers."""

from __future__ import annotations

import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import Field, ValidationError

from schedlab import checks
from schedlab.profiling.sweep import SweepError
from schedlab.profiling.sweep import load as load_sweep
from schedlab.sched.core.cluster import (
    MAX_GPUS,
    MAX_GPUS_PER_SERVER,
    MAX_SERVERS,
    ClusterError,
    ClusterSpec,
    ClusterState,
    PoolSpec,
    load_cluster,
)
from schedlab.sched.strict import UserModel
from schedlab.sched.traces import LoadOptions
from schedlab.sched.traces.common import MAX_JOBS


def cluster_file(tmp_path: Path, pools: str, head: str = "name: c\n") -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(head + "pools:\n" + textwrap.indent(textwrap.dedent(pools), "  "))
    return path


# ---- defect 1: every size has a documented limit, checked before anything is allocated -----------------
@pytest.mark.parametrize(("ref", "field", "limit"), [
    (f"{MAX_SERVERS + 1}x8", "servers", f"{MAX_SERVERS}"),
    (f"1x{MAX_GPUS_PER_SERVER + 1}", "gpus_per_server", f"{MAX_GPUS_PER_SERVER}"),
    (f"{MAX_SERVERS}x{MAX_GPUS_PER_SERVER}", "pools", f"{MAX_GPUS:,}"),
    ("100000000000000000000x8", "servers", f"{MAX_SERVERS}"),
])
def test_absurd_cluster_sizes_fail_naming_the_field_and_the_limit_before_allocating(ref, field, limit):
    tracemalloc.start()
    try:
        with pytest.raises(ClusterError) as err:
            load_cluster(ref)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"{field}:" in str(err.value) and limit in str(err.value), err.value
    assert peak < 5_000_000  # nothing per GPU was built


def test_cluster_file_sizes_are_bounded_too(tmp_path):
    path = cluster_file(tmp_path, """\
        - servers: 2
          gpus_per_server: 8
          gpu_memory_gb: 2000
        """)
    with pytest.raises(ClusterError, match=r"c\.yaml: .*pools\.0\.gpu_memory_gb: .*1024"):
        load_cluster(path)
    largest = load_cluster(f"{MAX_GPUS // 100}x100")  # the limit is reachable
    assert ClusterState(largest).total_gpus == MAX_GPUS


@pytest.mark.parametrize("field", ["num_jobs", "max_jobs", "sample"])
def test_job_counts_are_bounded(field):
    assert getattr(LoadOptions(**{field: MAX_JOBS}), field) == MAX_JOBS
    with pytest.raises(ValidationError, match=f"{field}[\\s\\S]*less than or equal to {MAX_JOBS}"):
        LoadOptions(**{field: MAX_JOBS + 1})


# ---- defect 2: two pools of one name are an error, not one pool silently dropped -----------------------
def test_duplicate_pool_names_name_the_file_and_the_duplicate(tmp_path):
    path = cluster_file(tmp_path, """\
        - {name: training, servers: 4, gpus_per_server: 8}
        - {name: training, servers: 2, gpus_per_server: 4}
        """)
    with pytest.raises(ClusterError) as err:
        load_cluster(path)
    assert str(path) in str(err.value) and "duplicate pool name 'training'" in str(err.value)
    with pytest.raises(ValidationError, match="duplicate pool name 'inference'"):
        ClusterSpec(name="c", pools=[PoolSpec(servers=1, gpus_per_server=8),
                                     PoolSpec(name="inference", servers=1, gpus_per_server=8),
                                     PoolSpec(name="inference", servers=2, gpus_per_server=8)])


# ---- defect 3: cluster files as strict as experiment files ----------------------------------------------
@pytest.mark.parametrize(("pools", "head", "expected"), [
    ("- {servers: 2, gpus_per_server: 8, gpu_memory_gib: 48}\n", "name: c\n",
     ["pools.0.gpu_memory_gib: unknown key", "did you mean 'gpu_memory_gb'", "known: name, servers"]),
    ("- {servers: 2, gpus_per_server: 8}\n", "name: c\nzones: 2\n", ["zones: unknown key", "known: name, pools"]),
    ("- {name: inference, servers: 2, gpus_per_server: 8}\n", "name: c\n", ["no pool named 'training'"]),
    ("- {name: trainig, servers: 2, gpus_per_server: 8}\n", "name: c\n",
     ["pools.0.name", "'training' or 'inference'", "trainig"]),
    ("- {servers: 2, gpus_per_server: 8, gpu_type: b300}\n", "name: c\n",
     ["pools.0.gpu_type: unknown GPU type 'b300'", "known: k80", "a6000"]),
    ("- {servers: 2, gpus_per_server: 8}\n", "name: ''\n", ["name:"]),
])
def test_cluster_files_refuse_what_they_do_not_know(tmp_path, pools, head, expected):
    path = cluster_file(tmp_path, pools, head)
    with pytest.raises(ClusterError) as err:
        load_cluster(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and all(e in message for e in expected), message


def test_unknown_gpu_type_in_the_shorthand_and_a_folder_are_errors(tmp_path):
    with pytest.raises(ClusterError, match=r"cluster '4x8:b300': gpu_type: unknown GPU type 'b300'; known: .*h200"):
        load_cluster("4x8:b300")
    assert load_cluster("4x8:H100").training_pool.gpu_type == "h100"  # known, in any case
    with pytest.raises(ClusterError, match="a folder, not a cluster file"):
        load_cluster(tmp_path)
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ClusterError, match="expected a mapping with name and pools, got list"):
        load_cluster(tmp_path / "list.yaml")


def test_loaning_needs_an_inference_pool_of_the_training_server_size():
    with pytest.raises(ClusterError, match="has no 'inference' pool to lend from"):
        load_cluster("4x8").lending_pool()
    mixed = ClusterSpec(name="m", pools=[PoolSpec(servers=2, gpus_per_server=8),
                                         PoolSpec(name="inference", servers=2, gpus_per_server=4)])
    with pytest.raises(ClusterError, match="inference pool has 4 GPUs per server, the training pool 8"):
        mixed.lending_pool()
    assert load_cluster("lyra-testbed").lending_pool().gpu_type == "t4"


# ---- defect 5: a boolean is no number; a key given twice is refused with its line ----------------------
def test_a_boolean_is_not_a_number_in_a_cluster_file(tmp_path):
    path = cluster_file(tmp_path, "- {servers: true, gpus_per_server: 8}\n")
    with pytest.raises(ClusterError, match=r"pools\.0\.servers: expected a number, got a boolean"):
        load_cluster(path)


def test_user_models_refuse_booleans_for_numbers_also_inside_lists():
    class Model(UserModel):
        n: int = 1
        xs: list[float] = []
        flag: bool = False
        either: float | None = None
        fraction: float = Field(default=0.5, gt=0, lt=1)

    assert Model(flag=True, xs=[1, 2.5]).flag is True  # a boolean field takes a boolean
    for bad, where in (({"n": True}, "n"), ({"xs": [1.0, False]}, "xs"), ({"either": True}, "either"),
                       ({"fraction": True}, "fraction")):  # out of range as 1, still named a boolean
        with pytest.raises(ValidationError, match=f"{where}\n.*expected a number, got a boolean"):
            Model(**bad)


def test_duplicate_keys_are_refused_with_their_lines():
    with pytest.raises(checks.DuplicateKeyError, match=r"line 3: duplicate key 'servers' \(first at line 1\)"):
        checks.load_yaml("servers: 4\ngpus_per_server: 8\nservers: 5\n")
    with pytest.raises(yaml.YAMLError, match="duplicate key 'a'"):
        checks.load_yaml("[{a: 1, a: 2}]")
    # a merge key's values may be overridden: that is no duplicate
    assert checks.load_yaml("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\n")["other"] == {"x": 3, "y": 2}


def test_cluster_files_refuse_duplicate_keys(tmp_path):
    path = cluster_file(tmp_path, "- servers: 4\n  gpus_per_server: 8\n  servers: 2\n")
    with pytest.raises(ClusterError, match=rf"{path}: not valid YAML: line 5: duplicate key 'servers'"):
        load_cluster(path)


def test_sweep_files_refuse_duplicate_keys(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("name: s\nsolo: {workloads: [mlp], batch_sizes: [8]}\nsolo: {workloads: [cnn]}\n")
    with pytest.raises(SweepError, match=rf"{path}: not valid YAML: line 3: duplicate key 'solo'"):
        load_sweep(str(path))


# ---- defect 6: numbers in messages as the user wrote them ---------------------------------------------
def test_numpy_numbers_in_messages_are_plain_numbers():
    assert checks.plain(np.float64(1.7)) == 1.7 and type(checks.plain(np.float64(1.7))) is float
    assert type(checks.plain(np.int64(5))) is int and checks.plain("x") == "x"
    with pytest.raises(ValidationError) as err:
        LoadOptions(load=np.float64(-1.7))
    message = checks.validation_message(err.value)
    assert "(got -1.7)" in message and "np." not in message, message


# ---- what a YAML value may expand to: aliases, recursion, nesting ----------------------------------

BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{b}: &{b} [*{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


@pytest.mark.parametrize("text, message", [
    ("&a [*a]", "line 1: a value that contains itself"),
    ("x: &m {y: *m}", "line 1: a value that contains itself"),
    (BOMB, "line 7: expands to more than 1,000,000 values"),  # 9**7 "lol"s at g: refused before any is built
    ("[" * 150 + "]" * 150, "nested more than 100 lists or mappings deep"),
    ("[" * 5000 + "]" * 5000, "nested more than 100 lists or mappings deep"),  # deeper than the composer recurses
])
def test_yaml_that_refers_to_itself_or_explodes_is_refused(text: str, message: str) -> None:
    with pytest.raises(checks.YAMLLimitError, match=message):
        checks.load_yaml(text)


def test_yaml_limits_leave_ordinary_aliases_and_every_shipped_file_alone() -> None:
    from schedlab import conf

    assert checks.load_yaml("a: &x [1, 2]\nb: *x\nc: *x\n") == {"a": [1, 2], "b": [1, 2], "c": [1, 2]}
    assert checks.load_yaml("[" * 100 + "]" * 100) is not None
    with pytest.raises(checks.YAMLLimitError, match="more than 10 values"):
        checks.load_yaml("[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]", max_nodes=10)
    files = sorted(conf.path().rglob("*.yaml"))
    assert files and all(checks.load_yaml(path.read_text()) is not None for path in files)


def test_experiment_files_refuse_an_alias_bomb(tmp_path: Path) -> None:
    from schedlab.sched.spec.experiment_file import ConfigError, load_config

    path = tmp_path / "exp.yaml"
    path.write_text("name: bomb\npolicies: [fifo]\n" + BOMB)
    with pytest.raises(ConfigError, match=rf"{path}: not valid YAML: line \d+: expands to more than"):
        load_config(path)


@pytest.mark.parametrize("value, message", [
    ("&a [*a]", "a value that contains itself"),
    ("&a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]", None),  # an anchor alone is plain YAML
    ('&a ["x","x","x","x","x","x","x","x","x","x"] ', None),
])
def test_set_values_are_limited(tmp_path: Path, value: str, message: str | None) -> None:
    from helpers import cli_env, run_cli

    policy = tmp_path / "anything.py"
    policy.write_text(
        "from typing import Any\nfrom pydantic import BaseModel\nfrom schedlab.sched.api import Policy\n\n\n"
        "class P(BaseModel):\n    anything: Any = None\n\n\n"
        "class Anything(Policy):\n    name = 'anything'\n    Params = P\n\n"
        "    def on_arrival(self, engine, job):\n        self.job = job\n\n"
        "    def schedule(self, engine):\n        pass\n")
    args = ["replay", "--policy", "anything.py:Anything", "--set", f"anything.anything={value}", "--num-jobs", "3",
            "--no-progress", "--out", str(tmp_path / "out")]
    done = run_cli(args, cli_env(tmp_path / "home"), tmp_path, timeout=120)
    if message is None:  # gets as far as the replay (which the do-nothing policy fails: no job finishes)
        assert "--set" not in done.stderr, done.stderr
        return
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"schedlab replay: error: --set 'anything.anything={value}': VALUE refused: line 1: {message}"
        " (an alias inside its own anchor)"]


def test_set_value_alias_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    from schedlab.sched.spec.fields import MAX_SET_NODES, set_params

    one_line = BOMB.replace("\n", ", ").rstrip(", ")
    with pytest.raises(ValueError, match=rf"VALUE refused: line 1: expands to more than {MAX_SET_NODES:,} values"):
        set_params([f"fifo.x={{{one_line}}}"], {"fifo": "fifo"})
