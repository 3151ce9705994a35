"""The cell test: decisions at the right side, Ville's bound on a true null, the interval."""

from __future__ import annotations

import numpy as np
import pytest

from evaluators.sequential.rule import CellTest, bisection_steps, confidence_interval


def feed(test: CellTest, scores) -> CellTest:
    for x in scores:
        test.feed(float(x))
    return test


def test_all_right_passes_and_all_wrong_fails_within_a_few_dozen() -> None:
    assert feed(CellTest(m=0.5, level=0.05), [1.0] * 10).verdict is True
    assert feed(CellTest(m=0.5, level=0.05), [0.0] * 10).verdict is False
    assert feed(CellTest(m=0.5, level=0.05), [1.0, 0.0] * 20).verdict is None  # exactly at the threshold


def test_no_test_passes_a_perfect_cell_faster_than_the_likelihood_ratio() -> None:
    """Bernoulli(1) against m = 0.8555 at level 0.05: (1/m)^n >= 20 needs n >= 20; ours bets
    0.9 of that and warms up, and must not claim more than the optimum allows."""
    test = CellTest(m=0.8555, level=0.05)
    n = 0
    while test.verdict is None:
        test.feed(1.0)
        n += 1
    assert 20 <= n <= 35


def test_a_true_null_is_rejected_at_most_level_of_the_time() -> None:
    """Mean exactly at m: both declarations are possible mistakes of the 'pass' and 'fail'
    kinds; each must happen in at most `level` of the runs, however long they go on."""
    rng = np.random.default_rng(0)
    level, runs, wrong_pass = 0.1, 400, 0
    for _ in range(runs):
        test = CellTest(m=0.3, level=level)
        for x in rng.random(400) < 0.29:  # just below m: any pass is wrong
            test.feed(float(x))
        wrong_pass += test.verdict is True
    assert wrong_pass / runs <= level + 3 * np.sqrt(level * (1 - level) / runs)


def test_bounded_scores_outside_0_1_are_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        CellTest(m=0.5, level=0.05).feed(1.5)
    with pytest.raises(ValueError, match="strictly between"):
        CellTest(m=1.0, level=0.05)


def test_interval_covers_the_mean_and_shrinks() -> None:
    rng = np.random.default_rng(1)
    scores = (rng.random(400) < 0.7).astype(float).tolist()
    wide = confidence_interval(scores[:20], 0.05)
    narrow = confidence_interval(scores, 0.05)
    assert wide is not None and narrow is not None
    assert wide[0] < 0.7 < wide[1] and narrow[0] < 0.7 < narrow[1]
    assert narrow[1] - narrow[0] < 0.5 * (wide[1] - wide[0])
    assert confidence_interval([], 0.05) is None


def test_bisection_steps() -> None:
    assert [bisection_steps(k) for k in (1, 2, 3, 4, 7, 8)] == [1, 2, 2, 3, 3, 4]
