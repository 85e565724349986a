"""The parameters every duration-reading policy takes (its ``Params`` subclass :class:`KnowledgeParams`),
validated with the policy's other parameters (``--set sjf.knowledge=estimate``, an experiment's
``params:``). ``docs/estimates.md`` explains each."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: the estimator parameters each estimator takes (any other one given is an error)
ESTIMATOR_PARAMS: dict[str, tuple[str, ...]] = {
    "history": ("prior_s",),
    "requested": ("badness", "seed"),
    "noisy": ("sigma", "seed"),
    "learned": ("prior_s", "refit_every", "train_window", "seed"),
}
_ALL = ("estimator", *sorted({p for names in ESTIMATOR_PARAMS.values() for p in names}))


class KnowledgeParams(BaseModel):
    """``knowledge``: ``oracle`` (default: the true durations) or ``estimate`` (the ``estimator``'s)."""

    model_config = ConfigDict(extra="forbid")
    knowledge: Literal["oracle", "estimate"] = Field(
        default="oracle", description="oracle: decide on the true durations; estimate: on the estimator's")
    estimator: Literal["history", "requested", "noisy", "learned"] | None = Field(
        default=None, description="estimate mode: history, requested, noisy or learned (docs/estimates.md)")
    sigma: float | None = Field(default=None, ge=0, description="noisy: the log-normal error's sigma (0: the truth)")
    badness: float | None = Field(
        default=None, ge=0, description="requested, jobs without a time_limit: run time x U(1, 1 + badness) (default 3)")
    prior_s: float | None = Field(
        default=None, gt=0, description="history, learned: the estimate before any job has finished (default 3600)")
    refit_every: int | None = Field(default=None, ge=1, description="learned: refit after this many more jobs end"
                                    " (default 500)")
    train_window: int | None = Field(default=None, ge=2, description="learned: fit on the latest this many ended"
                                     " jobs (default 2000)")
    seed: int | None = Field(default=None, ge=0, lt=2**63, description="noisy, requested, learned: the draws' seed"
                             " (default: the replay's)")

    @model_validator(mode="after")
    def _consistent(self) -> KnowledgeParams:
        given = [name for name in _ALL if name in self.model_fields_set and getattr(self, name) is not None]
        if self.knowledge == "oracle":
            if given:  # it would change nothing: refuse it rather than ignore it
                raise ValueError(f"{given[0]} applies to knowledge: estimate only; with knowledge: oracle the"
                                 " true durations are read and an estimator would change nothing")
            return self
        if self.estimator is None:
            raise ValueError(f"knowledge: estimate needs an estimator: one of {', '.join(ESTIMATOR_PARAMS)}")
        takes = ESTIMATOR_PARAMS[self.estimator]
        for name in given:
            if name == "estimator":
                continue
            if name not in takes:
                users = [e for e, names in ESTIMATOR_PARAMS.items() if name in names]
                raise ValueError(f"{name} applies to estimator {' or '.join(users)}, not {self.estimator}"
                                 f" (which takes {', '.join(takes)})")
        if self.estimator == "noisy" and self.sigma is None:
            raise ValueError("estimator noisy needs sigma, the log-normal error's sigma (e.g. 0.5; 0 is the truth)")
        return self


def estimates(params: BaseModel) -> bool:
    """Whether a policy with ``params`` decides on estimated durations (Pollux's own ``knowledge`` is
    about goodput, not durations: it is no :class:`KnowledgeParams`)."""
    return isinstance(params, KnowledgeParams) and params.knowledge == "estimate"
