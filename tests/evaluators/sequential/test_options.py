"""The search options, declared once in the task option models: defaults, candidates,
refusals with a reason, re-validation, and their absence from the configuration hash."""

from __future__ import annotations

import pytest

from evaluators import EvaluatorError, validate_task
from evaluators.registry import make_evaluator


def test_grid_stays_the_default() -> None:
    for name in ("passkey", "needle", "ruler"):
        assert validate_task({"name": name})["search"] == "grid"


def test_a_grid_accepts_the_search_options_at_their_field_defaults() -> None:
    """The grid's refusal compares with the fields' own defaults (declared once, not restated)."""
    from evaluators.registry import task_options
    from evaluators.sequential.options import SEARCH_ONLY

    for name in ("passkey", "needle", "ruler"):
        model = task_options()[name]
        names = SEARCH_ONLY + model.search_extra
        assert names and all(k in model.model_fields for k in names)
        spec = {"name": name, **{k: model.model_fields[k].default for k in names}}
        assert validate_task(spec)["search"] == "grid"


def test_candidates_from_lengths_or_doubling() -> None:
    given = validate_task({"name": "passkey", "search": "sequential", "lengths": "8192,1024,2048,4096",
                           "trials": 20, "search_min": 2048})
    assert given["lengths"] == [2048, 4096, 8192]
    doubled = validate_task({"name": "ruler", "tasks": ["niah_single_1"], "search": "sequential",
                             "search_lengths": "doubling", "search_min": 1024, "search_max": 131072})
    assert doubled["lengths"] == [1024 << k for k in range(8)]
    assert validate_task(doubled) == doubled  # a stored spec validates to itself (jobs re-validate)
    assert validate_task(given) == given


@pytest.mark.parametrize(("spec", "reason"), [
    ({"name": "passkey", "search_alpha": 0.1}, "apply only to search=sequential"),
    ({"name": "needle", "search_threshold": 0.9}, "apply only to search=sequential"),
    ({"name": "ruler", "search_rule": "relative"}, "apply only to search=sequential"),
    ({"name": "passkey", "search": "sequential", "lengths": [4096]}, "at least two candidate lengths"),
    ({"name": "passkey", "search": "sequential", "search_min": 4096, "search_max": 1024}, "must be below"),
    ({"name": "passkey", "search": "sequential", "search_min": 10**6}, "no length of"),
    ({"name": "ruler", "search": "sequential", "search_lengths": "doubling", "search_min": 1024}, "needs search_min"),
    ({"name": "ruler", "search": "sequential", "search_lengths": "doubling", "search_min": 1024, "search_max": 4096,
      "lengths": [1000, 2000]}, "disagree"),
    ({"name": "passkey", "search": "sequential", "trials": 3}, "exceeds trials"),
    ({"name": "ruler", "search": "sequential", "samples": 4}, "exceeds samples"),
    ({"name": "passkey", "search": "sequential", "search_alpha": 0}, "greater than 0"),
    ({"name": "passkey", "search": "sequential", "search_alpha": 0.7}, "less than or equal to 0.5"),
    ({"name": "passkey", "search": "sequential", "search_threshold": 1}, "less than 1"),
    ({"name": "ruler", "search": "sequential", "threshold": 0}, "nothing to decide"),
    ({"name": "passkey", "search": "bisect"}, "'grid' or 'sequential'"),
    ({"name": "passkey", "search": "sequential", "search_rule": "relative"}, "unknown options"),
])
def test_bad_combinations_are_refused_with_the_reason(spec: dict, reason: str) -> None:
    with pytest.raises(EvaluatorError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        validate_task(spec)


def test_search_options_stay_out_of_the_configuration_hash() -> None:
    """A search draws the grid's own samples: both runs must find each other's records."""
    grid = make_evaluator({"name": "passkey", "lengths": [1024, 2048], "trials": 20})
    search = make_evaluator({"name": "passkey", "lengths": [1024, 2048], "trials": 20, "search": "sequential",
                             "search_block": 4, "search_alpha": 0.01, "search_threshold": 0.8})
    assert grid.config_hash({"m": 1}) == search.config_hash({"m": 1})


def test_every_search_option_has_a_cli_flag() -> None:
    from cli.evaluate import option_flags

    flags = option_flags()
    for name in ("search", "search_lengths", "search_min", "search_max", "search_block", "search_alpha",
                 "search_threshold", "search_rule"):
        assert name in flags, name
    assert set(flags["search"][1]) == {"passkey", "needle", "ruler"}
