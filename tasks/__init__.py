"""schedlab.tasks: Prefect tasks, small wrappers around schedlab.sched (and, later, profiling).
Importing it changes nothing: the entry point applies the project's :class:`~schedlab.settings.Settings`
before prefect or mlflow is imported."""
