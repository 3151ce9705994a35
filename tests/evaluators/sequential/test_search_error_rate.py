"""The stated error rate holds (docs/protocols/sequential.md): over many simulated models
whose true curves cross the threshold close to a candidate length, the share of searches
that state a wrong effective length stays below alpha (plus a binomial margin). A naive
rule (the point estimate of the first two units) on the same models is wrong far more
often, so the simulation can tell a valid rule from an invalid one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluators.sequential.search import SearchConfig, replay
from evaluators.sequential.simulate import Simulated, logistic_curve

LENGTHS = [1024 << k for k in range(8)]  # 1k .. 128k
ALPHA = 0.1
MODELS = 600
CAP = 4000
NAIVE_UNITS = 2  # the naive rule decides every cell by its first two units


def lazy_scores(model: Simulated, rng: np.random.Generator):
    cache: dict[int, np.ndarray] = {}

    def score(li: int, u: int) -> float:
        if li not in cache:
            cache[li] = (rng.random((CAP, model.tasks.shape[1])) < model.tasks[li]).mean(axis=1)
        return float(cache[li][u])
    return score, cache


def near_threshold_model(rng: np.random.Generator, threshold: float, tasks: int) -> Simulated:
    """A curve crossing the threshold between two candidates (or beyond either end), a
    quarter to three quarters of the way in log2(length), so the nearest cells lie about
    0.03 to 0.2 from the threshold: hard cases, each decided by the rule well before the cap."""
    crossing = 9 + rng.integers(0, 9) + rng.uniform(0.25, 0.75)
    slope = rng.uniform(0.8, 2.0)
    return logistic_curve(LENGTHS, crossing, threshold, slope, tasks, spread=0.1 if tasks > 1 else 0.0, rng=rng)


def margin(p: float, n: int) -> float:
    """Three binomial standard errors: a rate at p exceeds p + margin with probability < 0.2%."""
    return 3 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize(("threshold", "tasks"), [(0.5, 1), (0.8555, 13)], ids=["passkey", "ruler-13-tasks"])
def test_wrong_effective_length_rate_is_below_alpha(threshold: float, tasks: int) -> None:
    rng = np.random.default_rng(26)
    config = SearchConfig(lengths=LENGTHS, cap=CAP, block=10, alpha=ALPHA, threshold=threshold)
    wrong = naive_wrong = undecided = 0
    for _ in range(MODELS):
        model = near_threshold_model(rng, threshold, tasks)
        truth = model.true_effective_length(threshold)
        score, cache = lazy_scores(model, rng)
        state = replay(config, score)
        assert state.finished
        undecided += not state.confident
        wrong += state.effective_length() != truth
        first_block = {n: float(np.mean([score(i, u) for u in range(NAIVE_UNITS)])) for i, n in enumerate(LENGTHS)}
        naive = max((n for n, v in first_block.items() if v >= threshold), default=None)
        naive_wrong += naive != truth
    assert undecided <= 0.02 * MODELS  # the cap is far: the rule, not the cap, decides
    assert wrong / MODELS <= ALPHA + margin(ALPHA, MODELS), (wrong, MODELS)
    assert naive_wrong / MODELS > ALPHA + margin(ALPHA, MODELS), (naive_wrong, MODELS)


@pytest.mark.integration  # thousands of simulated searches: seconds of CPU
def test_relative_rule_error_rate_is_below_alpha() -> None:
    rng = np.random.default_rng(7)
    config = SearchConfig(lengths=LENGTHS, cap=CAP, block=10, alpha=ALPHA, relative=0.85)
    wrong = 0
    models = MODELS // 3
    for _ in range(models):
        model = near_threshold_model(rng, 0.6, 13)
        base = model.means[0]
        truth = max((n for n, v in zip(LENGTHS, model.means, strict=True) if v >= 0.85 * base), default=None)
        score, _ = lazy_scores(model, rng)
        state = replay(config, score)
        assert state.finished
        wrong += state.effective_length() != truth
    assert wrong / models <= ALPHA + margin(ALPHA, models), (wrong, models)
