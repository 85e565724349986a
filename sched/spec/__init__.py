"""The one schema: what a replay is (:class:`ReplaySpec` and its :class:`PolicyRun`) and what an
experiment is (:class:`ExperimentSpec`, a grid of replays), the only place an option is parsed,
canonicalised and validated. The command line and the experiment YAML translate into these models and
re-word their errors (the flag; the file, key path and line: :func:`load_config`).

- :mod:`~schedlab.sched.spec.fields`: the checks the two share, each written once;
- :mod:`~schedlab.sched.spec.replay`: :class:`PolicyRun`, :class:`ReplaySpec`;
- :mod:`~schedlab.sched.spec.experiment`: :class:`ExperimentSpec` and its replays (:class:`ExperimentReplay`);
- :mod:`~schedlab.sched.spec.experiment_file`: an experiment YAML read into an :class:`ExperimentSpec`.

What a field names that must be read to be checked (a ξ table or model, an iteration-time model, an
inference-load series) is read by :mod:`schedlab.sched.parts`, once."""

from schedlab.sched.spec.fields import AUTO, LATEST, SpecError, set_params
from schedlab.sched.spec.replay import PolicyRun, ReplaySpec, policy_runs
from schedlab.sched.spec.experiment import ExperimentReplay, ExperimentSpec, ModelSources, PolicyEntry, TraceEntry
from schedlab.sched.spec.experiment_file import CONF_DIR, ConfigError, load_config

__all__ = ["AUTO", "CONF_DIR", "ConfigError", "ExperimentReplay", "ExperimentSpec", "LATEST", "ModelSources",
           "PolicyEntry", "PolicyRun", "ReplaySpec", "SpecError", "TraceEntry", "load_config", "policy_runs",
           "set_params"]
