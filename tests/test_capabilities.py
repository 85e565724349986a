"""Issue #28 items 4-5: each policy's needs checked before any replay, fallbacks warned once and cited
by ``same_as``, annotation schemes that combine, fractional iterations through the canonical format."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from schedlab.sched.policies import POLICIES
from schedlab.sched.policy_needs import (
    CapabilityError, CapabilityWarning, check, predict, setup_capabilities, table_capabilities,
)
from schedlab.sched.core.pools import LoanOptions
from schedlab.sched.replay import prepare, run
from schedlab.sched.spec import PolicyRun, ReplaySpec
from schedlab.sched.traces import LoadOptions, load_trace
from schedlab.sched.models.annotate import annotate, annotation_schemes, scheme_seed
from schedlab.sched.reporting import compare
from schedlab.sched.spec import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
LOAN = LoanOptions(load="diurnal:0.42:0.95")
SMALL = {"num_jobs": 120, "load": 2.0, "seed": 3}


def _fallbacks(spec: ReplaySpec) -> dict[str, str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepare(spec)
    return {str(w.message).split()[0]: str(w.message) for w in caught if w.category is CapabilityWarning}


def test_a_sharing_policy_without_workloads_fails_before_any_replay() -> None:
    # Lyra's annotation alone gives no workloads: gimbal-jct used to abort mid-way (SharingError)
    spec = ReplaySpec(options=SMALL, annotate={"scheme": "lyra"}, policies=["fifo", "gimbal-jct"])
    done: list[str] = []
    with pytest.raises(CapabilityError, match=r"^policy 'gimbal-jct' cannot run here: it needs jobs with workloads"):
        run(spec, each=lambda r: done.append(r.policy))
    assert done == []  # not even fifo, listed first, was replayed


def test_fallbacks_are_warned_and_vanish_when_the_setup_has_the_mechanism() -> None:
    plain = ReplaySpec(options=SMALL, annotate=True, policies=["lyra", "opportunistic", "gandiva-elastic", "lucid",
                                                              "castor", "sjf"])
    messages = _fallbacks(plain)
    assert set(messages) == {"lyra", "opportunistic", "gandiva-elastic", "lucid"}  # castor, sjf: their own
    assert messages["lyra"].startswith("lyra decides as sjf here: it lacks fungible jobs")
    assert messages["gandiva-elastic"].startswith("gandiva-elastic decides as fifo here: it lacks elastic jobs")
    assert messages["lucid"].startswith("lucid decides as ssf here: it lacks a ξ source")
    # Lyra's attributes on top of the workloads, an inference pool and per-workload ξ: nobody falls back
    full = plain.model_copy(update={"annotate": ["pollux", {"scheme": "lyra"}], "inference": LOAN,
                                    "interference": "table:h200-pairs.csv", "cluster": "showdown"})
    assert _fallbacks(ReplaySpec.model_validate(full.model_dump())) == {}
    # a constant ξ low enough for pairs to score 1 + 1 packs (the digests' lucid case)
    assert "lucid" not in _fallbacks(plain.model_copy(update={"interference": "analytic:1.1"}))


def test_check_counts_unknown_columns_as_present_and_names_what_lacks() -> None:
    assert check(["castor"], set(), unknown={"workloads"}) == []
    with pytest.raises(CapabilityError, match="traces: t: policy 'castor' cannot run here"):
        check(["castor"], set(), where="traces: t: ")
    [fallback] = check(["opportunistic"], {"fungible"})
    assert (fallback.policy, fallback.decides_as) == ("opportunistic", "sjf") and "inference pool" in fallback.reason
    assert fallback.short == "opportunistic lacks fungible+inference"
    assert predict(["pollux", {"scheme": "lyra"}], None, from_file=False) == ({"workloads", "fungible", "elastic"}, set())
    assert predict(["pollux", {"scheme": "lyra", "checkpoint": 1.0}], None, from_file=False)[0] == {
        "workloads", "fungible", "elastic", "checkpoint"}
    assert predict(False, "philly", from_file=True) == ({"checkpoint"}, set())  # no job restarts from zero
    assert predict(False, "canonical", from_file=True)[1] == {"workloads", "goodput", "fungible", "elastic",
                                                               "checkpoint"}


def _table(n: int = 200) -> pd.DataFrame:
    table, _ = load_trace(None, "synthetic", LoadOptions(**(SMALL | {"num_jobs": n})))
    return table


def test_combined_annotation_writes_both_schemes_columns() -> None:
    table = _table()
    both = annotate(table, seed=5, scheme=["catalog", {"scheme": "lyra", "scenario": "advanced"}])
    alone = annotate(table, seed=5, scheme="pollux")
    pd.testing.assert_frame_equal(both[alone.columns], alone)  # the first scheme draws as alone
    assert {"fungible", "elastic_min", "elastic_max", "heterogeneous"} <= set(both.columns)
    assert both["fungible"].any() and (both["elastic_max"] > both["elastic_min"]).any()
    from schedlab.sched.models.annotate import lyra_scenario

    # the second scheme draws with its own seed, not the replay's (else both read the same uniforms)
    pd.testing.assert_frame_equal(both, lyra_scenario(alone, "advanced", scheme_seed(5, 1)))
    assert scheme_seed(5, 1) != 5 and scheme_seed(5, 0) == 5
    pd.testing.assert_frame_equal(annotate(table, seed=5, scheme=["pollux"]), alone)


@pytest.mark.parametrize("schemes, message", [
    (["lyra", "pollux"], "give the workload scheme before the Lyra one"),
    (["pollux", "gimbal"], r"annotate\[1\]: two workload schemes"),
    (["pollux", "lyra", {"scheme": "lyra"}], r"annotate\[2\]: two Lyra schemes"),
    ([], "an empty list"),
    (["pollux", "nosuch"], r"annotate\[1\]: unknown annotation scheme 'nosuch'"),
    ([{"scheme": "lyra", "scenario": "x"}], r"annotate\[0\]: annotation scheme lyra: scenario"),
])
def test_combined_annotation_conflicts_are_named(schemes: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        annotation_schemes(schemes)
    with pytest.raises(ValidationError, match=message):
        ReplaySpec(annotate=schemes, policies=["fifo"])


def test_an_annotated_table_round_trips_through_the_canonical_format(tmp_path: Path) -> None:
    spec = ReplaySpec(options=SMALL, annotate=["pollux", {"scheme": "lyra", "scenario": "advanced"}], policies=["lyra"])
    table = prepare(spec).table
    assert (table["iterations"] != np.floor(table["iterations"])).any()  # fractional by design
    path = tmp_path / "annotated.csv"
    table.to_csv(path, index=False)
    back, _ = load_trace(path)
    assert set(back.columns) == set(table.columns)
    for column in table.columns:  # iterations exact; heterogeneous was silently dropped before
        assert (back[column].to_numpy() == table[column].to_numpy()).all(), column
    bad = tmp_path / "bad.csv"  # batch sizes stay integers
    bad.write_text("job_id,submit_time,num_gpus,model,batch_size,iterations\na,0,1,bert,8.5,10.5\n")
    with pytest.raises(ValueError, match="column 'batch_size'.*not an integer"):
        load_trace(bad)


def _config(tmp_path: Path, annotate: str, policies: str, extra: str = "") -> Path:
    path = tmp_path / "e.yaml"
    path.write_text(f"name: e\nseeds: [0]\ntraces:\n  - name: t\n    options: {{num_jobs: 50}}\n"
                    f"    annotate: {annotate}\nclusters: [castor-sim]\npolicies: {policies}\n{extra}")
    return path


def test_experiment_validation_fails_or_warns_before_any_replay(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"e\.yaml: traces: t: policy 'gimbal-jct' cannot run here: it needs jobs"):
        load_config(_config(tmp_path, "{scheme: lyra}", "[fifo, gimbal-jct]"))
    with pytest.warns(CapabilityWarning, match="lyra decides as sjf here") as caught:
        config = load_config(_config(tmp_path, "true", "[fifo, lyra, sjf]"))
    assert len([w for w in caught if w.category is CapabilityWarning]) == 1  # once, not per seed or replay
    assert set(config.fallbacks()) == {("t", "castor-sim", "lyra")}


def test_same_as_cites_the_fallback() -> None:
    jct = {"fifo": 11.0, "lyra": 10.0, "sjf": 10.0, "ssf": 9.0, "srtf": 9.0}
    rows = [{"trace": "t", "cluster": "c", "policy": p, "seed": s, "avg_jct_s": v, "p95_jct_s": 20.0,
             "avg_wait_s": 1.0, "avg_queue_s": 1.0, "makespan_s": 30.0, "gpu_util": 0.5}
            for p, v in jct.items() for s in (0, 1)]
    fallbacks = {("t", "c", "lyra"): check(["lyra"], set())[0]}
    table = compare.comparison(rows, "fifo", list(jct), fallbacks).set_index("policy")
    assert table.loc["sjf", compare.SAME_AS] == "lyra: lyra lacks fungible+inference | elastic | goodput"
    assert table.loc["srtf", compare.SAME_AS] == "ssf"  # identical here without a declared reason
    assert table.loc["lyra", compare.SAME_AS] == ""


def test_the_quickstart_gives_every_policy_what_its_mechanism_needs() -> None:
    # issue #28 item 5: no policy of the quickstart falls back to another's behaviour, judged from the
    # file at validation (no CapabilityWarning) and from the prepared table of each seed (no replay)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CapabilityWarning)
        config = load_config(ROOT / "conf" / "experiments" / "quickstart.yaml")
    assert config.policies == "all" and config.fallbacks() == {}
    specs = config.grid("v1")
    for seed in config.seeds:
        spec = next(s for s in specs if s.seed == seed).spec()
        spec = spec.model_copy(update={"policies": tuple(PolicyRun(name=name) for name in POLICIES)})
        with warnings.catch_warnings():
            warnings.simplefilter("error", CapabilityWarning)
            table = prepare(spec).table
        assert {"workloads", "fungible", "elastic", "checkpoint"} <= table_capabilities(table), seed
        present = table_capabilities(table) | setup_capabilities(spec.interference, spec.inference is not None)
        assert check(list(POLICIES), present) == [], seed
        assert table["fungible"].any() and (table["elastic_max"] > table["elastic_min"]).any()


def test_on_the_showdown_setup_formerly_identical_policies_differ() -> None:
    spec = ReplaySpec(options=SMALL | {"num_jobs": 300}, annotate=["pollux", {"scheme": "lyra"}], cluster="showdown",
                      inference=LOAN, policies=["sjf", "lyra", "fifo", "gandiva-elastic"])
    jct = {r.policy: r.summary["avg_jct_s"] for r in run(spec)}
    assert jct["sjf"] != jct["lyra"] and jct["fifo"] != jct["gandiva-elastic"], jct


def _slices(checkpoint: object) -> pd.DataFrame:
    """Two 1-GPU jobs of three Gavel rounds each (18 min) on one GPU: Gavel alternates them every round."""
    return pd.DataFrame({"job_id": ["a", "b"], "submit_time": [0.0, 0.0], "num_gpus": [1, 1],
                         "duration": [1080.0, 1080.0], "checkpoint": [checkpoint, checkpoint]})


@pytest.mark.parametrize("policy", ["gavel", "gimbal-makespan"])
def test_a_time_slicer_refuses_jobs_that_restart_from_zero(policy: str, tmp_path: Path) -> None:
    # Lyra's annotation (checkpoint share 0) made every preemption lose the job's progress: Gavel's rounds
    # preempt regardless of progress, so jobs longer than a slice restarted forever and the replay never ended
    annotate = False if policy == "gavel" else "pollux"
    spec = ReplaySpec(cluster="1x1", policies=[policy], annotate=annotate)
    with pytest.raises(CapabilityError, match=rf"^policy '{policy}' cannot run here: .*keep their progress"):
        prepare(spec, _slices(False))
    done = run(spec, prepare(spec, _slices(True)))[0].jobs
    assert len(done) == 2  # both finished
    if policy == "gavel":  # alone (no workloads, nothing packs) they alternated, each slice checkpointed
        assert done["preemptions"].sum() >= 2
    with pytest.raises(ConfigError, match=rf"policy '{policy}' cannot run here: .*checkpoint: 1.0"):
        load_config(_config(tmp_path, "[pollux, {scheme: lyra}]", f"[{policy}]"))
    assert load_config(_config(tmp_path, "[pollux, {scheme: lyra, checkpoint: 1.0}]", f"[{policy}]")).fallbacks() == {}


def test_the_showdown_file_validates_with_every_mechanism_and_no_fallback(tmp_path: Path) -> None:
    # issue #28 item 4: one set-up, nine policies, none deciding as another; shipped sources only
    config = load_config(ROOT / "conf" / "experiments" / "showdown.yaml")
    assert [e.label or e.name for e in config.policy_entries()] == [
        "castor", "sjf-bsbf", "gimbal-jct", "lyra", "pollux", "tiresias", "gavel", "lucid", "fifo"]
    assert config.fallbacks() == {} and config.seeds == [0, 1, 2] and config.clusters == ["showdown"]
    [trace] = config.traces
    present, unknown = predict(trace.annotate, trace.format, trace.source not in (None, "synthetic"))
    assert present == {"workloads", "fungible", "elastic", "checkpoint"} and unknown == set()
    assert config.resolve_inference()["load"].startswith("diurnal:")  # no ../shared series needed
    assert config.models.interference == "model:interference-gavel-v100"  # shipped, per-pair ξ
    # without checkpoints, gavel could not run it: one line, before any replay
    text = (ROOT / "conf" / "experiments" / "showdown.yaml").read_text()
    assert "checkpoint: 1.0" in text
    (tmp_path / "showdown.yaml").write_text(text.replace("checkpoint: 1.0", "checkpoint: 0.0"))
    with pytest.raises(ConfigError, match=r"showdown\.yaml: traces: synthetic-lyra: policy 'gavel' cannot run here"):
        load_config(tmp_path / "showdown.yaml")
