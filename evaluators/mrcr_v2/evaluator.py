"""MRCR v2 through the engine (docs/protocols/mrcr_v2.md).

Each row's `queries` is sent as run_evaluation.py sends it, the one user turn: in the
checkpoint's chat template (`chat_template`, default true; a chat-style endpoint gets it as
the user message itself, `GenerateRequest.messages`) or raw to a base model. Greedy
decoding; the response is scored with `protocol.mrcr_v2_metric` as the release's code
computes it, and with the docstring's reading beside it. Rows run grouped by transcript (the
rows of one transcript share all but their final question), so the prefix cache prefills
each transcript once and a work unit's slice of the plan keeps a transcript's rows together.
A row whose prompt and answer do not fit in the model's context is not run: it is recorded
as `beyond_context` and counted, never dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from evaluators.generation import beyond_context_series, generation, user
from evaluators.mrcr_v2 import protocol
from evaluators.mrcr_v2.data import File, load_files
from evaluators.mrcr_v2.options import CUMULATIVE, FILES, POINTWISE, MrcrV2Options
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample
from evaluators.uncertainty import ErrorRule

UNIT = "fraction"


class MrcrV2Evaluator(Evaluator):
    name = "mrcr_v2"
    version = "1"
    Options = MrcrV2Options
    # the rows of one transcript share all but their last question: clustered by transcript
    errors = ErrorRule(cells={"bucket": "length", "needles": "needles"}, cluster=("transcript",),
                       series_cells={"score_upto": {}, "score_hash_first": {}})
    options: MrcrV2Options

    def __init__(self, options: MrcrV2Options, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.files: dict[tuple[int, str], File] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        self.files = load_files(self.data_dir, self.options.needles, self.options.lengths)

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        """Per needle count and length, the first `limit` rows in file order, then grouped by
        transcript (stable): neighbours in the plan share their prefix."""
        o = self.options
        samples = []
        for n in o.needles:
            for k in o.lengths:
                rows = self.files[(n, k)].rows
                indices = list(range(len(rows)))[: o.limit]
                indices.sort(key=lambda i, rows=rows: rows[i]["transcript"])
                samples += [Sample(f"mrcr_v2/{n}needle/{k}/{i}", {"needles": n, "length": k, "index": i})
                            for i in indices]
        return samples

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        n, k, index = sample.params["needles"], sample.params["length"], sample.params["index"]
        file = self.files[(n, k)]
        row = file.rows[index]
        record = {"needles": n, "length": k, "index": index, "data_file": file.path.name,
                  "transcript": row["transcript"], "context_len": row["context_len"],
                  "answer_token_count": row["answer_token_count"], "references": [row["answer"]]}
        return generation(self, loaded, sample, user(file.queries(index)), row["answer"], record, keep=row)

    def score(self, built: Built, response: Generation | None) -> dict[str, Any]:
        if response is None:
            return {"prediction": None, "score": None, "score_hash_first": None}
        text, answer = response.text, built.keep["answer"]
        return {"prediction": text, "score": protocol.mrcr_v2_metric(text, answer),
                "score_hash_first": protocol.hash_first_metric(text, answer),
                "hash": protocol.hash_position(text, answer)}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records)


def typed(records: list[dict[str, Any]]) -> TaskResult:
    """One metric per needle count and file, named as GDM's reports name the views
    (`8needle_upto_128K`, `8needle_at_1M`), with the docstring's reading beside each
    (`..._hash_first`); per needle count the pointwise curve (`score` along `bucket`) and
    the cumulative one over the pointwise files (`score_upto`). The headline is the cell
    reports print first: the most needles run, at the first length (upto_128K before the
    bins). Rows beyond the context are counted (`beyond_context`), never averaged in."""
    t = protocol.table(records)
    counts = sorted(int(key.removesuffix("needle")) for key in t if key.endswith("needle"))
    metrics, out, said = [], [], []
    for n in sorted(counts, reverse=True):  # the headline's cell first
        cells = t[f"{n}needle"]
        for k, c in cells.items():
            name = protocol.view_name(n, k)
            what = (f"{n}-needle rows of the release's cumulative file (4K to 128K tokens)" if k == CUMULATIVE
                    else f"{n}-needle rows of the release's {FILES[k]} file")
            metrics.append(metric(name, c["score"], True, UNIT, c["n"],
                                  f"mean of run_evaluation.py's mrcr_v2_metric over the {what} that ran"))
            metrics.append(metric(f"{name}_hash_first", c["score_hash_first"], True, UNIT, c["n"],
                                  "the same rows scored as the metric's docstring reads: 0 unless the hash opens "
                                  "the output"))
            beyond_here = f", {c['beyond']} beyond the context" if c["beyond"] else ""
            said.append(f"{name} {fmt(c['score'])} (n={c['n']}{beyond_here})")
        at = [(k, cells[k]) for k in POINTWISE if k in cells]
        if at:
            out.append(series("score", "bucket", UNIT, True, [(k, c["score"], c["n"]) for k, c in at], needles=n))
            out.append(series("score_hash_first", "bucket", UNIT, True,
                              [(k, c["score_hash_first"], c["n"]) for k, c in at], needles=n))
            out.append(series("score_upto", "bucket", UNIT, True,
                              [(k, c["score"], c["n"]) for k, c in t[f"{n}needle_upto"].items()], needles=n))
            out.append(beyond_context_series("bucket", "rows", dict(at), needles=n))
    every = [c for key, cells in t.items() if key.endswith("needle") for c in cells.values()]
    beyond, graded = sum(c["beyond"] for c in every), sum(c["n"] for c in every)
    for name, value, n_rows, what in (
            ("beyond_context", beyond, beyond, "rows whose prompt and answer exceed the model's context: not run, "
                                               "not averaged"),
            ("hash_missing", sum(c["hash_missing"] for c in every), graded, "answers without the row's hash "
                                                                             "(scored 0 by both readings)"),
            ("hash_later", sum(c["hash_later"] for c in every), graded, "answers whose hash does not open them: "
                                                                         "scored by the release's code, 0 by its "
                                                                         "docstring")):
        metrics.append(metric(name, float(value), None, "rows", n_rows, what))
    return TaskResult(
        headline=metrics[0].name if counts else "beyond_context",
        metrics=metrics,
        series=out,
        summary="; ".join(said) + f"; {beyond} rows beyond the context",
        extra={"table": t, "metric": "mrcr_v2_metric as run_evaluation.py's code computes it (the last hash "
                                     "anywhere in the output); *_hash_first: as its docstring reads"},
    )
