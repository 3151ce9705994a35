"""Graphwalks (openai/graphwalks): 1,150 directed graphs given as edge lists, a BFS or a
parents query each, the node set answered on a last line "Final Answer: [...]". `options`
(pydantic), `protocol` (the sound set F1 and the card's literal one; no torch), `data` (the parquet files),
`evaluator` (torch), `scoring` (prediction files scored), `score`
(the `lctx score graphwalks` command). docs/protocols/mrcr_graphwalks.md."""

from evaluators.graphwalks.options import GraphwalksOptions
from evaluators.registry import Task

REGISTER = (
    Task(GraphwalksOptions, "evaluators.graphwalks.evaluator:GraphwalksEvaluator",
         "Graphwalks: BFS and parents queries over long edge lists, a sound set F1 (the card's literal one beside "
         "it) per problem type and length bin",
         scorer="evaluators.graphwalks.score:SCORER"),
)
