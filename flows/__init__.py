"""schedlab.flows: Prefect flows (thin wiring). Importing it sets the project environment
(``$SCHEDLAB_HOME``, ``PREFECT_HOME``, telemetry off) before prefect or mlflow is imported."""

from schedlab.settings import apply_env as _apply_env

_apply_env()
