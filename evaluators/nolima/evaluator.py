"""NoLiMa through the engine (docs/protocols/nolima.md).

For each length, haystack book, test and depth (run_tests.py's loops), the draws of
`NoLiMa_Tester.evaluate` (the character, the distractor's depth) replayed from its seeds, the
needle placed in a window of the book tokenized with the model's own tokenizer (as the
connector tokenizes with the served model's), the template filled, sent as the connector sends
it (its default system message, then the user message) in the chat template, greedy with 192
new tokens, scored by the run config's metric. A prompt that leaves no room to generate is
recorded `beyond_context` and kept out of the means. The result: accuracy per length (percent),
the base score, the 0.85 threshold and the effective length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from evaluators.errors import EvaluatorError
from evaluators.generation import chat_prompt
from evaluators.nolima import protocol
from evaluators.nolima.data import load_books, load_tests
from evaluators.nolima.options import NoLiMaOptions
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample

UNIT = "accuracy (%)"


class NoLiMaEvaluator(Evaluator):
    name = "nolima"
    version = "1"
    Options = NoLiMaOptions
    options: NoLiMaOptions

    def __init__(self, options: NoLiMaOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.tests: list[protocol.Test] = []
        self.books: list[tuple[str, str]] = []
        self.haystacks: dict[int, protocol.Haystack] = {}
        self.draws: dict[tuple[int, int, int], list[protocol.Draw]] = {}
        self.depth_list = protocol.depths(options.depths)

    def prepare(self, loaded: LoadedModel) -> None:
        if self.data_dir is None:
            raise EvaluatorError(f"nolima reads benchmark files and no data directory is configured; "
                                 f"{self.options.data_howto}")
        self.tests = load_tests(self.options, self.data_dir)
        self.books = load_books(self.options, self.data_dir)

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        return [Sample(f"nolima/{n}/{book}/{t.name}/{d}", {"length": n, "book": b, "test": i, "depth": d})
                for n in self.options.lengths for b, (book, _) in enumerate(self.books)
                for i, t in enumerate(self.tests) for d in range(len(self.depth_list))]

    def _haystack(self, loaded: LoadedModel, b: int) -> protocol.Haystack:
        if b not in self.haystacks:
            tok = loaded.tokenizer
            self.haystacks[b] = protocol.Haystack(self.books[b][1], lambda s: tok.encode(s, add_special_tokens=False),
                                                  lambda ids: tok.decode(ids, skip_special_tokens=False))
        return self.haystacks[b]

    def _draws(self, t: int, b: int, n: int) -> list[protocol.Draw]:
        key = (t, b, n)
        if key not in self.draws:
            test = self.tests[t]
            try:
                self.draws[key] = protocol.draws(test, test.seed + b, self.depth_list, n)
            except ValueError as e:
                raise EvaluatorError(f"nolima: {e}") from None
        return self.draws[key]

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        p = sample.params
        n, b, t, d = p["length"], p["book"], p["test"], p["depth"]
        test, draw, depth = self.tests[t], self._draws(t, b, n)[d], self.depth_list[d]
        hay = self._haystack(loaded, b)
        needle = protocol.needle_text(test, draw.character)
        try:
            if test.distractor is not None and draw.distractor_depth is not None:
                text = hay.place_with_distractor(needle, test.distractor, n, depth, draw.distractor_depth)
            else:
                text = hay.place(needle, n, depth)
        except ValueError as e:
            raise EvaluatorError(f"nolima {test.name} in {self.books[b][0]} at {n} tokens: {e}") from None
        user = protocol.fill(test, text, draw.character)
        system = self.options.system_prompt and self.options.chat_template  # a base model gets the text alone
        messages = ([{"role": "system", "content": protocol.SYSTEM_PROMPT}] if system else []) \
            + [{"role": "user", "content": user}]
        chat = chat_prompt(self, loaded, messages)  # evaluators.generation's chat path
        ids = chat.ids
        context = loaded.config.effective_context
        budget = min(self.options.max_new_tokens, context - len(ids))
        answers = protocol.gold(test, draw.character)
        record = {"length": n, "book": self.books[b][0], "test": test.name, "question_type": test.question_type,
                  "depth": round(depth, 4), "character": draw.character, "prompt_tokens": len(ids),
                  "truncated": False, "references": answers}
        if draw.distractor_depth is not None:
            record["distractor_depth"] = draw.distractor_depth
        if budget < 1:
            return Built(sample, None, {**record, "beyond_context": True}, keep=answers)
        return Built(sample, chat.request(budget), {**record, "beyond_context": False}, keep=answers)

    def score(self, built: Built, response: Generation | None) -> dict[str, Any]:
        if response is None:
            return {"prediction": None, "score": None}
        return {"prediction": response.text,
                "score": float(protocol.evaluate_response(response.text, built.keep, self.options.metric))}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records, self.options.lengths)

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        raise EvaluatorError("nolima results always carry the typed result")


def per_length(records: list[dict[str, Any]], lengths: list[int]) -> dict[int, tuple[float | None, int]]:
    """{length: (100 x mean score, n)} over the records that ran."""
    out = {}
    for n in lengths:
        scores = [float(r["score"]) for r in records if r["length"] == n and r.get("score") is not None]
        out[n] = (100 * sum(scores) / len(scores) if scores else None, len(scores))
    return out


def typed(records: list[dict[str, Any]], lengths: list[int]) -> TaskResult:
    cells = per_length(records, lengths)
    base, threshold, effective = protocol.summarize({n: v for n, (v, k) in cells.items() if k})
    ran = sum(k for _, k in cells.values())
    metrics = [metric("effective_length", effective, True, "tokens", ran,
                      "the longest length whose accuracy is at least 0.85 x the base score"),
               metric("base_score", base, True, UNIT, sum(cells[n][1] for n in protocol.BASE_LENGTHS if n in cells),
                      "mean accuracy at 250, 500 and 1K"),
               metric("threshold", threshold, True, UNIT, 0, "0.85 x the base score")]
    metrics += [metric(str(n), v, True, UNIT, k, f"accuracy at {n} tokens") for n, (v, k) in cells.items()]
    out_series = [series("accuracy", "length", UNIT, True, [(n, v, k) for n, (v, k) in cells.items()])]
    for qtype in sorted({r["question_type"] for r in records}):
        sub = per_length([r for r in records if r["question_type"] == qtype], lengths)
        out_series.append(series("accuracy", "length", UNIT, True, [(n, v, k) for n, (v, k) in sub.items()],
                                 question_type=qtype))
    beyond = sum(bool(r.get("beyond_context")) for r in records)
    return TaskResult(
        headline="effective_length" if effective is not None else (metrics[3].name if len(metrics) > 3 else
                                                                   "effective_length"),
        metrics=metrics,
        series=out_series,
        summary=(f"effective length {fmt(effective, unit='tokens')} (base {fmt(base, 1)}, threshold "
                 f"{fmt(threshold, 1)}); " + ", ".join(f"{n}: {fmt(v, 1)}" for n, (v, _) in cells.items())
                 + (f"; {beyond} samples beyond the context not run" if beyond else "")),
        extra={"beyond_context": beyond},
    )
