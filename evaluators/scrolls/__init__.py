"""SCROLLS: `options` (pydantic), `evaluator` (lm-eval's and the official prompts, the
official metrics; torch), `score` (the
`lctx score scrolls` command)."""

from evaluators.registry import Task
from evaluators.scrolls.options import ScrollsOptions

REGISTER = (
    Task(ScrollsOptions, "evaluators.scrolls.evaluator:ScrollsEvaluator",
         "SCROLLS's seven tasks with the official metrics",
         scorer="evaluators.scrolls.score:SCORER"),
)
