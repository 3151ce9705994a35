"""Artificial Analysis Long Context Reasoning (ArtificialAnalysis/AA-LCR): 100 questions over
30 document sets of ~100k tokens, each answer graded CORRECT or INCORRECT by a judge model
with the card's prompt, pass@1 averaged over repeats. `options` (pydantic), `protocol` (the
card's prompts, the verdict, the table; no torch), `data` (the CSV and the extracted
documents in the card's order), `evaluator` (torch), `scoring` (a folder of predictions
judged), `score` (the `lctx score aa-lcr` command).
docs/protocols/aa_lcr.md."""

from evaluators.aa_lcr.options import AaLcrOptions
from evaluators.registry import Task

REGISTER = (
    Task(AaLcrOptions, "evaluators.aa_lcr.evaluator:AaLcrEvaluator",
         "AA-LCR: questions over ~100k-token document sets, answers graded CORRECT/INCORRECT by a judge model with "
         "the card's prompt; accuracy overall and per document category",
         scorer="evaluators.aa_lcr.score:SCORER"),
)
