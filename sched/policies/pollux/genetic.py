"""A genetic algorithm for Pollux's allocation problem, like the one of the study's simulator (Pollux
§4.2: population 100, 100 generations, warm-started from the last round; docs/explanation/pollux.md). Ours,
written from that description: the reference that ``optimiser.solve`` must reach (benchmarks) and
``pollux``'s ``solver: ga``.

A state is a jobs x nodes matrix of GPU counts. Offspring: single-point crossover over jobs;
mutation resets a job to its current allocation (p 0.1), zeroes some of its nodes (p 0.1 x 0.1) and
raises random entries; repair enforces at most one multi-node job per node (earlier jobs win), a
job's GPU cap and node count (nodes in random order), then node capacity (earlier jobs win).
Selection keeps the best ``population`` of parents and offspring (elitist). Warm start: the last
round's population, mapped onto the jobs still active (``solve(problem, keys)``).
"""

from __future__ import annotations

from typing import Hashable

import numpy as np

from schedlab.sched.policies.pollux.problem import Alloc, Problem


class GeneticSolver:
    def __init__(self, population: int = 100, generations: int = 100, seed: int = 0) -> None:
        self.population = population
        self.generations = generations
        self.rng = np.random.default_rng(seed)
        self._last: tuple[list[Hashable], np.ndarray] | None = None

    def solve(self, problem: Problem, keys: list[Hashable] | None = None) -> Alloc:
        J, N, G = len(problem.jobs), problem.nodes, problem.gpus_per_node
        if J == 0:
            return []
        base = np.array([job.current for job in problem.jobs], dtype=np.int64).reshape(J, N)
        pop = self._repair(problem, self._initial(base, keys))
        fit = self._fitness(problem, pop)
        for _ in range(self.generations):
            parents = self._tournament(fit, self.population)
            a, b = pop[parents[0::2]], pop[parents[1::2]]
            cut = self.rng.integers(0, J + 1, size=(len(a), 1, 1))
            rows = np.arange(J)[None, :, None] < cut
            children = np.concatenate([np.where(rows, a, b), np.where(rows, b, a)])
            children = self._repair(problem, self._mutate(children, base, G))
            pop = np.concatenate([pop, children])
            fit = np.concatenate([fit, self._fitness(problem, children)])
            order = np.argsort(-fit, kind="stable")[: self.population]
            pop, fit = pop[order], fit[order]
        if keys is not None:
            self._last = (list(keys), pop)
        best = pop[int(np.argmax(fit))]
        return [tuple(int(x) for x in row) for row in best]

    def _initial(self, base: np.ndarray, keys: list[Hashable] | None) -> np.ndarray:
        pop = np.repeat(base[None], self.population, axis=0)
        if keys is not None and self._last is not None:
            old_keys, old = self._last
            index = {k: i for i, k in enumerate(old_keys)}
            for j, k in enumerate(keys):
                if k in index and old.shape[2] == base.shape[1]:
                    pop[: len(old), j] = old[:, index[k]]
        return pop

    def _fitness(self, problem: Problem, pop: np.ndarray) -> np.ndarray:
        out = np.empty(len(pop))
        for i, state in enumerate(pop):
            out[i] = problem.value([tuple(int(x) for x in row) for row in state])
        return out

    def _tournament(self, fit: np.ndarray, n: int) -> np.ndarray:
        pairs = self.rng.integers(0, len(fit), size=(n, 2))
        return np.where(fit[pairs[:, 0]] >= fit[pairs[:, 1]], pairs[:, 0], pairs[:, 1])

    def _mutate(self, states: np.ndarray, base: np.ndarray, G: int) -> np.ndarray:
        rng = self.rng
        P, J, N = states.shape
        states = np.where(rng.random((P, J, 1)) < 0.1, base[None], states)
        zero = (rng.random((P, J, 1)) < 0.1) & (rng.random((P, J, N)) < 0.1)
        states = np.where(zero, 0, states)
        raise_ = rng.random((P, J, N)) < 1.0 / max(N, 1)
        bump = rng.integers(states, G + 1)
        return np.where(raise_, bump, states)

    def _repair(self, problem: Problem, states: np.ndarray) -> np.ndarray:
        rng = self.rng
        P, J, N = states.shape
        multi = (np.count_nonzero(states, axis=2) > 1)[:, :, None] & (states > 0)
        states = np.where(multi & (np.cumsum(multi, axis=1) > 1), 0, states)
        caps = np.array([job.max_gpus for job in problem.jobs])[None, :, None]
        shuffle = np.argsort(rng.random(states.shape), axis=2)
        s = np.take_along_axis(states, shuffle, axis=2)
        s = np.diff(np.minimum(np.cumsum(s, axis=2), caps), axis=2, prepend=0)
        nodes = np.diff(np.minimum(np.cumsum(s > 0, axis=2), problem.max_nodes_per_job), axis=2, prepend=0)
        s = np.where(nodes > 0, s, 0)
        states = np.take_along_axis(s, np.argsort(shuffle, axis=2), axis=2)
        states = np.diff(np.minimum(np.cumsum(states, axis=1), problem.gpus_per_node), axis=1, prepend=0)
        return states
