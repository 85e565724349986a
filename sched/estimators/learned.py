"""``learned``: a gradient-boosted regressor (xgboost) of a job's log duration on what is known when it
is submitted: its user and name (categorical), GPUs and submit hour of day; the learned half of the
Helios QSSF estimator (Hu et al., SC'21, §5: a GBDT model beside the history of similar jobs; its
artifact blends the two, 0.9 model + 0.1 history).

A user or name held by fewer than 3 training jobs reads as unknown (missing), so that a name met
once (most names are never seen again) is not learned as a category. It learns online and never from
a job's own future: the training set is the latest ``train_window``
(default 2000) finished jobs with their durations, refitted each time ``refit_every`` (default 500)
more jobs have finished, so a replay of N jobs makes N / refit_every fits of at most ``train_window``
rows each (40 trees of depth 6, one thread: the cost is bounded and the fit deterministic for the
seed). A job's estimate is the prediction of the model last fitted before it arrived; until the first
fit it is the ``history`` estimate (``prior_s`` before any job has finished). Predictions are made for
the next 256 jobs at a time (their submit-time features are in the trace) and dropped at each refit.
Simplified: no blend with the history estimate, no cross-validated hyper-parameters.
"""

from __future__ import annotations

import math
import time
from collections import deque

import numpy as np

from schedlab.sched.estimators.features import JobFeatures
from schedlab.sched.estimators.history import History

REFIT_EVERY = 500
TRAIN_WINDOW = 2000
ROUNDS = 40
_AHEAD = 256  # jobs predicted per call
_TYPES = ["c", "c", "q", "q"]  # user, name, GPUs, submit hour
MIN_SEEN = 3  # a user or name known to the model: held by at least this many training jobs


class Learned:
    name = "learned"

    def __init__(self, features: JobFeatures, seed: int, prior_s: float | None = None,
                 refit_every: int | None = None, train_window: int | None = None) -> None:
        self.features = features
        self.seed = seed
        self.history = History(features, prior_s)
        self.refit_every = REFIT_EVERY if refit_every is None else refit_every
        self.rows: deque[int] = deque(maxlen=TRAIN_WINDOW if train_window is None else train_window)
        self.targets: deque[float] = deque(maxlen=self.rows.maxlen)
        self._new = 0
        self._booster = None
        self._first, self._predicted = 0, np.empty(0)
        self._users = self._names = np.empty(0, np.int64)  # the categories the model knows
        self.fits, self.fit_cpu_s = 0, 0.0

    def _matrix(self, indices: np.ndarray | list[int]) -> np.ndarray:
        """Features of jobs ``indices``: a user or name the training jobs hold fewer than :data:`MIN_SEEN`
        times reads as missing (a category met once teaches nothing about the next job)."""
        f = self.features
        users, names = f.user[indices], f.name[indices]
        x = np.column_stack([users, names, f.gpus[indices], f.hour[indices]]).astype(float)
        x[~np.isin(users, self._users), 0] = np.nan
        x[~np.isin(names, self._names), 1] = np.nan
        return x

    def estimate(self, index: int) -> float:
        if self._booster is None:
            return self.history.estimate(index)
        at = index - self._first
        if not 0 <= at < len(self._predicted):
            ahead = np.arange(index, min(index + _AHEAD, len(self.features.gpus)))
            self._first, self._predicted = index, np.exp(self._booster.inplace_predict(self._matrix(ahead)))
            at = 0
        return float(self._predicted[at])

    def observe(self, index: int, duration: float) -> None:
        self.history.observe(index, duration)
        self.rows.append(index)
        self.targets.append(math.log(duration))
        self._new += 1
        if self._new >= self.refit_every:
            self._fit()

    def figures(self) -> dict[str, float]:
        return {"learned_fits": self.fits, "learned_fit_cpu_s": self.fit_cpu_s}

    def _fit(self) -> None:
        import xgboost as xgb

        started = time.process_time()
        rows = np.fromiter(self.rows, np.int64)
        self._users, self._names = (_seen(codes[rows]) for codes in (self.features.user, self.features.name))
        data = xgb.DMatrix(self._matrix(rows), label=np.fromiter(self.targets, float),
                           feature_types=_TYPES, enable_categorical=True, nthread=1)
        params = {"max_depth": 6, "eta": 0.3, "nthread": 1, "seed": self.seed, "tree_method": "hist",
                  "objective": "reg:squarederror", "max_cat_to_onehot": 1, "verbosity": 0}
        self._booster = xgb.train(params, data, num_boost_round=ROUNDS)
        self._first, self._predicted = 0, np.empty(0)  # every prediction from here on by the new model
        self._new = 0
        self.fits += 1
        self.fit_cpu_s += time.process_time() - started


def _seen(codes: np.ndarray) -> np.ndarray:
    """The codes (>= 0) that occur at least :data:`MIN_SEEN` times."""
    values, counts = np.unique(codes[codes >= 0], return_counts=True)
    return values[counts >= MIN_SEEN]
