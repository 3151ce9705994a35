"""Simulated models for the search: unit scores drawn from a known curve, so the true
effective length is known (the error-rate test in tests/evaluators/sequential and
bench/sequential_search.py). A model is, per candidate length, the success probability of
each task; a unit is one Bernoulli draw per task, averaged (one task: passkey; 13: RULER)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluators.sequential.search import SearchConfig, SearchState, grid_effective_length, replay


@dataclass
class Simulated:
    lengths: list[int]
    tasks: np.ndarray  # (lengths, tasks) success probabilities

    @property
    def means(self) -> np.ndarray:
        return self.tasks.mean(axis=1)

    def true_effective_length(self, threshold: float) -> int | None:
        """The longest length whose true mean is >= threshold (the curves here decrease)."""
        return grid_effective_length(dict(zip(self.lengths, self.means.tolist(), strict=True)), threshold)

    def draws(self, rng: np.random.Generator, cap: int) -> np.ndarray:
        """(lengths, cap) unit scores: the full grid, of which the search reads a prefix per length."""
        hits = rng.random((len(self.lengths), cap, self.tasks.shape[1])) < self.tasks[:, None, :]
        return hits.mean(axis=2)


def search(config: SearchConfig, grid: np.ndarray) -> SearchState:
    return replay(config, lambda li, u: float(grid[li, u]))


def grid_answer(config: SearchConfig, grid: np.ndarray) -> int | None:
    """What the full grid says by the same rule (point estimates of every cell)."""
    means = dict(zip(config.lengths, grid.mean(axis=1).tolist(), strict=True))
    if config.threshold is not None:
        return grid_effective_length(means, config.threshold)
    assert config.relative is not None
    base = means[config.lengths[0]]
    return grid_effective_length(means, config.relative * base) if base > 0 else None


def logistic_curve(lengths: list[int], crossing: float, threshold: float, slope: float, tasks: int,
                   spread: float, rng: np.random.Generator) -> Simulated:
    """A decreasing curve in log2(length) through `threshold` at log2 length `crossing`, with
    per-task probabilities spread around it (mean kept)."""
    x = np.log2(np.asarray(lengths, dtype=float))
    logit = np.log(threshold / (1 - threshold)) - slope * (x - crossing)
    mean = 1 / (1 + np.exp(-logit))
    offsets = rng.uniform(-spread, spread, size=tasks)
    offsets -= offsets.mean()
    per_task = np.clip(mean[:, None] + offsets[None, :], 0.0, 1.0)
    return Simulated(list(lengths), per_task)
