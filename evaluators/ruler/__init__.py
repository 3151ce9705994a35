"""NVIDIA RULER (docs/protocols/ruler.md): the 13 synthetic tasks, sized to each target
length with the model's own tokenizer, scored as NVIDIA's evaluate.py scores, averaged per
length, with the effective length and bootstrap intervals.

- `options`: the task's options (pydantic; what the API and CLI read), `files`: the data files;
- `protocol`: the task table, prompt templates, answer prefixes and model wrappers (sections 2-3);
- `data`: the local files (section 9) and the essay sentence splitter;
- `synthetic`: the sample generators and their sizing (sections 4-5), one seeded stream per
  task and length as NVIDIA's scripts draw them;
- `scoring`: post-processing, string_match_all / string_match_part, prediction files (sections 6-7);
- `score`: the `lctx score ruler` command;
- `summary`: per-length averages, effective length, bootstrap intervals (section 8);
- `evaluator`: the `ruler` task (requests through the engine, typed result, plots)."""

from evaluators.registry import Task
from evaluators.ruler.options import RulerOptions

REGISTER = (
    Task(RulerOptions, "evaluators.ruler.evaluator:RulerEvaluator",
         "NVIDIA RULER's 13 tasks with effective length and bootstrap intervals",
         scorer="evaluators.ruler.score:SCORER"),
)
