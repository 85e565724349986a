"""schedlab.tasks: Prefect tasks, small wrappers around schedlab.sched (and, later, profiling).
Importing it sets the project environment before prefect or mlflow is imported."""

from schedlab.settings import apply_env as _apply_env

_apply_env()
