"""Google DeepMind's MRCR v2 (google-deepmind/eval_hub, eval_hub/mrcr_v2; Apache-2.0): long
text transcripts of "User: Write a <format> about <topic> in <style> style." turns holding
2, 4 or 8 identical requests; the model must prepend a 12-character hash to the i-th answer.
`options` (pydantic), `protocol` (run_evaluation.py's metric and the views; no torch),
`data` (the release's CSV files), `evaluator` (torch). docs/protocols/mrcr_v2.md."""

from evaluators.mrcr_v2.options import MrcrV2Options
from evaluators.registry import Task

REGISTER = (
    Task(MrcrV2Options, "evaluators.mrcr_v2.evaluator:MrcrV2Evaluator",
         "MRCR v2 (DeepMind): reproduce the i-th of 2/4/8 identical requests after a hash, run_evaluation.py's "
         "mrcr_v2_metric per needle count, \"up to 128K\" (cumulative) and \"at\" each length (pointwise)",
         scorer="evaluators.mrcr_v2.score:SCORER"),
)
