"""Bisection over candidate lengths: which cells it tests, the bracket, the replay from
partial scores (resume), the cap, the relative rule and the monotonicity report."""

from __future__ import annotations

import pytest

from evaluators.sequential.search import SearchConfig, grid_effective_length, replay

LENGTHS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]


def step_curve(passing: int):
    """Units score 1 up to the `passing`-th length (index), 0 beyond."""
    return lambda li, u: 1.0 if li < passing else 0.0


@pytest.mark.parametrize("passing", range(len(LENGTHS) + 1))
def test_bisection_finds_every_boundary(passing: int) -> None:
    config = SearchConfig(lengths=LENGTHS, cap=100, block=5, alpha=0.05, threshold=0.5)
    state = replay(config, step_curve(passing))
    assert state.finished and state.confident
    assert state.effective_length() == (LENGTHS[passing - 1] if passing else None)
    assert state.bracket() == (LENGTHS[passing - 1] if passing else None,
                               LENGTHS[passing] if passing < len(LENGTHS) else None)
    assert len(state.cells) <= config.tests == 4  # ceil(log2(9))
    assert state.spent <= 4 * 10  # each decided within two blocks
    assert state.monotonicity() == []


def test_replay_asks_for_the_next_block_and_resumes_where_scores_stop() -> None:
    config = SearchConfig(lengths=LENGTHS, cap=100, block=5, alpha=0.05, threshold=0.5)
    known: dict[tuple[int, int], float] = {}
    curve = step_curve(3)
    asked = []
    while True:
        state = replay(config, lambda li, u: known.get((li, u)))
        if state.finished:
            break
        asked.append(state.need)
        # only part of the block arrives (a run killed mid-block): the replay asks for the rest
        first, *rest = state.need
        known[first] = curve(*first)
        state = replay(config, lambda li, u: known.get((li, u)))
        assert state.need == rest or (not rest and state.need != [first])
        for key in rest:
            known[key] = curve(*key)
    assert all(len(need) == 5 and need[0][1] % 5 == 0 for need in asked)
    assert state.effective_length() == 4096
    assert sum(1 for _ in known) == state.spent  # nothing drawn twice, nothing unused


def test_a_cell_at_its_cap_falls_back_to_the_grid_point_estimate() -> None:
    config = SearchConfig(lengths=LENGTHS[:2], cap=20, block=5, alpha=0.05, threshold=0.5)
    state = replay(config, lambda li, u: 1.0 if u % 2 == 0 or u == 19 else 0.0)  # 0.55: undecidable in 20
    assert state.finished and not state.confident
    assert all(c.test.n == 20 and not c.decided for c in state.cells.values())
    assert state.effective_length() == 2048  # both pass by their means, as the grid says


def test_relative_rule_measures_the_shortest_length_first() -> None:
    config = SearchConfig(lengths=LENGTHS[:4], cap=200, block=10, alpha=0.05, relative=0.85)
    means = [0.6, 0.58, 0.3, 0.1]
    state = replay(config, lambda li, u: 1.0 if (u * 7919 % 100) < means[li] * 100 else 0.0)
    assert state.reference is not None and state.reference["length"] == 1024
    assert state.effective_length() == 2048 and state.first_fail == 2


def test_non_monotone_observations_are_reported() -> None:
    """Bisection never tests a cell that could contradict its earlier decisions, but the
    relative rule's reference can: a shortest length far below a longer one."""
    config = SearchConfig(lengths=LENGTHS[:3], cap=200, block=10, alpha=0.05, relative=0.85)
    means = [0.2, 0.95, 0.9]
    state = replay(config, lambda li, u: 1.0 if (u * 7919 % 100) < means[li] * 100 else 0.0)
    assert state.finished and state.effective_length() == 4096
    assert any("scores above 1024" in note for note in state.monotonicity())
    monotone = replay(config, lambda li, u: 1.0 if (u * 7919 % 100) < [0.9, 0.85, 0.3][li] * 100 else 0.0)
    assert monotone.monotonicity() == []


def test_grid_effective_length_is_the_longest_passing() -> None:
    assert grid_effective_length({1: 0.9, 2: 0.4, 4: 0.6}, 0.5) == 4
    assert grid_effective_length({1: 0.1}, 0.5) is None


def test_config_refuses_two_rules() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        SearchConfig(lengths=LENGTHS, cap=10, block=5, alpha=0.05, threshold=0.5, relative=0.85)
