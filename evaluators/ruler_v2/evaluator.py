"""RULER v2 through the engine (docs/protocols/ruler_v2.md).

Each prepared sample's `question` (the whole prompt, as NeMo-Skills' prepare scripts wrote
it) is sent as one user message in the chat template (prompt_config generic/default; the
raw text with chat_template=false), greedy, up to `max_new_tokens` within what the model's
context leaves. The generation is scored by the task's route (`protocol.route`): eval_ruler2
with match type all, part or 2steps, or eval_mcq's boxed letter for mk_niah_medium/hard. A
sample whose prompt leaves no room to generate is recorded `beyond_context` and scored 0,
as NeMo-Skills counts a failed generation. The result is each task's 100 x mean per setup,
and per setup `compute_score`'s mean over the tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from evaluators.errors import EvaluatorError
from evaluators.generation import chat_prompt, user
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.ruler_v2 import protocol
from evaluators.ruler_v2.data import load_task
from evaluators.ruler_v2.options import RulerV2Options
from evaluators.ruler_v2.protocol import setup_score, table
from evaluators.task import Built, Evaluator, Sample

UNIT = "accuracy (%)"


class RulerV2Evaluator(Evaluator):
    name = "ruler_v2"
    version = "1"
    Options = RulerV2Options
    options: RulerV2Options

    def __init__(self, options: RulerV2Options, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.samples: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        if self.data_dir is None:
            raise EvaluatorError(f"ruler_v2 reads prepared files and no data directory is configured; "
                                 f"{self.options.data_howto}")
        self.samples = {(s, t): load_task(self.data_dir, s, t, self.options.limit)
                        for s in self.options.setups for t in self.options.tasks}

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        return [Sample(f"ruler_v2/{s}/{t}/{i}", {"setup": s, "subtask": t, "index": i})
                for (s, t), rows in self.samples.items() for i in range(len(rows))]

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        p = sample.params
        row = self.samples[(p["setup"], p["subtask"])][p["index"]]
        chat = chat_prompt(self, loaded, user(row["question"]))  # evaluators.generation's chat path
        ids = chat.ids
        context = loaded.config.effective_context
        budget = min(self.options.max_new_tokens, context - len(ids))
        record = {"setup": p["setup"], "subtask": p["subtask"], "index": p["index"], "route": protocol.route(p["subtask"]),
                  "prepared_length": row.get("length"), "prompt_tokens": len(ids), "truncated": False,
                  "references": row["expected_answer"]}
        if budget < 1:
            return Built(sample, None, {**record, "beyond_context": True}, keep=row)
        return Built(sample, chat.request(budget),
                     {**record, "beyond_context": False, "max_new_tokens": budget}, keep=row)

    def score(self, built: Built, response: Generation | None) -> dict[str, Any]:
        if response is None:
            return {"prediction": None, "predicted_answer": None, "score": 0.0}
        s = protocol.score_one(built.record["subtask"], response.text, built.keep["expected_answer"])
        return {"prediction": response.text, "predicted_answer": s.predicted_answer, "score": s.score}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records, self.options.setups, self.options.tasks)

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        raise EvaluatorError("ruler_v2 results always carry the typed result")


def typed(records: list[dict[str, Any]], setups: list[str], tasks: list[str]) -> TaskResult:
    """Per setup its compute_score mean (`<setup>`) and each task's accuracy (`<setup>/<task>`);
    the headline `average`, the mean over setups. Series: the score per setup (`bucket`), and
    per setup each task's (`dataset`, at the setup)."""
    cells = table(records)
    metrics, per_setup, out_series = [], [], []
    for s in setups:
        row = cells.get(s, {})
        score = setup_score(row)
        n = sum(k for _, k in row.values())
        per_setup.append((s, score, n))
        metrics.append(metric(s, score, True, UNIT, n, f"compute_score's mean over the tasks of setup {s}"))
        for t in tasks:
            value, k = row.get(t, (None, 0))
            metrics.append(metric(f"{s}/{t}", value, True, UNIT, k, f"{t} ({protocol.route(t)}) in setup {s}"))
        out_series.append(series("accuracy", "dataset", UNIT, True,
                                 [(t, *row.get(t, (None, 0))) for t in tasks], bucket=s))
    ran = [v for _, v, _ in per_setup if v is not None]
    average = sum(ran) / len(ran) if ran else None
    metrics.insert(0, metric("average", average, True, UNIT, len(records), "mean over setups of compute_score"))
    beyond = sum(bool(r.get("beyond_context")) for r in records)
    return TaskResult(
        headline="average",
        metrics=metrics,
        series=[series("accuracy", "bucket", UNIT, True, per_setup), *out_series],
        summary=f"average {fmt(average, 2)}; " + ", ".join(f"{s} {fmt(v, 2)}" for s, v, _ in per_setup)
        + (f"; {beyond} samples beyond the context scored 0" if beyond else ""),
        extra={"beyond_context": beyond},
    )
