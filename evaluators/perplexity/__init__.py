"""Perplexity against context length (YaRN's evaluation): `options` (pydantic),
`evaluator` (windows and scoring; torch)."""

from evaluators.perplexity.options import PerplexityOptions
from evaluators.registry import Task

REGISTER = (
    Task(PerplexityOptions, "evaluators.perplexity.evaluator:PerplexityEvaluator",
         "perplexity of your documents against context length"),
)
