"""Attention diagnostics (sink rate, sparsity, entropy, massive activations) from the
model's real attention: `options` (pydantic), `evaluator` (torch)."""

from evaluators.diagnostics.options import DiagnosticsOptions
from evaluators.registry import Task

REGISTER = (
    Task(DiagnosticsOptions, "evaluators.diagnostics.evaluator:DiagnosticsEvaluator",
         "attention sinks, sparsity, entropy and massive activations against length"),
)
