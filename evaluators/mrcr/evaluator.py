"""OpenAI-MRCR through the engine (docs/protocols/mrcr_graphwalks.md).

Each row's conversation (`json.loads(prompt)`) is rendered in the checkpoint's chat template
with the generation prompt for the next assistant turn, answered greedily, and graded with
the card's `grade` on the response as generated (nothing stripped). Rows are binned as the
card bins them (o200k_base tokens of prompt + answer, `protocol.length_bin`) and also by the
model's own tokens (the rendered prompt + the answer). A row whose rendered prompt and answer
do not fit in the model's context is not run: it is recorded as `beyond_context` and
counted in every table, never dropped. On a chat-style endpoint the messages themselves go to
the server (`GenerateRequest.messages`); the rendered ids count the tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from evaluators.generation import beyond_context_metric, beyond_context_series, generation
from evaluators.mrcr import o200k, protocol
from evaluators.mrcr.data import load_rows
from evaluators.mrcr.options import BIN_NAMES, MrcrOptions
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample
from evaluators.uncertainty import ErrorRule

UNIT = "fraction"
KEPT_FIELDS = ("n_needles", "desired_msg_index", "total_messages", "n_chars", "random_string_to_prepend")


class MrcrEvaluator(Evaluator):
    name = "mrcr"
    version = "1"
    Options = MrcrOptions
    errors = ErrorRule(cells={"bucket": "bin", "needles": "n_needles"},
                       series_cells={"score_own_tokens": {"bucket": "own_bin"}})
    options: MrcrOptions

    def __init__(self, options: MrcrOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.rows: dict[int, list[dict[str, Any]]] = {}
        self._bin_tokens: dict[tuple[int, int], int] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        self.count = o200k.counter(self.options.o200k_file)
        self.rows = load_rows(self.data_dir, self.options.needles)

    def bin_tokens(self, n: int, index: int) -> int:
        """o200k tokens of the row's prompt and answer (counted once)."""
        key = (n, index)
        if key not in self._bin_tokens:
            row = self.rows[n][index]
            messages = protocol.messages_of(row["prompt"], f"mrcr {n}needle row {index}")
            self._bin_tokens[key] = protocol.bin_tokens(self.count, messages, row["answer"])
        return self._bin_tokens[key]

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        o = self.options
        samples = []
        for n in o.needles:
            indices = list(range(len(self.rows[n])))
            if o.bins is not None:
                indices = [i for i in indices if protocol.length_bin(self.bin_tokens(n, i)) in o.bins]
            if o.limit:
                indices = indices[: o.limit]
            samples += [Sample(f"mrcr/{n}needle/{i}", {"needles": n, "index": i}) for i in indices]
        return samples

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        n, index = sample.params["needles"], sample.params["index"]
        row = self.rows[n][index]
        messages = protocol.messages_of(row["prompt"], f"mrcr {n}needle row {index}")
        tokens = self.bin_tokens(n, index)
        record = {**{k: row[k] for k in KEPT_FIELDS}, "index": index, "o200k_tokens": tokens,
                  "bin": protocol.length_bin(tokens), "references": [row["answer"]]}
        built = generation(self, loaded, sample, messages, row["answer"], record, keep=row)
        built.record["own_bin"] = protocol.length_bin(built.record["prompt_tokens"] + built.record["answer_tokens"])
        return built

    def score(self, built: Built, response: Generation | None) -> dict[str, Any]:
        if response is None:
            return {"prediction": None, "score": None}
        row = built.keep
        text = response.text
        return {"prediction": text, "prefix_found": text.startswith(row["random_string_to_prepend"]),
                "score": protocol.grade(text, row["answer"], row["random_string_to_prepend"])}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records, self.options.bins)


def typed(records: list[dict[str, Any]], bins: list[str] | None = None) -> TaskResult:
    """The card's mean ratio overall (the headline), per needle count and per official bin
    (a series along `bucket`, one per needle count and one over all), and per bin of the
    model's own tokens; rows beyond the context are counted in each cell's `beyond` and in
    the metric `beyond_context`, never averaged in."""
    t = protocol.table(records)
    overall = t.get("overall", {}).get("all", {"score": None, "n": 0, "beyond": 0})
    metrics = [metric("overall", overall["score"], True, UNIT, overall["n"],
                      "mean of the card's grade over the rows that fit in the model's context")]
    for n, cell in t.get("needles", {}).items():
        metrics.append(metric(f"needles_{n}", cell["score"], True, UNIT, cell["n"], f"{n}-needle rows"))
    metrics.append(beyond_context_metric(overall["beyond"], "rows", "rows whose prompt and answer exceed the "
                                                                     "model's context: not run, not averaged"))

    def points(group: str) -> list[tuple[str, float | None, int]]:
        return [(k, c["score"], c["n"]) for k, c in t.get(group, {}).items()]

    out = [series("score", "bucket", UNIT, True, points("bin"))]
    out += [series("score", "bucket", UNIT, True, points(f"needles={n}"), needles=int(n)) for n in t.get("needles", {})]
    out.append(series("score_own_tokens", "bucket", UNIT, True, points("own_bin")))
    out.append(beyond_context_series("bucket", "rows", t.get("bin", {})))
    by_needles = ", ".join(f"{n}: {fmt(c['score'])}" for n, c in t.get("needles", {}).items())
    by_bin = ", ".join(f"{k} {fmt(c['score'])}" for k, c in t.get("bin", {}).items())
    return TaskResult(
        headline="overall",
        metrics=metrics,
        series=out,
        summary=(f"overall {fmt(overall['score'])} (n={overall['n']}); needles {by_needles}; bins {by_bin}; "
                 f"{overall['beyond']} rows beyond the context"),
        extra={"table": t, "bins_selected": bins or list(BIN_NAMES),
               "no_prefix": sum(1 for r in records if r.get("prefix_found") is False)},
    )
