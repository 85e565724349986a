"""A policy's parameters are recorded as JSON (the runs' ``params.*``): a default or a given value that cannot
be encoded is refused where the policy is loaded or its parameters given, naming the policy and the
parameter, before any replay, Dask worker or MLflow run starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import cli_env, run_cli
from schedlab.sched import policies as registry
from schedlab.sched.policies import POLICIES, load_policy_class, make_policy, unloggable

HEAD = ("from typing import Any\nfrom pydantic import BaseModel\nfrom schedlab.sched.api import Policy\n\n\n"
        "class Fifo(Policy):\n    def on_arrival(self, engine, job):\n        self.q = [*getattr(self, 'q', []), job]\n\n"
        "    def schedule(self, engine):\n        while self.q and engine.start(self.q[0]):\n"
        "            self.q.pop(0)\n\n\n")
BYTES_DEFAULT = HEAD + ("class P(BaseModel):\n    tag: bytes = b'\\xff\\x00'\n\n\n"
                        "class BytesDefault(Fifo):\n    name = 'bytes-default'\n    Params = P\n")
OBJECT_DEFAULT = HEAD + ("class P(BaseModel):\n    model_config = {'arbitrary_types_allowed': True}\n"
                         "    thing: object = object()\n\n\n"
                         "class ObjectDefault(Fifo):\n    name = 'object-default'\n    Params = P\n")
ANY_PARAM = HEAD + ("class P(BaseModel):\n    anything: Any = None\n\n\n"
                    "class AnyParam(Fifo):\n    name = 'any-param'\n    Params = P\n")


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    for name, text in (("bytes_default", BYTES_DEFAULT), ("object_default", OBJECT_DEFAULT), ("any_param", ANY_PARAM)):
        (tmp_path / f"{name}.py").write_text(text)
    return tmp_path


@pytest.mark.parametrize("spec, message", [
    ("bytes_default.py:BytesDefault", r"BytesDefault.Params: the default of parameter 'tag' \(b'\\xff\\x00'\) cannot"
                                      r" be encoded as JSON: 'utf-8' codec can't decode byte 0xff"),
    ("object_default.py:ObjectDefault", r"ObjectDefault.Params: the default of parameter 'thing' \(<object object"
                                        r" at .*>\) cannot be encoded as JSON"),
])
def test_an_unencodable_default_is_refused_when_the_policy_is_loaded(policies: Path, spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=rf"policy '{policies}/{spec}': {message}"):
        load_policy_class(registry.resolve_spec(spec, policies))


def test_an_unencodable_value_given_is_refused_naming_policy_and_parameter(policies: Path) -> None:
    spec = registry.resolve_spec("any_param.py:AnyParam", policies)
    assert make_policy(spec, {"anything": {"a": [1, "x", None]}}).params.anything == {"a": [1, "x", None]}
    with pytest.raises(ValueError, match=rf"bad parameters for policy '{spec}': parameter 'anything' \(b'\\xff'\)"
                                         " cannot be encoded as JSON"):
        make_policy(spec, {"anything": b"\xff"})


def test_every_shipped_policy_records_its_defaults() -> None:
    assert {name: unloggable(cls.Params()) for name, cls in POLICIES.items()} == dict.fromkeys(POLICIES)


@pytest.mark.parametrize("command", [
    ["replay", "--policy", "fifo", "bytes_default.py:BytesDefault", "sjf", "--num-jobs", "5", "--track"],
    ["check-policy", "bytes_default.py:BytesDefault"],
    ["replay", "--policy", "any_param.py:AnyParam", "--set", "any-param.anything=!!binary /w==", "--num-jobs", "5"],
])
def test_the_commands_refuse_it_in_one_line_before_any_work(policies: Path, command: list[str]) -> None:
    home = policies / "home"
    done = run_cli(command, cli_env(home), policies, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "cannot be encoded as JSON" in line and ("'tag'" in line or "'anything'" in line)
    assert not (home / "mlflow.db").exists() and not (home / "replays").exists()  # nothing started


def test_an_experiment_with_such_a_policy_is_refused_before_dask_starts(policies: Path) -> None:
    from schedlab.sched.spec.experiment_file import ConfigError, load_config

    path = policies / "exp.yaml"
    path.write_text("name: bad-params\npolicies: [fifo, bytes_default.py:BytesDefault]\n"
                    "traces: [{name: synthetic, format: synthetic, options: {num_jobs: 5}}]\nclusters: [1x4]\n")
    with pytest.raises(ConfigError, match=r"parameter 'tag' .* cannot be encoded as JSON"):
        load_config(path)
