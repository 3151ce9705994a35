"""AA-LCR through the engine or a served model (docs/protocols/aa_lcr.md).

Each question's documents are read in the order of its `data_source_filenames` (the card's
rule; evalscope reads a set's folder in directory order instead), put into the card's
prompt, sent as one user message (in the checkpoint's chat template on lctx's engine, as a
message to a chat-style server) and answered greedily, `repeats` times. The answer (after a
reasoning model's think block, which the record keeps) goes to the task's judge with the
card's judge prompt; the record holds the judgment (the judge's name, settings, raw answer)
and its verdict. A question whose prompt and official answer do not fit the model's context
is not run: it is recorded as `beyond_context`, counted in every table, never dropped. The
prompt's cl100k_base tokens are counted and recorded beside the card's `input_tokens`: equal
when the documents, their order and the template are the card's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from evaluators import encodings
from evaluators.aa_lcr import protocol
from evaluators.aa_lcr.files import (
    CSV_FILE,
    DATA_DIR,
    HOWTO,
    Question,
    document_paths,
    read_documents,
    read_questions,
)
from evaluators.aa_lcr.options import CL100K_HOWTO, AaLcrOptions
from evaluators.errors import EvaluatorError
from evaluators.generation import beyond_context_metric, beyond_context_series, generation, user
from evaluators.options import JUDGE_HOWTO
from evaluators.provenance import note_files
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample
from evaluators.uncertainty import ErrorRule

UNIT = "fraction"


class AaLcrEvaluator(Evaluator):
    name = "aa_lcr"
    version = "1"
    Options = AaLcrOptions
    # the questions of one document set (and each question's repeats) share its documents
    errors = ErrorRule(cells={"category": "document_category"}, cluster=("document_set_id",))
    options: AaLcrOptions

    def __init__(self, options: AaLcrOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.questions: list[Question] = []
        self._docs: dict[str, list[str]] = {}
        self._paths: dict[str, list[Path]] = {}
        self._cl100k: dict[str, int] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        if self.data_dir is None:
            raise EvaluatorError(f"aa_lcr: no data directory is configured; {HOWTO}")
        self.root = Path(self.data_dir) / DATA_DIR
        questions = read_questions(self.root / CSV_FILE)
        if self.options.categories is not None:
            questions = [q for q in questions if q.document_category in self.options.categories]
        self.questions = questions[: self.options.limit] if self.options.limit else questions
        # Every document the run reads, confined to its set folder and in the data revision with the CSV
        self._paths = {q.question_id: document_paths(self.root, q) for q in self.questions}
        note_files([p for paths in self._paths.values() for p in paths])
        self.count = encodings.counter("cl100k_base", self.options.cl100k_file, CL100K_HOWTO)

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        """Each question's repeats side by side: they share a prompt (the prefix cache serves it)."""
        return [Sample(f"aa_lcr/{q.question_id}/r{r}", {"question": i, "repeat": r})
                for i, q in enumerate(self.questions) for r in range(self.options.repeats)]

    def prompt(self, q: Question) -> str:
        """The card's prompt of a question (its documents read once per run), and its cl100k_base count."""
        if q.question_id not in self._docs:
            self._docs[q.question_id] = read_documents(self.root, q, self._paths.get(q.question_id))
            self._cl100k[q.question_id] = self.count(protocol.question_prompt(self._docs[q.question_id], q.question))
        return protocol.question_prompt(self._docs[q.question_id], q.question)

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        q = self.questions[sample.params["question"]]
        prompt = self.prompt(q)
        cl100k = self._cl100k[q.question_id]
        record = {"question_id": q.question_id, "repeat": sample.params["repeat"],
                  "document_category": q.document_category, "document_set_id": q.document_set_id,
                  "documents": list(q.filenames), "question": q.question, "references": [q.answer],
                  "input_tokens": q.input_tokens, "cl100k_tokens": cl100k,
                  "cl100k_matches_card": q.input_tokens is None or cl100k == q.input_tokens}
        return generation(self, loaded, sample, user(prompt), q.answer, record, keep=q)

    def score(self, built: Built, response: Generation | None) -> dict[str, Any]:
        """The judge's verdict on the answer (never on the think block); nothing is judged for a
        question beyond the model's context (with its thinking budget, where it thinks)."""
        if response is None or built.record.get("beyond_context"):
            return {"prediction": response.text if response is not None else None, "verdict": None, "score": None}
        if self.judging is None:
            raise EvaluatorError(f"aa_lcr: no judge is attached to grade the answers; {JUDGE_HOWTO}")
        q: Question = built.keep
        messages = protocol.judge_messages(self.options.judge_prompt, q.question, q.answer, response.text)
        judgment = self.judging.ask([messages])[0]
        said = protocol.verdict(self.options.judge_prompt, judgment["answer"])
        return {"prediction": response.text, "judgment": {**judgment, "verdict": said}, "verdict": said,
                "score": protocol.score_of(said)}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records, self.options.judge_prompt)


def typed(records: list[dict[str, Any]], judge_prompt: str) -> TaskResult:
    """Accuracy (pass@1 averaged over repeats) overall, the headline, and per document
    category; questions beyond the context counted (`beyond_context`), never averaged in, and
    beside it the accuracy over every question with those counted as not correct; judge answers
    with no verdict counted (`judge_unparsed`, scored 0)."""
    t = protocol.table(records)
    overall = t.get("overall", {}).get("all", {**protocol.new_cell(), "accuracy": None, "accuracy_all": None})
    metrics = [
        metric("accuracy", overall["accuracy"], True, UNIT, overall["n"],
               "share of answers the judge found CORRECT, over the questions and repeats that fit in the context"),
        metric("accuracy_all_questions", overall["accuracy_all"], True, UNIT, overall["n"] + overall["beyond"],
               "the same over every question and repeat, those beyond the context counted as not correct"),
        beyond_context_metric(overall["beyond"], "samples", "questions x repeats whose prompt and official answer "
                                                            "exceed the model's context: not run"),
        metric("judge_unparsed", float(overall["unparsed"]), None, "samples", overall["n"],
               "judge answers with no verdict (neither CORRECT nor INCORRECT as the prompt asks): scored 0"),
    ]
    categories = t.get("category", {})
    out = [series("accuracy", "category", UNIT, True, [(k, c["accuracy"], c["n"]) for k, c in categories.items()]),
           beyond_context_series("category", "samples", categories)]
    judges = sorted({r["judgment"]["judge"] for r in records if isinstance(r.get("judgment"), dict)})
    settings = next((r["judgment"]["settings"] for r in records if isinstance(r.get("judgment"), dict)), None)
    mismatched = sorted({r["question_id"] for r in records if r.get("cl100k_matches_card") is False})
    by_category = ", ".join(f"{k} {fmt(c['accuracy'])}" for k, c in categories.items())
    summary = (f"accuracy {fmt(overall['accuracy'])} (n={overall['n']}, judge {', '.join(judges) or '-'}, prompt "
               f"{judge_prompt}); {by_category}; {overall['beyond']} beyond the context")
    if mismatched:
        summary += f"; {len(mismatched)} prompts' cl100k_base count differs from the card's input_tokens"
    return TaskResult(
        headline="accuracy", metrics=metrics, series=out, summary=summary,
        extra={"table": t, "judge": judges[0] if len(judges) == 1 else judges, "judge_settings": settings,
               "judge_prompt": judge_prompt, "cl100k_differs_from_card": mismatched},
    )
