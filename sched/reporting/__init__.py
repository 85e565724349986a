"""Reporting: pure functions that turn replay results into what people read (comparison tables, plots,
``comparison.html``, the paper-reproduction report, the content of the MLflow view). Usable without
Prefect or MLflow; the tasks layer logs what these functions produce."""
