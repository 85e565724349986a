"""The shipped reproduction configs. The reproduce flow itself runs on a tiny config in
``test_reproduce_report.py`` (one run serves its tables, its MLflow records and its report)."""

from __future__ import annotations

from schedlab.flows.reproduce import DEFAULT_CONFIGS


def test_the_default_configs_validate():
    """The shipped reproduction configs read the real traces in ../shared (skipped without them)."""
    from helpers import shared_data
    from schedlab.sched.spec import load_config

    shared_data("traces", "philly", "philly_jobs_pollux.csv")
    shared_data("traces", "itp", "cluster04.csv")
    assert [load_config(c).name for c in DEFAULT_CONFIGS] == DEFAULT_CONFIGS
