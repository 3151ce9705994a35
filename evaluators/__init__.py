"""From a model to scores: one folder per task, each registering itself (`lctx eval --help` lists them).

Each task is a folder `evaluators/<task>/` that registers itself (`evaluators.registry`).
The stable entry points other packages use: `TASKS` (name -> evaluator class),
`TASK_OPTIONS` (name -> option model), `validate_task(task)`, and from
`evaluators.suite`: `run_task`, `run_suite`, `partial_result`.

The contracts (`options`, `results`, `errors`), the registry and each task's options
import only pydantic; the evaluators themselves (torch) load on first use of `TASKS`,
`run_task` or `Evaluator`, so the API schema and the CLI's client commands can import
this package without torch."""

from __future__ import annotations

from typing import Any

from evaluators.errors import EvaluationCancelled, EvaluatorError
from evaluators.registry import evaluator_classes, task_options, validate_task


def __getattr__(name: str) -> Any:
    if name == "TASKS":
        return evaluator_classes()
    if name == "TASK_OPTIONS":
        return task_options()
    if name in ("run_task", "run_suite", "partial_result"):
        from evaluators import suite

        return getattr(suite, name)
    if name == "Evaluator":
        from evaluators.task import Evaluator

        return Evaluator
    raise AttributeError(f"module 'evaluators' has no attribute {name!r}")


__all__ = ["TASKS", "TASK_OPTIONS", "EvaluationCancelled", "Evaluator", "EvaluatorError", "partial_result",
           "run_suite", "run_task", "validate_task"]
