"""What an experiment is (``conf/experiments/*.yaml``): :class:`ExperimentSpec`, a grid of replays over
traces, loads, clusters, policies and seeds, validated with the same checks as a replay's fields
(:mod:`schedlab.sched.spec.fields`), and its expansion into replays.

.. code-block:: yaml

    name: quickstart                 # the MLflow experiment
    description: optional text
    baseline: fifo                   # reference policy (label) of the comparison; default: first policy
    seeds: [0, 1]                    # each seed: the replay seed and, unless options.seed is given,
                                     # the trace seed (synthetic traces differ per seed)
    traces:
      - name: synthetic
        source: null                 # a path; relative: against the YAML's folder, then the cwd
        format: synthetic            # default: detected from the file
        options: {num_jobs: 500, load: 2.0}   # LoadOptions fields; `load` may be a list (a sweep)
        annotate: false              # assign workloads from the catalog (Castor §9.1); or gimbal /
                                     #   {scheme: gimbal, max_duration_s: …} (Gimbal §7.1, annotate.py),
                                     #   {scheme: lyra, scenario: basic}, or a list: [pollux, lyra];
                                     #   null (or the key left out): false
    clusters: [castor-sim]           # shipped name, YAML path or NxG[:type]
    policies: all                    # every registered policy, or a list of names and/or
                                     #   {name: tiresias, params: {promote_knob: 4}, label: tiresias-k4};
                                     #   a name may be your own policy: path/to/file.py:Class (relative:
                                     #   against the YAML's folder, then the cwd) or pkg.module:Class
    placement: fewest-servers       # or strict-consolidated, strict-best-fit, best-fit, random (consolidated = fewest-servers)
    preemption_overhead_s: null      # default: the policy's (63 s for most); seconds, or by the restarting
                                     #   job's GPU count: "1:7,8:30,inf:60" or helios (the Helios simulator's)
    allocation_stall_s: null         # every start and resize stalls the job this long (default: the policy's:
                                     #   30 s for the round policies as Pollux's study, 0 for lyra and the rest);
                                     #   seconds, or by the job's GPU count: "1:2.2,inf:2.7"
    models: {interference: analytic, iteration_time: catalog}   # or `models: latest`
                                     # interference: analytic[:XI] | gavel:… | table:… | model:PATH|URI
                                     # iteration_time: catalog | PATH | models:/iteration-time/N
                                     # latest: the newest registered version (models:/NAME/N at start)
    smact_profiles: null             # or a profile store folder: replays add the SM-activity metrics
    inference: null                  # or {load: PATH[:MODEL] | constant:U, predictor: oracle|last,
                                     #   headroom: 0.02, period_s: 300, reclaim: lyra|scf|random,
                                     #   gpu_equivalence: 3, lose_progress: true}: inference servers
                                     #   lent to training (Lyra; clusters need an inference pool)
    time_limit_s: 7200               # a replay still running after this is stopped and fails (the
                                     #   policy's call in progress named); --time-limit overrides it
    paired_interval: t               # the comparison's paired 95 % intervals over seeds: t (Student) or
                                     #   bootstrap (percentile, 2,000 resamples)
    figures: true                    # false: no figures (each replay's CDFs, the comparison's CDFs, CCDFs and
                                     #   headline bars); the tables, pages and metrics as ever

Every (trace, load, cluster, policy, params, seed) is one replay, an :class:`ExperimentReplay`: the
experiment's names for it (label, trace label) and, through :meth:`ExperimentReplay.spec`, the
:class:`~schedlab.sched.spec.replay.ReplaySpec` a worker runs. It is identified by :attr:`ExperimentReplay.key`
(a hash of everything that determines its result plus the code version): the idempotency key
the MLflow runs are tagged with.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from schedlab.sched.contained import DEFAULT_TIME_LIMIT_S
from schedlab.sched.core.pools import LoanOptions
from schedlab.sched.models.inference import is_synthetic
from schedlab.sched.policy_needs import Fallback
from schedlab.sched.spec import fields, inputs
from schedlab.sched.spec.fields import LATEST
from schedlab.sched.spec.replay import ReplaySpec
from schedlab.sched.strict import UserModel
from schedlab.sched.traces import LoadOptions

#: the most seeds an experiment may list (each multiplies every other axis of the grid)
MAX_SEEDS = 100


class TraceEntry(UserModel):
    model_config = ConfigDict(allow_inf_nan=False)

    name: str
    source: str | None = None
    format: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    annotate: bool | str | dict[str, Any] | list[str | dict[str, Any]] = False

    _annotate = field_validator("annotate")(lambda cls, value: fields.annotation(value))
    _format = field_validator("format")(lambda cls, value: fields.trace_format(value))

    @field_validator("annotate", mode="before")
    @classmethod
    def _annotate_shape(cls, value: Any) -> Any:
        """``annotate: null`` (or an empty ``annotate:``) is the key left out: no annotation; a value of no
        accepted shape is one error (not one per shape of the union)."""
        if value is None:
            return False
        if not isinstance(value, (bool, str, dict, list)):
            raise ValueError(f"expected false, a scheme (pollux, gimbal, …), a mapping {{scheme: …}} or a list of"
                             f" them, got {value!r}")
        return value

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, Any]) -> dict[str, Any]:
        loads = value.get("load", 1.0)
        for load in loads if isinstance(loads, list) else [loads]:
            LoadOptions.model_validate({**value, "load": load})  # raises with the field's name
        if isinstance(loads, list) and not loads:
            raise ValueError("load: an empty list")
        return value

    @property
    def loads(self) -> list[float]:
        loads = self.options.get("load", 1.0)
        return [float(x) for x in loads] if isinstance(loads, list) else [float(loads)]

    @property
    def sweeps_load(self) -> bool:
        return isinstance(self.options.get("load"), list)


class PolicyEntry(UserModel):
    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    label: str | None = None


class ModelSources(UserModel):
    """Where a replay's models come from. ``latest`` (either key, or ``models: latest`` for both) is
    the newest registered version, fixed to ``models:/NAME/N`` when the experiment starts. Files are
    read when the experiment file is (:func:`~schedlab.sched.spec.experiment_file.load_config`)."""

    interference: str = "analytic"
    iteration_time: str = "catalog"

    _interference = field_validator("interference")(lambda cls, value: fields.interference(value, latest=True))
    _iteration_time = field_validator("iteration_time")(lambda cls, value: fields.iteration_time(value, latest=True))


class ExperimentSpec(UserModel):
    """An experiment: the grid's axes (traces and their loads, clusters, policies, seeds) and what every
    replay of it shares (placement, overheads, models, SMACT profiles, inference servers lent)."""

    model_config = ConfigDict(allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _models_latest(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("models") == LATEST:
            data = {**data, "models": {"interference": LATEST, "iteration_time": LATEST}}
        return data

    name: str = Field(min_length=1)
    description: str | None = None
    baseline: str | None = None
    seeds: list[Annotated[int, Field(ge=0, lt=2**63)]] = Field(default_factory=lambda: [0], min_length=1,
                                                              max_length=MAX_SEEDS)
    traces: list[TraceEntry] = Field(min_length=1)
    clusters: list[str] = Field(min_length=1)
    policies: Literal["all"] | list[str | PolicyEntry] = "all"
    placement: str = "fewest-servers"
    preemption_overhead_s: float | str | None = None  # seconds, or a table by GPU count (sched/core/restore.py)
    allocation_stall_s: float | str | None = None  # seconds, or a table by GPU count (sched/core/restore.py)
    models: ModelSources = Field(default_factory=ModelSources)
    #: a profile store whose SMACT gives the replays' SM-activity distribution (Castor Fig. 12c/d)
    smact_profiles: str | None = None
    #: inference servers lent to training on an inference-load series (Lyra; sched/core/pools.py)
    inference: LoanOptions | None = None
    #: seconds a replay may run before it is stopped and fails (a policy that never returns; the shipped
    #: set-ups' longest replay takes about 10 minutes)
    time_limit_s: float = Field(default=DEFAULT_TIME_LIMIT_S, gt=0)
    #: how the comparison's paired intervals over seeds are computed (sched/reporting/paired.py)
    paired_interval: Literal["t", "bootstrap"] = "t"
    #: draw the figures: each replay's (its CDFs and GPU utilisation, a fifth of a CPU-second a replay on its
    #: worker) and the comparison's (CDFs, CCDFs, headline bars: seconds of the client's CPU a set-up);
    #: false for a sweep whose figures no one opens
    figures: bool = True

    _restore = field_validator("preemption_overhead_s", mode="before")(
        lambda cls, value: fields.restore_overhead(value))
    _stall = field_validator("allocation_stall_s", mode="before")(lambda cls, value: fields.allocation_stall(value))

    @field_validator("placement")
    @classmethod
    def _placement(cls, value: str, info: ValidationInfo) -> str:
        """The strategy's canonical name (what replays log), an old alias resolved; checked here against the
        registered policies (the others, files or modules, when the file is read: their paths are relative
        to it)."""
        from schedlab.sched.policies import POLICIES

        policies = info.data.get("policies", [])  # absent when the policies were invalid (reported there)
        names = POLICIES if policies == "all" else [p if isinstance(p, str) else p.name for p in policies]
        return fields.placement(value, [(name, POLICIES[name]) for name in names if name in POLICIES])

    # set by load_config: where relative paths resolve before the working folder (the file's folder, and for
    # a shipped file the checkout it is in: its `../shared/data/…` is beside the repository)
    _base_dir: Path = Path(".")
    _bases: tuple[Path, ...] = ()
    _path: Path | None = None

    def search_path(self) -> list[Path]:
        """Where a relative path in the file is looked for, in order: the file's folder, for a shipped file
        the checkout's root, then the working folder."""
        return list(dict.fromkeys([*(self._bases or (self._base_dir,)), Path.cwd()]))

    def policy_entries(self) -> list[PolicyEntry]:
        """The policies with a unique label each (``policies: all`` = the registry, read now); a file
        policy's path made absolute (:meth:`resolve_policy`); an external policy's default label is its
        class's ``name``."""
        from schedlab.sched.policies import POLICIES, policy_label

        if self.policies == "all":
            entries = [PolicyEntry(name=n) for n in POLICIES]
        else:
            entries = [PolicyEntry(name=p) if isinstance(p, str) else p for p in self.policies]
        entries = [e.model_copy(update={"name": self.resolve_policy(e.name)}) for e in entries]
        counts: dict[str, int] = {}
        for e in entries:
            counts[e.name] = counts.get(e.name, 0) + 1
        labelled = []
        for e in entries:
            base = policy_label(e.name)
            label = e.label or (base if counts[e.name] == 1 or not e.params else
                                f"{base}[{','.join(f'{k}={v}' for k, v in sorted(e.params.items()))}]")
            labelled.append(e.model_copy(update={"label": label}))
        return labelled

    def resolve_policy(self, spec: str) -> str:
        """A policy spec with a relative file path made absolute (:meth:`search_path`)."""
        from schedlab.sched.policies import resolve_spec, spec_kind

        if spec_kind(spec) != "file":
            return spec
        target = Path(spec.rpartition(":")[0]).expanduser()
        for base in self.search_path():
            if (base / target).exists():
                return resolve_spec(spec, base)
        return resolve_spec(spec, self._base_dir)

    @property
    def baseline_label(self) -> str:
        return self.baseline or self.policy_entries()[0].label  # type: ignore[return-value]

    def resolve_source(self, source: str | None) -> str | None:
        """An absolute path for a relative trace path (:meth:`search_path`; not found: the file's folder's); a URL
        as it is."""
        if source is None or source == "synthetic":
            return None
        if inputs.is_url(source):
            return source
        path = Path(source).expanduser()
        if path.is_absolute():
            return str(path)
        for base in self.search_path():
            if (base / path).exists():
                return str((base / path).resolve())
        return str((self._base_dir / path).resolve())

    def resolve_path(self, text: str) -> str:
        """``text`` as an absolute path when it is a relative one found on :meth:`search_path`, else as it is
        (an absolute path, a shipped model's or table's name, a file that does not exist: its reader says so)."""
        path = Path(text).expanduser()
        if path.is_absolute():
            return text
        for base in self.search_path():
            if (base / path).exists():
                return str((base / path).resolve())
        return text

    def resolve_models(self) -> dict[str, str]:
        """The models with their relative file paths made absolute (:meth:`resolve_path`): the replays'
        workers read the files the experiment file means, whatever their working folder."""
        from schedlab.sched.models.interference import with_paths

        models = self.models.model_dump()
        if fields.reads_files(models["iteration_time"]):
            models["iteration_time"] = self.resolve_path(models["iteration_time"])
        if models["interference"] != LATEST:
            models["interference"] = with_paths(models["interference"], self.resolve_path)
        return models

    def resolve_profiles(self) -> str | None:
        """``smact_profiles`` as an absolute path (relative: to the YAML's folder, else the cwd); it
        must be a profile store (a ``records/`` folder)."""
        if self.smact_profiles is None:
            return None
        path = Path(self.resolve_source(self.smact_profiles) or self.smact_profiles)
        if not (path / "records").is_dir():
            raise ValueError(f"smact_profiles: {self.smact_profiles!r} is not a profile store (no {path / 'records'})")
        return str(path)

    def resolve_inference(self) -> dict[str, Any] | None:
        """``inference`` with its load path absolute (relative: to the YAML's folder, else the cwd)."""
        if self.inference is None:
            return None
        load = self.inference.load
        if not is_synthetic(load):
            head, _, model = load.rpartition(":") if not Path(load).exists() and ":" in load else (load, "", "")
            load = (self.resolve_source(head) or head) + (f":{model}" if model else "")
        return self.inference.model_copy(update={"load": load}).model_dump()

    def grid(self, code_version: str) -> list[ExperimentReplay]:
        """Every replay of the experiment, in a stable order (trace, load, cluster, policy, seed)."""
        from schedlab.sched.policies import policy_origin, read_source

        entries = self.policy_entries()
        sources = {e.name: read_source(e.name) for e in entries}  # a file policy's text, carried to workers
        origins = {e.name: policy_origin(e.name, source=sources[e.name]) for e in entries}
        specs = []
        for trace in self.traces:
            for load in trace.loads:
                for cluster in self.clusters:
                    for pol in entries:
                        origin = origins[pol.name]
                        for seed in self.seeds:
                            options = {**trace.options, "load": load}
                            options.setdefault("seed", seed)
                            specs.append(ExperimentReplay(
                                experiment=self.name, trace=trace.name,
                                trace_label=f"{trace.name}@{load:g}x" if trace.sweeps_load else trace.name,
                                source=self.resolve_source(trace.source), format=trace.format,
                                options=options, annotate=trace.annotate, load=load, cluster=cluster,
                                policy=pol.name, label=pol.label or pol.name, params=pol.params,
                                seed=seed, placement=self.placement,
                                preemption_overhead_s=self.preemption_overhead_s,
                                allocation_stall_s=self.allocation_stall_s,
                                models=self.resolve_models(), code_version=code_version,
                                smact_profiles=self.resolve_profiles(),
                                inference=self.resolve_inference(),
                                policy_origin=origin.params() if origin is not None else None,
                                policy_source=sources[pol.name], time_limit_s=self.time_limit_s,
                                figures=self.figures,
                            ))
        digests = {path: inputs.read(path).sha for path in inputs.paths_of(specs)}
        return [s.model_copy(update={"inputs": {p: digests[p] for p in inputs.paths_of([s])}}) for s in specs]

    @property
    def sweeps_load(self) -> bool:
        return any(t.sweeps_load for t in self.traces)

    def submission_order(self, replays: list[ExperimentReplay]) -> list[ExperimentReplay]:
        """``replays`` in the order to run them: the baseline's first (every speed-up of the live comparison
        needs them), then the costliest policies' (``Policy.relative_cost``), so that a long replay does not
        start last and hold the experiment up alone; otherwise the grid's order (a stable sort)."""
        from schedlab.sched.policies import load_policy_class

        cost = {name: load_policy_class(self.resolve_policy(name)).relative_cost for name in {r.policy for r in replays}}
        return sorted(replays, key=lambda r: (r.label != self.baseline_label, -cost[r.policy]))

    def fallbacks(self) -> dict[tuple[str, str, str], Fallback]:
        """``(trace label, cluster, policy label) -> Fallback`` for each policy that will decide as
        another on that set-up (``sched/policy_needs.py``); raises CapabilityError for one that cannot
        run there. From what the configuration says (the traces are not read)."""
        from schedlab.sched.policy_needs import check, predict, setup_capabilities

        setup = setup_capabilities(self.models.interference, self.inference is not None)
        entries = self.policy_entries()
        out: dict[tuple[str, str, str], Fallback] = {}
        for trace in self.traces:
            present, unknown = predict(trace.annotate, trace.format, trace.source not in (None, "synthetic"))
            fallbacks = {f.policy: f for f in check([e.name for e in entries], present | setup, unknown,
                                                     where=f"traces: {trace.name}: ")}
            for load in trace.loads:
                label = f"{trace.name}@{load:g}x" if trace.sweeps_load else trace.name
                for cluster in self.clusters:
                    for entry in entries:
                        if entry.name in fallbacks:
                            out[(label, cluster, entry.label or entry.name)] = fallbacks[entry.name]
        return out


class ExperimentReplay(BaseModel):
    """One replay of an experiment: everything a worker needs (paths and options, no tables) and the
    names the experiment's runs and tables give it; :meth:`spec` is the replay itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    experiment: str
    trace: str
    trace_label: str
    source: str | None
    format: str | None
    options: dict[str, Any]
    annotate: bool | str | dict[str, Any] | list[str | dict[str, Any]]
    load: float
    cluster: str
    policy: str
    label: str
    params: dict[str, Any]
    seed: int
    placement: str
    preemption_overhead_s: float | str | None
    models: dict[str, str]
    code_version: str
    smact_profiles: str | None = None  # profile store for the SM-activity metrics (not in ``identity`` when None)
    allocation_stall_s: float | str | None = None  # None: the policy's default (not in ``identity`` when None)
    inference: dict[str, Any] | None = None  # LoanOptions (not in ``identity`` when None)
    #: an external policy's lineage (``policy.source.*``: file path and SHA-256, package version); None
    #: for a shipped one (then not in ``identity``, which ``code_version`` covers)
    policy_origin: dict[str, str] | None = None
    #: a file policy's text, as the experiment read it: a worker whose file differs or is missing (a
    #: ``--dask-address`` cluster on other machines) loads this (:func:`~schedlab.sched.policies.load_policy_class`)
    policy_source: str | None = None
    #: seconds the replay may run before it is stopped and fails (how it runs, not what: not in ``identity``)
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    #: draw the replay's figures (how it is reported, not what: not in ``identity``)
    figures: bool = True
    #: each input path or URL the replay reads -> the SHA-256 of its content (:mod:`schedlab.sched.spec.inputs`):
    #: what a worker that cannot see the client's disk is sent, and part of ``identity``
    inputs: dict[str, str] = Field(default_factory=dict)

    def spec(self) -> ReplaySpec:
        """The replay as :func:`schedlab.sched.replay.run` takes it (one policy; the trace's options with
        the cluster's size as the capacity check unless given). An MLflow URI among the models stays a
        name here: the worker passes a fetch for it (:func:`schedlab.tasks.model_tracking.fetcher`)."""
        return ReplaySpec(
            trace=self.source, format=self.format, options=self.options,
            annotate=self.annotate, cluster=self.cluster,
            policies=[{"name": self.policy, "params": self.params, "source": self.policy_source}],
            seed=self.seed, placement=self.placement, preemption_overhead_s=self.preemption_overhead_s,
            allocation_stall_s=self.allocation_stall_s,
            interference=self.models.get("interference", "analytic"),
            iteration_time=self.models.get("iteration_time", "catalog"),
            smact_profiles=self.smact_profiles,
            inference=self.inference,
        )

    @property
    def identity(self) -> dict[str, Any]:
        """What determines the replay's result (the idempotency key hashes this)."""
        return {
            "trace": {"source": self.source, "format": self.format, "options": self.options,
                      "annotate": self.annotate},
            "cluster": self.cluster, "policy": self.policy, "params": self.params, "seed": self.seed,
            "placement": self.placement, "preemption_overhead_s": self.preemption_overhead_s,
            "models": self.models, "code_version": self.code_version,
        } | ({"smact_profiles": self.smact_profiles} if self.smact_profiles else {}) | (
            {"inference": self.inference} if self.inference else {}) | (
            {"policy_origin": self.policy_origin} if self.policy_origin else {}) | (
            {"allocation_stall_s": self.allocation_stall_s} if self.allocation_stall_s is not None else {}) | (
            {"inputs": self.inputs} if self.inputs else {})

    @property
    def key(self) -> str:
        blob = json.dumps(self.identity, sort_keys=True, default=str, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    @property
    def run_name(self) -> str:
        return f"{self.label} | {self.trace_label} | {self.cluster} | seed {self.seed}"
