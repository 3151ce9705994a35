"""BABILong (booydar/babilong): bAbI qa1-qa10 facts spread through PG-19 book text, 0k to
the model's limit. `options` (pydantic), `protocol` (prompts, answer comparison; no
torch), `generator` (the official sample generator; numpy, nltk), `evaluator` (torch),
`scoring` (prediction files scored), `score` (the `lctx score babilong` command)."""

from evaluators.babilong.options import BabilongOptions
from evaluators.registry import Task

REGISTER = (
    Task(BabilongOptions, "evaluators.babilong.evaluator:BabilongEvaluator",
         "BABILong: bAbI qa1-qa10 hidden in book text, accuracy per task and length with the official generator",
         scorer="evaluators.babilong.score:SCORER"),
)
