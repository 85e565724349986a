"""An experiment with outside code and hostile names, run for real (``schedlab experiment`` as a process: a
Dask LocalCluster, Prefect's ephemeral API, MLflow on sqlite): a policy that never returns is stopped at
the per-replay time limit and one that calls ``sys.exit`` fails its replay with its own error, while the
other replays finish on the same workers; labels, trace names, the experiment's name and description and
parameter values reach MLflow's notes and Prefect's markdown artifact as text, never as markup."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from helpers import cli_env, policy_source, run_cli

POLICY = policy_source("Loops", "SysExit", extra='''

class NoteParams(BaseModel):
    note: str = ""


class Noted(Fifo):
    name = "noted"
    Params = NoteParams
''')

HOSTILE_LABEL = "**<script>alert(3)</script>**"
HOSTILE_TRACE = '"><img src=x onerror=alert(2)>'
HOSTILE_NAME = "trust <b>exp</b>"
HOSTILE_DESCRIPTION = ('<iframe src="https://evil.example/"></iframe> <a href="https://evil.example/">x</a>'
                       " [link](https://evil.example/) | a | b |")
HOSTILE_PARAM = '<script>alert(4)</script><img src="y">'
MARKUP = ("<script", "<img", "<iframe", "<a href", "<b>", "](https://evil")


def experiment_file(folder: Path) -> Path:
    (folder / "mine.py").write_text(POLICY)
    path = folder / "exp.yaml"
    path.write_text(json.dumps({  # JSON is YAML: every hostile string quoted as it is
        "name": HOSTILE_NAME, "description": HOSTILE_DESCRIPTION, "baseline": "fifo", "seeds": [0],
        "traces": [{"name": HOSTILE_TRACE, "format": "synthetic", "options": {"num_jobs": 40, "load": 3.0}}],
        "clusters": ["2x4"],
        "policies": ["fifo", "mine.py:Loops", "mine.py:SysExit", {"name": "sjf", "label": HOSTILE_LABEL},
                     {"name": "mine.py:Noted", "params": {"note": HOSTILE_PARAM}}],
    }))
    return path


def notes(db: Path) -> dict[str, str]:
    """Every MLflow note (runs' and the experiment's), by run name or experiment name."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        runs = con.execute("SELECT r.name, t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid"
                           " WHERE t.key = 'mlflow.note.content'").fetchall()
        experiments = con.execute("SELECT e.name, t.value FROM experiment_tags t JOIN experiments e"
                                  " ON e.experiment_id = t.experiment_id WHERE t.key = 'mlflow.note.content'").fetchall()
    return {f"run {name}": value for name, value in runs} | {f"experiment {name}": value for name, value in experiments}


def statuses(db: Path) -> dict[str, tuple[str, str | None]]:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        rows = con.execute("SELECT r.name, r.status, (SELECT value FROM tags t WHERE t.run_uuid = r.run_uuid"
                           " AND t.key = 'schedlab.error') FROM runs r").fetchall()
    return {name: (status, error) for name, status, error in rows}


def markdown_artifacts(prefect_db: Path) -> list[str]:
    with closing(sqlite3.connect(f"file:{prefect_db}?mode=ro", uri=True)) as con:
        return [row[0] for row in con.execute("SELECT data FROM artifact WHERE type = 'markdown'")]


@pytest.mark.slow
def test_looping_exiting_and_hostile_through_an_experiment(tmp_path: Path, seed_home) -> None:
    path = experiment_file(tmp_path)
    home = seed_home(tmp_path / "home")
    done = run_cli(["experiment", str(path), "--workers", "2", "--time-limit", "8"], cli_env(home), tmp_path,
                   timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output  # two replays failed, the experiment itself ran
    # the policies' failures end their replays, not the workers, and are reported as what they are
    assert "KilledWorker" not in output and "submitting it again" not in output
    assert 'mine.py", line' not in output  # no traceback through the policy's code

    runs = statuses(home / "mlflow.db")
    by_label = {name.split(" | ")[0]: value for name, value in runs.items() if " | " in name}
    assert by_label["fifo"][0] == by_label[HOSTILE_LABEL][0] == by_label["noted"][0] == "FINISHED"
    assert by_label["loops"][0] == "FAILED" and "stopped at the time limit of 8 s" in by_label["loops"][1]
    assert by_label["sysexit"][0] == "FAILED" and by_label["sysexit"][1].startswith("SystemExit(0) (raised at")
    assert "stopped at the time limit of 8 s" in done.stderr and "SystemExit(0)" in done.stderr

    texts = notes(home / "mlflow.db")
    assert len(texts) >= 6  # the experiment's, the comparison run's and one per replay
    for where, text in texts.items():
        assert not [m for m in MARKUP if m in text], (where, text)
    comparison = next(text for where, text in texts.items() if where.startswith("run ") and "comparison" in where)
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in comparison  # the label, shown as text
    artifacts = markdown_artifacts(home / "prefect" / "prefect.db")
    assert artifacts
    for text in artifacts:
        assert not [m for m in MARKUP if m in text], text
