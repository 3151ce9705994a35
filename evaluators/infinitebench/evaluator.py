"""InfiniteBench through the engine (docs/protocols/infinitebench.md).

Each record is sent as the official scripts send it (`protocol`): `create_prompt` with the
prompt set the options pick, the prompt's token ids truncated in the middle to the budget
and decoded (special tokens skipped), then for prompts=gpt4 `create_msgs`' conversation in
the chat template (or the one user message in it when `chat_template` with the open set),
greedy decoding with the task's DATA_NAME_TO_MAX_NEW_TOKENS. The answer is scored by
compute_scores.py's scorer of its task; the result is each task's mean (percent, as the
README's table) and their average, with lctx's corrected value beside the literal one
where the official letter rewards a wrong answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from checkpoints.tokenizer import Tokenizer
from evaluators.errors import EvaluatorError
from evaluators.generation import chat_prompt, user
from evaluators.infinitebench import protocol
from evaluators.infinitebench.data import load_task
from evaluators.infinitebench.options import InfiniteBenchOptions
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample

UNIT = "score (%)"


class InfiniteBenchEvaluator(Evaluator):
    name = "infinitebench"
    version = "1"
    Options = InfiniteBenchOptions
    options: InfiniteBenchOptions

    def __init__(self, options: InfiniteBenchOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.records: dict[str, list[dict[str, Any]]] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        if self.data_dir is None:
            raise EvaluatorError(f"infinitebench reads benchmark files and no data directory is configured; "
                                 f"{self.options.data_howto}")
        self.records = {t: load_task(self.data_dir, t, self.options.limit) for t in self.options.tasks}

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        return [Sample(f"infinitebench/{t}/{i}", {"subtask": t, "index": i})
                for t, rows in self.records.items() for i in range(len(rows))]

    def new_tokens(self, task: str) -> int:
        return self.options.max_new_tokens or protocol.MAX_NEW_TOKENS[task]

    def budget(self, loaded: LoadedModel, task: str) -> int:
        """The truncation length: max_length, else the scripts' (128*1024 open, 127000 gpt4)
        within what the model's context leaves beside the generation."""
        if self.options.max_length:
            return self.options.max_length
        cap = protocol.GPT4_TRUNCATE if self.options.prompts == "gpt4" else protocol.OPEN_TRUNCATE
        context = loaded.config.effective_context
        budget = min(cap, context - self.new_tokens(task))
        if budget < 16:
            raise EvaluatorError(f"infinitebench {task}: the model's context ({context} tokens) leaves no prompt "
                                 f"budget beside {self.new_tokens(task)} new tokens; set max_new_tokens (or "
                                 "max_length)")
        return budget

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        task, index = sample.params["subtask"], sample.params["index"]
        eg = self.records[task][index]
        tokenizer: Tokenizer = loaded.tokenizer
        try:
            prompt = protocol.create_prompt(eg, task, self.options.prompts)
        except (ValueError, KeyError, IndexError) as e:
            raise EvaluatorError(f"infinitebench {task} record {index}: {e}") from None
        max_len = self.budget(loaded, task)
        ids, truncated = protocol.truncate_middle(tokenizer.encode(prompt), max_len)
        if truncated:
            prompt = tokenizer.decode(ids, skip_special_tokens=True)
        # evaluators.generation's chat path: the open prompt as the one user message (in the template
        # when chat_template), GPT-4's create_msgs conversation in the template; a chat-style server is
        # sent the messages themselves
        messages = protocol.gpt4_messages(prompt, task) if self.options.prompts == "gpt4" else user(prompt)
        chat = chat_prompt(self, loaded, messages)
        final = chat.ids
        request = chat.request(self.new_tokens(task))
        label = protocol.get_answer(eg, task)
        record = {"subtask": task, "index": index, "record_id": eg.get("id"), "prompt_tokens": len(final),
                  "truncated": truncated, "max_length": max_len, "references": label}
        return Built(sample, request, record, keep=(task, label))

    def score(self, built: Built, response: Generation) -> dict[str, Any]:
        task, label = built.keep
        prediction = response.text
        model_name = "gpt4" if self.options.prompts == "gpt4" else ""
        try:
            s = protocol.score_one(task, prediction, label, model_name)
        except ValueError as e:
            raise EvaluatorError(f"infinitebench {task}: {e}") from None
        out = {"prediction": prediction, "score": s.literal, "score_corrected": s.corrected}
        if s.note:
            out["scorer_note"] = s.note
        return out

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        return typed(records, self.options.tasks)

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        raise EvaluatorError("infinitebench results always carry the typed result")


def _mean(values: list[float]) -> float | None:
    return round(100 * sum(values) / len(values), 2) if values else None


def typed(records: list[dict[str, Any]], tasks: list[str]) -> TaskResult:
    """Each task's mean score in percent (compute_scores' get_score x 100), `average` over the
    tasks that ran (the headline), and `<task>_corrected` where lctx's correction moves it."""
    by_task: dict[str, list[dict[str, Any]]] = {t: [] for t in tasks}
    for r in records:
        by_task.setdefault(r["subtask"], []).append(r)
    metrics, points, corrected = [], [], {}
    for t, rs in by_task.items():
        literal = _mean([float(r.get("score") or 0.0) for r in rs])
        fixed = _mean([float(r.get("score_corrected", r.get("score")) or 0.0) for r in rs])
        metrics.append(metric(t, literal, True, UNIT, len(rs), f"compute_scores.py's {t}"))
        points.append((t, literal, len(rs)))
        if fixed != literal:
            corrected[t] = fixed
            metrics.append(metric(f"{t}_corrected", fixed, True, UNIT, len(rs),
                                  f"{t} with lctx's correction of a scorer bug (docs/protocols/infinitebench.md)"))
    ran = [v for _, v, n in points if n and v is not None]
    average = round(sum(ran) / len(ran), 2) if ran else None
    metrics.insert(0, metric("average", average, True, UNIT, len(ran), "mean of the tasks' scores"))
    notes = sum(1 for r in records if r.get("scorer_note"))
    return TaskResult(
        headline="average",
        metrics=metrics,
        series=[series("score", "dataset", UNIT, True, points)],
        summary=f"average {fmt(average, 2)} over {len(ran)} tasks; " + ", ".join(
            f"{t} {fmt(v, 2)}" for t, v, _ in points),
        extra={"corrected": corrected, "scorer_notes": notes,
               "truncated": sum(bool(r.get("truncated")) for r in records)},
    )
