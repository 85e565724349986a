"""The canonical job table's ``name`` and ``time_limit`` columns (what the duration estimators read,
``docs/estimates.md``): read from every format that has them, checked like every other column."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from schedlab.sched.traces import TraceError, load_trace

FIX = Path(__file__).parent / "fixtures" / "traces"


def test_canonical_reads_name_verbatim_and_time_limit_in_seconds(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,num_gpus,duration,user,name,time_limit\n"
                    "a,0,1,100,u1,train-bert,3600\nb,10,2,50,u1,NA,\nc,20,1,70,u2,,7200\n")
    table, _ = load_trace(path)
    assert table["name"].tolist()[:2] == ["train-bert", "NA"]  # "NA" is a name
    assert table["name"].isna().tolist() == [False, False, True]
    assert table["time_limit"].tolist()[0::2] == [3600.0, 7200.0] and table["time_limit"].isna().tolist()[1]
    parquet = tmp_path / "t.parquet"
    table.to_parquet(parquet)
    again, _ = load_trace(parquet)
    assert again["name"].tolist()[:2] == ["train-bert", "NA"] and again["time_limit"].iloc[2] == 7200.0


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_a_bad_time_limit_names_its_row_and_column(tmp_path, value):
    path = tmp_path / "t.csv"
    path.write_text(f"job_id,submit_time,num_gpus,duration,time_limit\na,0,1,100,3600\nb,1,1,100,{value}\n")
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert "row 2" in str(err.value) and "time_limit" in str(err.value)


def test_helios_reads_jobname_where_the_file_has_it(tmp_path):
    plain, _ = load_trace(FIX / "helios_small.csv")
    assert "name" not in plain.columns  # the public release has no job names
    lines = (FIX / "helios_small.csv").read_text().splitlines()
    names = ["jobname", "bert", "bert", "tiny", "resnet", "bert"]
    path = tmp_path / "cluster_log.csv"
    path.write_text("\n".join(f"{line},{name}" for line, name in zip(lines, names)) + "\n")
    table, report = load_trace(path, "helios")
    assert report.kept == 4 and table["name"].tolist() == ["bert", "bert", "resnet", "bert"]


def test_alibaba_pai_takes_the_group_tag_as_the_name(tmp_path):
    plain, _ = load_trace(FIX / "pai")
    assert "name" not in plain.columns
    folder = tmp_path / "pai"
    shutil.copytree(FIX / "pai", folder)
    # headerless, as released: inst_id,user,gpu_type_spec,group,workload; job_b's instance has no row
    (folder / "pai_group_tag_table.csv").write_text("1001,user1,,g-ctr,ctr\n1005,user2,V100,g-bert,bert\n"
                                                    "1003,user1,,g-ctr,\n")
    table, _ = load_trace(folder)
    assert table["job_id"].tolist() == ["job_a", "job_b", "job_e"]
    assert table["name"].tolist()[0::2] == ["g-ctr", "g-bert"] and table["name"].isna().tolist()[1]
    again, _ = load_trace(folder / "pai_job_table.csv")  # the job table named: its sibling
    assert again["name"].tolist()[0] == "g-ctr"
