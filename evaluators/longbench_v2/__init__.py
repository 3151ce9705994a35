"""LongBench v2 (THUDM/LongBench at its top level): 503 four-choice questions over long
documents, generate-and-extract as `pred.py`, scored as `result.py`. `options`
(pydantic), `protocol` (templates, truncation, answer extraction, result.py's table; no
torch), `evaluator` (the run path; torch), `scoring` (prediction files scored), `score` (the
`lctx score longbench-v2` command)."""

from evaluators.longbench_v2.options import LongBenchV2Options
from evaluators.registry import Task

REGISTER = (
    Task(LongBenchV2Options, "evaluators.longbench_v2.evaluator:LongBenchV2Evaluator",
         "LongBench v2's 503 multiple-choice questions (zero-shot or CoT), accuracy by difficulty and length",
         scorer="evaluators.longbench_v2.score:SCORER"),
)
