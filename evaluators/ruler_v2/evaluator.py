"""RULER v2 through the engine (docs/protocols/ruler_v2.md).

The samples are drawn here (`source=generate`: `synthetic`, NeMo-Skills' prepare scripts on
RULER's generator, one seeded stream per task and length, each prompt encoded once and its ids
kept for the request) or read from the files prepare.py wrote (`source=prepared`). Each
sample's `question` (the whole prompt) is sent as one user message in the chat template
(prompt_config generic/default; the raw text with chat_template=false), greedy, up to
`max_new_tokens` within what the model's context leaves. The generation is scored by the
task's route (`protocol.route`): eval_ruler2 with match type all, part or 2steps, or eval_mcq's
boxed letter for mk_niah_medium/hard. A sample whose prompt leaves no room to generate is
recorded `beyond_context` and scored 0, as NeMo-Skills counts a failed generation. The result
is each task's 100 x mean per setup (or length), and per setup `compute_score`'s mean over the
tasks."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from checkpoints.requests import GenerateRequest
from evaluators.errors import EvaluatorError
from evaluators.generation import chat_prompt, user
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.ruler_v2 import protocol
from evaluators.ruler_v2.data import load_task
from evaluators.ruler_v2.options import RulerV2Options
from evaluators.ruler_v2.protocol import setup_score, table
from evaluators.ruler_v2.synthetic import V2Sample, generate, planned
from evaluators.task import Built, Evaluator, Sample

UNIT = "accuracy (%)"


class RulerV2Evaluator(Evaluator):
    name = "ruler_v2"
    version = "2"
    Options = RulerV2Options
    options: RulerV2Options

    def __init__(self, options: RulerV2Options, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.samples: dict[tuple[str, str], list[dict[str, Any]]] = {}  # source=prepared: the files' lines
        self._group: tuple[tuple[str, int], list[V2Sample]] | None = None  # source=generate: the last drawn
        self._drawing = threading.Lock()

    def prepare(self, loaded: LoadedModel) -> None:
        o = self.options
        missing = o.missing_files(self.data_dir)
        if missing:
            raise EvaluatorError("; ".join(missing))
        if o.source == "prepared":
            self.samples = {(s, t): load_task(self.data_dir, s, t, o.limit) for s in o.setups or [] for t in o.tasks}

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        o = self.options
        if o.source == "prepared":
            return [Sample(f"ruler_v2/{s}/{t}/{i}", {"setup": s, "subtask": t, "index": i})
                    for (s, t), rows in self.samples.items() for i in range(len(rows))]
        return [Sample(f"ruler_v2/{n}/{t}/{i}", {"setup": str(n), "length": n, "subtask": t, "index": i})
                for n in o.lengths or [] for t in o.tasks for i in range(planned(t, o.samples, self.data_dir))]

    def drawn(self, loaded: LoadedModel, task: str, length: int) -> list[V2Sample]:
        """All samples of one task and length, drawn at once (one seeded stream); the last group
        is kept while its samples are built."""
        with self._drawing:
            if self._group is None or self._group[0] != (task, length):
                tokenizer = loaded.tokenizer
                rows = generate(task, tokenizer, length, self.options.samples, self.options.seed,
                                lambda q: self.wrap(tokenizer, q), self.data_dir)
                self._group = ((task, length), rows)
            return self._group[1]

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        p = sample.params
        if self.options.source == "prepared":
            row = self.samples[(p["setup"], p["subtask"])][p["index"]]
            chat = chat_prompt(self, loaded, user(row["question"]))  # evaluators.generation's chat path
            ids, request = chat.ids, chat.request
        else:
            drawn = self.drawn(loaded, p["subtask"], p["length"])[p["index"]]
            row = drawn.line()
            if loaded.chat_api or drawn.ids is None:  # a chat-style server is sent the message itself
                chat = chat_prompt(self, loaded, user(row["question"]))
                ids, request = chat.ids, chat.request
            else:  # the fit test's encode is the request
                ids = list(drawn.ids)
                messages = tuple(user(row["question"]))

                def request(budget: int) -> GenerateRequest:
                    return GenerateRequest(ids, max_new_tokens=budget, messages=messages)
        context = loaded.config.effective_context
        budget = min(self.options.max_new_tokens, context - len(ids))
        record = {"setup": p["setup"], "subtask": p["subtask"], "index": p["index"], "route": protocol.route(p["subtask"]),
                  "prepared_length": row.get("length"), "prompt_tokens": len(ids), "truncated": False,
                  "references": row["expected_answer"]}
        if "length" in p:
            record = {**record, "length": p["length"], "sample_index": row["index"]}
        if budget < 1:
            return Built(sample, None, {**record, "beyond_context": True}, keep=row)
        return Built(sample, request(budget), {**record, "beyond_context": False, "max_new_tokens": budget}, keep=row)

    def score(self, built: Built, response: Generation | None) -> dict[str, Any]:
        if response is None:
            return {"prediction": None, "predicted_answer": None, "score": 0.0}
        s = protocol.score_one(built.record["subtask"], response.text, built.keep["expected_answer"])
        return {"prediction": response.text, "predicted_answer": s.predicted_answer, "score": s.score}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records, self.options.groups, self.options.tasks)

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
