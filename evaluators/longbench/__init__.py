"""LongBench v1 and LongBench-E: `options` (pydantic), `configs` (lm-eval's task YAMLs:
prompts, generation lengths, metrics), `evaluator` (truncation, scoring, the leaderboard's
averages; torch), `score` (the `lctx score longbench` command)."""

from evaluators.longbench.options import LongBenchOptions
from evaluators.registry import Task

REGISTER = (
    Task(LongBenchOptions, "evaluators.longbench.evaluator:LongBenchEvaluator",
         "LongBench's 21 datasets (or LongBench-E's 13) with the official prompts and metrics",
         scorer="evaluators.longbench.score:SCORER"),
)
