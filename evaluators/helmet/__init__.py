"""HELMET (princeton-nlp/HELMET, Yen et al., ICLR 2025): seven application categories
(recall, RAG, re-rank, cite, long-document QA, summarization, many-shot ICL) at 8k-128k,
each length reached by the dataset's own knob, scored as HELMET scores
(docs/protocols/helmet.md).

- `files`: the datasets, their categories, per-length knobs and files (no torch);
- `options`: the task's options, named as HELMET's configs name them;
- `data`: HELMET's data.tar.gz files and the hub snapshots read as its load_* functions read
  them (sample selection and demonstrations drawn as they draw them);
- `prompts`: HELMET's templates, demonstrations and chat on/off per category;
- `metrics`, `alce`, `judged`, `collect`: scoring (HELMET's utils.py, eval_alce.py, the GPT-4o
  judge scripts, collect_results.py); `score`: `lctx score helmet`;
- `evaluator`: the `helmet` task through the engine or a served model."""

from evaluators.helmet.options import HelmetOptions
from evaluators.registry import Task

REGISTER = (
    Task(HelmetOptions, "evaluators.helmet.evaluator:HelmetEvaluator",
         "HELMET's seven categories (recall, RAG, re-rank, cite, long QA, summarization, ICL) at 8k-128k, scored as "
         "HELMET scores; judged parts through the task's judge (without one: the no-judge suite)",
         scorer="evaluators.helmet.score:SCORER"),
)
