"""The evaluators' errors (no heavy imports: the API schema and the CLI use them)."""

from __future__ import annotations


class EvaluatorError(ValueError):
    """Bad options or missing data; the message says what to do."""


class EvaluationCancelled(Exception):
    """`should_stop` asked the run to stop between samples; finished samples are kept."""
