"""InfiniteBench (OpenBMB/InfiniteBench): 12 tasks over 100K+ token inputs, prompted as its
scripts prompt and scored as `src/compute_scores.py` scores. `options` (pydantic),
`protocol` (templates, truncation, the scorers; no torch), `data` (the task files),
`evaluator` (the run path; torch), `scoring` (prediction files scored), `score` (the
`lctx score infinitebench` command)."""

from evaluators.infinitebench.options import InfiniteBenchOptions
from evaluators.registry import Task

REGISTER = (
    Task(InfiniteBenchOptions, "evaluators.infinitebench.evaluator:InfiniteBenchEvaluator",
         "InfiniteBench's 12 tasks (retrieval, books, dialogue, math, code) scored as compute_scores.py, per task "
         "and averaged", scorer="evaluators.infinitebench.score:SCORER"),
)
