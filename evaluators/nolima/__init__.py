"""NoLiMa (adobe-research/NoLiMa): needles whose question shares no literal words with them,
placed at 26 depths of book haystacks, scored with the run configs' case-sensitive `contains`;
the base score (250/500/1K) and the effective length (the longest length at or above 0.85 x
base). Its data is under the Adobe Research License: lctx ships none and reads the user's
download. `options`, `protocol` (tests, draws, placement, metric; no torch), `data`,
`evaluator` (torch), `scoring` and `score` (`lctx score nolima`)."""

from evaluators.nolima.options import NoLiMaOptions
from evaluators.registry import Task

REGISTER = (
    Task(NoLiMaOptions, "evaluators.nolima.evaluator:NoLiMaEvaluator",
         "NoLiMa's non-literal needles in book haystacks (user-downloaded data), accuracy per length, base score "
         "and effective length", scorer="evaluators.nolima.score:SCORER"),
)
