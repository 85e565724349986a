"""``history``: a job's duration estimated from the jobs of its user and of its name that have already
finished, the Helios QSSF history estimator (Hu et al., SC'21, §5.2; the authors' ``NaiveEstimator``,
github S-Lab-System-Group/HeliosArtifact ``framework/QSSF Service/estimators/estimator.py``, commit
bdaae10). The mean duration of, in this order of preference:

1. the user's finished jobs of the same name, those of the same GPU count if there are any;
2. everyone's finished jobs of that name (a name the user never ran);
3. the user's finished jobs, any name and GPU count (a name nobody has finished yet);
4. every finished job (a user never seen);
5. ``prior_s`` (default 3600 s, ours), until the first job finishes.

Each mean is a running sum updated as each job finishes: O(1) per estimate and per finish.
Simplified: Helios also takes the two names closest to an unseen one (difflib ratio >= 0.6) as its
name; this one knows a name only as written. Helios' priority is this estimate x GPUs (``ssf``'s key).
"""

from __future__ import annotations

from schedlab.sched.estimators.features import JobFeatures

PRIOR_S = 3600.0


class History:
    name = "history"

    def __init__(self, features: JobFeatures, prior_s: float | None = None) -> None:
        self.features = features
        self.prior_s = PRIOR_S if prior_s is None else prior_s
        self._sums: dict[tuple, list[float]] = {}  # key -> [sum of durations, count]

    def _mean(self, key: tuple) -> float | None:
        found = self._sums.get(key)
        return None if found is None else found[0] / found[1]

    def estimate(self, index: int) -> float:
        f = self.features
        user, name, gpus = int(f.user[index]), int(f.name[index]), int(f.gpus[index])
        mean = self._mean
        if name >= 0 and ("n", name) in self._sums:
            if user >= 0 and ("un", user, name) in self._sums:
                found = mean(("ung", user, name, gpus))
                return found if found is not None else mean(("un", user, name))
            return mean(("n", name))
        if user >= 0 and ("u", user) in self._sums:
            return mean(("u", user))
        found = mean(("all",))
        return self.prior_s if found is None else found

    def observe(self, index: int, duration: float) -> None:
        f = self.features
        user, name, gpus = int(f.user[index]), int(f.name[index]), int(f.gpus[index])
        keys = [("all",)]
        if user >= 0:
            keys.append(("u", user))
        if name >= 0:
            keys.append(("n", name))
            if user >= 0:
                keys += [("un", user, name), ("ung", user, name, gpus)]
        for key in keys:
            found = self._sums.get(key)
            if found is None:
                self._sums[key] = [duration, 1]
            else:
                found[0] += duration
                found[1] += 1
