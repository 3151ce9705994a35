"""ZeroSCROLLS through the engine (docs/protocols/zero_scrolls.md).

Each example is sent as the API runner sends it to a chat model (`chat_template`, the
default: the format request added, the answer prompt dropped, one user message) or as its
completion models and the HF script take it (the input as it is), truncated by build_prompt
to the model's context (or `max_length`) less the dataset's generation length, keeping the
query; greedy with api.py's generation length. On the validation split each prediction is
scored with its dataset's metric against every reference of its id; the result is each
dataset's score and their average (the leaderboard's). On the test split (outputs withheld)
the predictions are recorded for a leaderboard submission and nothing is scored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from evaluators.errors import EvaluatorError
from evaluators.generation import chat_prompt, user
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.scrolls.metrics import ROUGE_KEYS, geometric_mean
from evaluators.task import Built, Evaluator, Sample
from evaluators.zero_scrolls import protocol
from evaluators.zero_scrolls.data import load_dataset
from evaluators.zero_scrolls.options import ZeroScrollsOptions

UNIT = "score (0-100)"


class ZeroScrollsEvaluator(Evaluator):
    name = "zero_scrolls"
    version = "1"
    Options = ZeroScrollsOptions
    options: ZeroScrollsOptions

    def __init__(self, options: ZeroScrollsOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.examples: dict[str, list[dict[str, Any]]] = {}
        self.refs: dict[str, dict[str, list[str]]] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        if self.data_dir is None:
            raise EvaluatorError(f"zero_scrolls reads benchmark files and no data directory is configured; "
                                 f"{self.options.data_howto}")
        for d in self.options.datasets:
            self.examples[d], self.refs[d] = load_dataset(self.data_dir, d, self.options.split, self.options.limit)

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        return [Sample(f"zero_scrolls/{d}/{ex['id']}", {"dataset": d, "index": i})
                for d, rows in self.examples.items() for i, ex in enumerate(rows)]

    def new_tokens(self, dataset: str) -> int:
        return self.options.max_new_tokens or protocol.MAX_NEW_TOKENS[dataset]

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        d, i = sample.params["dataset"], sample.params["index"]
        ex = self.examples[d][i]
        tokenizer = loaded.tokenizer
        chat = self.options.chat_template
        if chat:
            ex = protocol.chat_example(ex, d)
        limit = self.options.max_length or loaded.config.effective_context
        new = self.new_tokens(d)
        try:
            prompt, truncated = protocol.build_prompt(ex, lambda s: tokenizer.encode(s, add_special_tokens=False),
                                                      tokenizer.decode, limit, new, chat)
        except ValueError as e:
            raise EvaluatorError(f"zero_scrolls {d} {ex['id']}: {e}; set max_length or max_new_tokens") from None
        request = chat_prompt(self, loaded, user(prompt))  # evaluators.generation's chat path
        ids = request.ids
        refs = self.refs[d].get(ex["id"], [])
        record = {"dataset": d, "example_id": ex["id"], "prompt_tokens": len(ids), "truncated": truncated,
                  "max_length": limit, "references": refs}
        return Built(sample, request.request(new), record,
                     keep=(d, refs))

    def score(self, built: Built, response: Generation) -> dict[str, Any]:
        d, refs = built.keep
        out: dict[str, Any] = {"prediction": response.text}
        if not refs:  # the test split: outputs withheld
            return {**out, "score": None}
        try:
            scores = protocol.example_score(d, response.text, refs)
        except (ValueError, ZeroDivisionError, IndexError) as e:
            raise EvaluatorError(f"zero_scrolls {d} {built.record['example_id']}: {e}") from None
        main = geometric_mean([scores[k] for k in ROUGE_KEYS]) if protocol.METRIC[d] == "rouge" \
            else scores[protocol.METRIC[d]]
        return {**out, "scores": scores, "score": main}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records, self.options.datasets)

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        raise EvaluatorError("zero_scrolls results always carry the typed result")


def typed(records: list[dict[str, Any]], datasets: list[str]) -> TaskResult:
    """Each dataset's score (ROUGE's geometric mean, F1, accuracy, exponential similarity,
    concordance index) and `average`, their mean (the headline)."""
    metrics, points = [], []
    for d in datasets:
        scored = [r["scores"] for r in records if r.get("dataset") == d and r.get("scores")]
        s = protocol.dataset_score(d, scored)
        metrics.append(metric(d, s["score"], True, UNIT, s["n"], f"{d}: {protocol.METRIC[d]}"))
        points.append((d, s["score"], s["n"]))
    values = [v for _, v, n in points if n and v is not None]
    average = sum(values) / len(values) if values else None
    metrics.insert(0, metric("average", average, True, UNIT, len(values), "mean of the datasets' scores"))
    return TaskResult(headline="average", metrics=metrics, series=[series("score", "dataset", UNIT, True, points)],
                      summary=f"average {fmt(average, 2)}; " + ", ".join(f"{d} {fmt(v, 2)}" for d, v, _ in points),
                      extra={"truncated": sum(bool(r.get("truncated")) for r in records),
                             "unscored": sum(r.get("score") is None for r in records)})
