"""The result contract: every evaluator's metrics carry higher_is_better, unit and n;
results.json entries of the layout before the contract (aggregates spread into the
entry) still load; option models and evaluators agree."""

from __future__ import annotations

import pytest

from evaluators import TASK_OPTIONS, TASKS
from evaluators.registry import task_result
from evaluators.results import Metric, Series, TaskResult
from tests.helpers import OLD_RESULTS as OLD

# One entry per task in the layout each evaluator wrote before the contract (version 1, longbench 3).


def test_option_models_and_evaluators_agree() -> None:
    born_typed = {"ruler", "longbench_v2", "babilong", "mrcr", "graphwalks", "mrcr_v2",  # no older layout exists
                  "aa_lcr", "helmet", "infinitebench", "ruler_v2", "nolima",
                  "zero_scrolls"}  # (tasks added after the contract)
    assert set(TASKS) == set(TASK_OPTIONS) == set(OLD) | born_typed
    for name, cls in TASKS.items():
        assert cls.Options is TASK_OPTIONS[name] and cls.Options.task == name
        if name not in born_typed:
            assert cls.version != "1"  # the result layout changed: every older task's version moved on


@pytest.mark.parametrize("name", sorted(OLD))
def test_old_results_load_into_the_contract(name: str) -> None:
    result = task_result(OLD[name])
    assert isinstance(result, TaskResult) and result.summary
    head = result.metric(result.headline)
    for m in result.metrics:
        assert "higher_is_better" in m.model_fields_set and m.unit and m.n >= 0
        if name != "diagnostics":  # scores have a better direction; attention statistics do not
            assert isinstance(m.higher_is_better, bool)
    for s in result.series:
        assert s.points and (s.higher_is_better is None) == (name == "diagnostics")
    # The same figures as before, now named.
    expected = {"passkey": 0.75, "needle": 0.5, "longbench": 30.0, "scrolls": 50.0, "perplexity": 7.5,
                "diagnostics": 0.25}
    assert head.value == expected[name]
    assert result.model_validate(result.model_dump(mode="json")) == result  # round-trips through JSON
    new = {"task": name, "result": result.model_dump(mode="json")}
    assert task_result(new) == result  # the new layout reads back as written


def test_old_layouts_keep_their_numbers() -> None:
    passkey = task_result(OLD["passkey"])
    by_length = {p.key: (p.value, p.n) for p in passkey.series[0].points}
    assert passkey.series[0].axis == "length" and by_length == {256: (1.0, 2), 512: (0.5, 2)}
    assert passkey.extra["over_target"] == {"512": 1} and passkey.metric("accuracy").n == 4
    needle = task_result(OLD["needle"])
    grid = {(s.at["depth"], p.key): p.value for s in needle.series if s.at for p in s.points}
    assert grid == {(0, 300): 1.0, (0, 400): 1.0, (50, 300): 0.0, (50, 400): 0.0}
    assert {p.key: p.value for s in needle.series if s.axis == "depth" for p in s.points} == {0: 1.0, 50: 0.0}
    lb = task_result(OLD["longbench"])
    assert lb.columns("lcc") == {"score": (40.0, lb.series[0]), "score.bucket=0-4k": (40.0, lb.series[2]),
                                 "score.bucket=4-8k": (None, lb.series[2]), "score.bucket=8k+": (None, lb.series[2])}
    ppl = task_result(OLD["perplexity"])
    assert ppl.metric("perplexity").higher_is_better is False and ppl.metric("perplexity").n == 1
    assert ppl.columns()["perplexity.length=40"][0] == 9.0


def test_the_contract_refuses_inconsistent_results() -> None:
    m = Metric(name="a", value=1.0, higher_is_better=True, unit="fraction", n=1)
    with pytest.raises(ValueError, match="headline"):
        TaskResult(headline="b", metrics=[m], summary="")
    with pytest.raises(ValueError, match="repeat"):
        TaskResult(headline="a", metrics=[m, m], summary="")
    with pytest.raises(ValueError):
        Metric(name="a", value=1.0, unit="fraction", n=1)  # higher_is_better must be said
    with pytest.raises(ValueError):
        Series(name="a", axis="colour", unit="", higher_is_better=True, points=[])
