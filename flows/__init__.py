"""schedlab.flows: Prefect flows (thin wiring). Importing it changes nothing: the entry point applies
the project's :class:`~schedlab.settings.Settings` (``$SCHEDLAB_HOME``, ``PREFECT_HOME``, telemetry off)
before prefect or mlflow is imported."""

#: what ``schedlab reproduce`` runs without arguments (names in conf/experiments/); here, not in
#: :mod:`schedlab.flows.reproduce`, so that ``--help`` lists them without importing prefect
REPRODUCE_CONFIGS = ["castor-pollux", "sjf-bsbf-pollux", "sjf-bsbf-pollux-480", "castor-philly", "sjf-bsbf-philly",
                     "castor-itp"]
