"""OpenAI-MRCR (openai/mrcr): 2,400 long multi-turn conversations holding 2, 4 or 8
identical requests; the model must reproduce the i-th answer after a random prefix.
`options` (pydantic), `protocol` (the card's grader and bins; no torch), `o200k` (the
o200k_base encoding offline), `data` (the parquet files), `evaluator` (torch), `scoring`
(prediction files graded), `score` (the `lctx score mrcr` command). docs/protocols/mrcr_graphwalks.md."""

from evaluators.mrcr.options import MrcrOptions
from evaluators.registry import Task

REGISTER = (
    Task(MrcrOptions, "evaluators.mrcr.evaluator:MrcrEvaluator",
         "OpenAI-MRCR: reproduce the i-th of 2/4/8 identical requests in a long chat, the card's grader per "
         "needle count and o200k length bin",
         scorer="evaluators.mrcr.score:SCORER"),
)
