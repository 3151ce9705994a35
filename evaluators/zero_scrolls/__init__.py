"""ZeroSCROLLS (tau-nlp/zero_scrolls): ten long-text tasks for zero-shot instruction models,
prompted and truncated as its API runner does and scored with its metrics. `options`,
`protocol` (prompts, truncation, metrics; no torch), `data`, `evaluator` (torch), `scoring` and
`score` (`lctx score zero-scrolls`)."""

from evaluators.registry import Task
from evaluators.zero_scrolls.options import ZeroScrollsOptions

REGISTER = (
    Task(ZeroScrollsOptions, "evaluators.zero_scrolls.evaluator:ZeroScrollsEvaluator",
         "ZeroSCROLLS' ten datasets (summaries, QA, SpaceDigest, BookSumSort) zero-shot, scored with its metrics and "
         "averaged", scorer="evaluators.zero_scrolls.score:SCORER"),
)
