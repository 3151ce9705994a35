"""RULER v2 (NVIDIA NeMo-Skills `nemo_skills/dataset/ruler2/`): 12 tasks (multi-key and
multi-value needles and QA at basic, easy, medium, hard) scored as `eval_ruler2` and
`eval_mcq` score them. `options` (pydantic), `protocol` (routes and scorers; no torch),
`data` (the prepared files), `evaluator` (the run path; torch), `scoring` and `score`
(`lctx score ruler-v2`)."""

from evaluators.registry import Task
from evaluators.ruler_v2.options import RulerV2Options

REGISTER = (
    Task(RulerV2Options, "evaluators.ruler_v2.evaluator:RulerV2Evaluator",
         "RULER v2's 12 tasks (NeMo-Skills' prepared files) scored as eval_ruler2 / eval_mcq, per task and setup",
         scorer="evaluators.ruler_v2.score:SCORER"),
)
