"""Graphwalks through the engine (docs/protocols/mrcr_graphwalks.md).

Each row's prompt is sent as it is given: as the one user message of the checkpoint's chat
template (the card: "meant to be supplied to the model as a user message"), or raw with
chat_template=false; greedy decoding. The response is graded as generated (`protocol`): the
headline a sound set F1 (NeMo-Gym's parser and F1), the card's code to the letter kept beside it
as `f1_card_literal` with the counts that part them. Results per problem type and length
bin (the hub file a row comes from: 128k_and_shorter, 256k_to_1mil), and per bin of the
model's own prompt tokens. A row whose prompt and the answer's final line do not fit in the
model's context is not run: recorded as `beyond_context` and counted, never dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from evaluators.generation import beyond_context_metric, beyond_context_series, generation, user
from evaluators.graphwalks import protocol
from evaluators.graphwalks.data import load_sets
from evaluators.graphwalks.options import SETS, GraphwalksOptions
from evaluators.mrcr.protocol import length_bin
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample
from evaluators.uncertainty import ErrorRule

UNIT = "fraction"


def final_line(nodes: list[str]) -> str:
    """The answer's last line as the prompt's examples write it: the least a model must generate."""
    return "Final Answer: [" + ", ".join(nodes) + "]"


class GraphwalksEvaluator(Evaluator):
    name = "graphwalks"
    # 2: the headline is the sound F1 (was the card's letter, now f1_card_literal)
    version = "2"
    Options = GraphwalksOptions
    errors = ErrorRule(cells={"bucket": "bin", "problem_type": "problem_type"},
                       series_cells={"f1_own_tokens": {"bucket": "own_bin"}, "f1_card_literal": {}})
    options: GraphwalksOptions

    def __init__(self, options: GraphwalksOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        self.rows = load_sets(self.data_dir, self.options.sets)

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        o = self.options
        samples = []
        for s in o.sets:
            indices = [i for i, r in enumerate(self.rows[s]) if r["problem_type"] in o.problem_types]
            if o.limit:
                indices = indices[: o.limit]
            samples += [Sample(f"graphwalks/{s}/{i}", {"set": s, "index": i}) for i in indices]
        return samples

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        s, index = sample.params["set"], sample.params["index"]
        row = self.rows[s][index]
        record = {"set": s, "index": index, "data_file": SETS[s], "bin": s, "problem_type": row["problem_type"],
                  "prompt_chars": row["prompt_chars"], "n_truth": len(set(row["answer_nodes"])),
                  "references": [final_line(row["answer_nodes"])]}
        built = generation(self, loaded, sample, user(row["prompt"]), final_line(row["answer_nodes"]), record,
                           keep=row)
        built.record["own_bin"] = length_bin(built.record["prompt_tokens"])
        return built

    def score(self, built: Built, response: Generation | None) -> dict[str, Any]:
        if response is None:
            return {"prediction": None, "score": None}
        g = protocol.grade(response.text, built.keep["answer_nodes"])
        return {"prediction": response.text, "parsed": g.parsed, "parse_error": g.parse_error, "overlap": g.overlap,
                "recall": g.recall, "precision": g.precision, "f1": g.f1, "score": g.f1,
                "f1_card_literal": g.f1_card_literal, "card_parsed": g.card_parsed,
                "card_parse_error": g.card_parse_error}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records)


def typed(records: list[dict[str, Any]]) -> TaskResult:
    """The sound F1 averaged overall (the headline), per problem type, per length bin (one
    series per problem type and one over both), per bin of the model's own prompt tokens; the
    card's literal F1 beside it (`f1_card_literal`, overall and per bin) with the counts that
    part the two (`protocol.COUNTS`), and the rows beyond the context."""
    t = protocol.table(records)
    overall = t.get("overall", {}).get("all", {"f1": None, "f1_card_literal": None, "n": 0, "beyond": 0,
                                               **dict.fromkeys(protocol.COUNTS, 0)})
    metrics = [metric("overall", overall["f1"], True, UNIT, overall["n"],
                      "mean sound set F1 (parse failure 0, no common node 0, empty truth answered empty 1) over "
                      "the rows that fit in the model's context")]
    for p, cell in t.get("problem_type", {}).items():
        metrics.append(metric(p, cell["f1"], True, UNIT, cell["n"], f"{p} rows, sound F1"))
    metrics.append(metric("f1_card_literal", overall["f1_card_literal"], True, UNIT, overall["n"],
                          "mean F1 of the dataset card's code to the letter (scores 1 where no node is shared: a "
                          "wrong, empty or unparsable answer; never matches the first node)"))
    for name, what in protocol.COUNTS.items():
        metrics.append(metric(name, float(overall[name]), None, "rows", overall["n"], what))
    metrics.append(beyond_context_metric(overall["beyond"], "rows", "rows whose prompt and final line exceed the "
                                                                     "model's context: not run"))

    def points(group: str, value: str = "f1") -> list[tuple[str, float | None, int]]:
        return [(k, c[value], c["n"]) for k, c in t.get(group, {}).items()]

    out = [series("f1", "bucket", UNIT, True, points("bin"))]
    out += [series("f1", "bucket", UNIT, True, points(f"problem_type={p}"), problem_type=p)
            for p in t.get("problem_type", {})]
    out.append(series("f1_card_literal", "bucket", UNIT, True, points("bin", "f1_card_literal")))
    out.append(series("f1_own_tokens", "bucket", UNIT, True, points("own_bin")))
    out.append(beyond_context_series("bucket", "rows", t.get("bin", {})))
    by_type = ", ".join(f"{p} {fmt(c['f1'])}" for p, c in t.get("problem_type", {}).items())
    return TaskResult(
        headline="overall",
        metrics=metrics,
        series=out,
        summary=(f"overall F1 {fmt(overall['f1'])} (n={overall['n']}); {by_type}; the card's literal F1 "
                 f"{fmt(overall['f1_card_literal'])} ({overall['card_scored_1']} rows it scores 1 and the sound F1 "
                 f"below: {overall['parse_errors']} unparsable, {overall['empty_answers']} empty answers, "
                 f"{overall['no_overlap']} with no node in common); {overall['beyond']} rows beyond the context"),
        extra={"table": t},
    )
