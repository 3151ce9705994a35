"""How wide a step verifies drafts: the step-time line the engine fits to its own steps and
the width that maximises expected tokens per second."""

from __future__ import annotations

import math

import pytest

from checkpoints.engine.verify_width import PRIOR_FIXED_TOKENS, StepTimes, choose_width, expected_kept


def test_the_fit_recovers_a_steps_fixed_cost_in_tokens() -> None:
    times = StepTimes()
    assert times.fixed_tokens() == PRIOR_FIXED_TOKENS  # nothing timed yet
    for tokens in (16, 16, 15, 16):
        times.add(tokens, 0.02 + 0.001 * tokens)
    assert times.fixed_tokens() == PRIOR_FIXED_TOKENS  # one size (nearly): a line through it is noise
    for tokens in (272, 48, 16, 160):
        times.add(tokens, 0.02 + 0.001 * tokens)
    assert times.fixed_tokens() == pytest.approx(20.0, rel=1e-6)


def test_tokens_that_cost_nothing_or_everything() -> None:
    free, linear = StepTimes(), StepTimes()
    for tokens in (16, 272, 16, 272):
        free.add(tokens, 0.05)  # a GPU step reading its weights: the same time at any width
        linear.add(tokens, 0.001 * tokens)
    assert free.fixed_tokens() == math.inf
    assert linear.fixed_tokens() == pytest.approx(0.0, abs=1e-6)


def test_the_recent_steps_weigh_most() -> None:
    times = StepTimes()
    for _ in range(50):
        for tokens in (16, 160):
            times.add(tokens, 0.1 + 0.001 * tokens)  # a short context: fixed 100 tokens' worth
    for _ in range(50):
        for tokens in (16, 160):
            times.add(tokens, 0.1 + 0.01 * tokens)  # the context grew: attention per token costs 10x
    assert times.fixed_tokens() == pytest.approx(10.0, rel=0.05)


def test_expected_kept_is_the_geometric_sum() -> None:
    assert expected_kept(0.5, 3) == pytest.approx(0.5 + 0.25 + 0.125)
    assert expected_kept(1.0, 5) == 5 and expected_kept(0.0, 5) == 0 and expected_kept(0.9, 0) == 0


def test_the_width_pays_for_itself() -> None:
    # 16 rows that keep few of their drafts, on a CPU-like step (fixed cost of 20 tokens): plain steps
    assert choose_width([16] * 16, [0.1] * 16, 20.0) == 0
    # 6 rows copying a needle (nearly every drafted token kept): the whole draft
    assert choose_width([16] * 6, [0.99] * 6, 51.0) == 16
    assert choose_width([16] * 6, [0.9] * 6, 51.0) >= 8
    # an even start on a costly-per-token step: one token, to learn the rows' acceptance
    assert choose_width([16] * 16, [0.5] * 16, 51.0) == 1
    # tokens free: the longest draft; no draft: a plain step
    assert choose_width([3, 0, 7], [0.01] * 3, math.inf) == 7
    assert choose_width([0, 0], [0.9, 0.9], 51.0) == 0 and choose_width([], [], 51.0) == 0
    # the width never passes the longest draft
    assert choose_width([2, 1], [0.99, 0.99], 1e6) == 2
