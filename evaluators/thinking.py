"""Reasoning models in a task run (docs/protocols/reasoning.md): each generate request
gets its think plan (`ThinkPlanner`), each record the block's text, tokens and whether its
budget ran out, and each result how much the model thought: the thinking tokens per length
(mean and 95th percentile) as series beside the score, with a plot. No other harness reports
how much a model thinks as its context grows."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkpoints.requests import GenerateRequest
from checkpoints.thinking import SERVED_FALLBACK, ThinkPlan
from evaluators.errors import EvaluatorError
from evaluators.results import TaskResult, metric, series

if TYPE_CHECKING:
    from checkpoints.generate import Generation
    from checkpoints.lm import ModelSource
    from evaluators.task import Built, Evaluator

# Prompt tokens decoded to see whether the prompt's end opens a think block.
_PROMPT_TAIL = 64


class ThinkPlanner:
    """Gives a task's generate requests their think plan when the model marks thinking: its
    budget (the task's `thinking_budget`), the ids that close a block out of budget, whether
    the prompt opened the block, the answer prefix after it. A request whose prompt, thinking
    budget and answer budget do not fit the model's context is marked `beyond_context` (run
    as any length beyond the context is, never cut)."""

    def __init__(self, evaluator: Evaluator, loaded: ModelSource) -> None:
        self.tokenizer = loaded.tokenizer
        self.format = evaluator.think_format(self.tokenizer)
        self.setting = evaluator.options.thinking_setting() or "default"
        why = evaluator.options.thinking_without_template()
        if why is not None and not loaded.chat_api:
            raise EvaluatorError(why)
        if self.format is None and loaded.served and self.setting != "default":
            self.format = SERVED_FALLBACK  # the server's reasoning field, or its text split by the usual tags
        self.budget = evaluator.options.thinking_budget_option() or 0
        self.context = loaded.config.effective_context
        if self.format is not None:
            self.force_ids = tuple(self.tokenizer.encode(self.format.force, add_special_tokens=False))

    def attach(self, built: Built) -> Built:
        req = built.request
        if self.format is None or not isinstance(req, GenerateRequest):
            return built
        tail = self.tokenizer.decode(list(req.prompt_ids[-_PROMPT_TAIL:]), skip_special_tokens=False)
        prefix = tuple(self.tokenizer.encode(built.answer_prefix, add_special_tokens=False)) \
            if built.answer_prefix else ()
        plan = ThinkPlan(self.format, self.budget, self.force_ids, inside=self.format.inside_after(tail),
                         setting=self.setting, prefix_ids=prefix)
        built.request = req = replace(req, think=plan)
        built.record = {**built.record, "thinking_budget": self.budget}
        # switched off, the model is not asked to think: the answer's budget is what must fit
        needed = req.max_new_tokens if self.setting == "off" else req.most_new_tokens
        if len(req.prompt_ids) + needed > self.context:
            built.record["beyond_context"] = True
        return built

    @staticmethod
    def record(built: Built, response: Generation | None) -> dict[str, Any]:
        """The record's thinking fields: the block's text, its tokens, whether its budget ran out."""
        if not isinstance(built.request, GenerateRequest) or built.request.think is None or response is None:
            return {}
        return {"thinking": response.thinking, "thinking_tokens": response.thinking_tokens,
                "thinking_truncated": response.thinking_truncated}


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-th percentile (numpy's 'inverted_cdf'): a value some sample took."""
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)])


def thinking_series(result: TaskResult, records: list[dict[str, Any]]) -> None:
    """Add to `result` how much the model thought: the mean and 95th percentile of thinking
    tokens per length (or per dataset), overall as metrics, and the share of blocks whose
    budget ran out. Nothing for records of a run with no think plan."""
    rows = [r for r in records if "thinking_tokens" in r]
    if not rows:
        return
    tokens = [float(r["thinking_tokens"]) for r in rows]
    truncated = sum(bool(r.get("thinking_truncated")) for r in rows)
    result.metrics += [
        metric("thinking_tokens_mean", sum(tokens) / len(tokens), None, "tokens", len(rows),
               "mean tokens of a sample's think block (0: it did not think)"),
        metric("thinking_tokens_p95", percentile(tokens, 95), None, "tokens", len(rows),
               "95th percentile of a sample's think block tokens"),
        metric("thinking_truncated", truncated / len(rows), None, "fraction", len(rows),
               "share of samples whose think block reached thinking_budget and was closed for them"),
    ]
    axis = next((a for a in ("length", "dataset") if all(a in r for r in rows)), None)
    if axis is not None:
        groups: dict[Any, list[float]] = {}
        for r in rows:
            groups.setdefault(r[axis], []).append(float(r["thinking_tokens"]))
        keys = sorted(groups, key=lambda k: (isinstance(k, str), k))
        result.series += [
            series("thinking_tokens", axis, "tokens", None,
                   [(k, sum(groups[k]) / len(groups[k]), len(groups[k])) for k in keys]),
            series("thinking_tokens_p95", axis, "tokens", None,
                   [(k, percentile(groups[k], 95), len(groups[k])) for k in keys]),
        ]
    result.summary += f"; thought {sum(tokens) / len(tokens):.0f} tokens a sample (p95 {percentile(tokens, 95):.0f})"
    if truncated:
        result.summary += f", {truncated} blocks closed at the budget"


def thinking_plot(result: TaskResult, folder: Path) -> list[Path]:
    """thinking_tokens.png: mean and p95 thinking tokens against length (where the task has
    lengths), next to the task's own plots."""
    by_name = {s.name: s for s in result.series if s.axis == "length" and not s.at}
    if "thinking_tokens" not in by_name:
        return []
    from evaluators.plots import lines

    mean, p95 = by_name["thinking_tokens"], by_name["thinking_tokens_p95"]
    x = [int(p.key) for p in mean.points]
    return [lines(folder / "thinking_tokens.png", x, {"mean": [p.value for p in mean.points],
                                                       "95th percentile": [p.value for p in p95.points]},
                  "thinking tokens per sample", "length (tokens)", "thinking tokens")]
