"""Graphwalks (openai/graphwalks): 1,150 directed graphs given as edge lists, a BFS or a
parents query each, the node set answered on a last line "Final Answer: [...]". `options`
(pydantic), `protocol` (the card's parser and set F1; no torch), `data` (the parquet files),
`evaluator` (torch), `scoring` (`lctx score graphwalks`). docs/protocols/mrcr_graphwalks.md."""

from evaluators.graphwalks.options import GraphwalksOptions
from evaluators.registry import Task

REGISTER = (
    Task(GraphwalksOptions, "evaluators.graphwalks.evaluator:GraphwalksEvaluator",
         "Graphwalks: BFS and parents queries over long edge lists, the card's parser and set F1 per problem type "
         "and length bin"),
)
