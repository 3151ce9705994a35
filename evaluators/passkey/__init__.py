"""Passkey retrieval (the TDA paper's protocol) and the needle grid: `options` (pydantic,
what the API and CLI read), `evaluator` (prompts, scoring, results; torch)."""

from evaluators.passkey.options import NeedleOptions, PasskeyOptions
from evaluators.registry import Task

REGISTER = (
    Task(PasskeyOptions, "evaluators.passkey.evaluator:PasskeyEvaluator",
         "retrieve a 5-digit key hidden in filler text, accuracy per length"),
    Task(NeedleOptions, "evaluators.passkey.evaluator:NeedleEvaluator",
         "retrieve a needle at chosen depths and lengths, accuracy per cell (heatmap)"),
)
