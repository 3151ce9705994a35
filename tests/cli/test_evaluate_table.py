"""`lctx eval`'s table: each value with its standard error; a result written before errors
existed shows its value alone."""

from __future__ import annotations

from cli.evaluate import summary_rows
from evaluators.results import TaskResult, metric
from evaluators.uncertainty import mean_error


def test_values_with_their_errors_and_old_results_as_they_were() -> None:
    result = TaskResult(headline="accuracy", summary="", metrics=[metric("accuracy", 0.8, True, "fraction", 100)])
    old = summary_rows("passkey", {"task": "passkey", "result": result.model_dump(mode="json")})
    assert old == [("passkey", "accuracy (fraction, n=100)", "0.800")]
    result.metrics[0].error = mean_error([1.0] * 80 + [0.0] * 20)
    rows = summary_rows("passkey", {"task": "passkey", "result": result.model_dump(mode="json")})
    assert rows == [("passkey", "accuracy (fraction, n=100)", "0.800 ± 0.040")]
