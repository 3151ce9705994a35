"""SCROLLS: the seven tasks with the official metrics (protocols.md, "SCROLLS").

Rows sharing an `id` are one example with several references. The input is used
as given (for query tasks the query precedes the document); when it does not fit
the budget (max length minus generation length) the end of the input is cut, so
the query at its start is kept and only the document shrinks."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from checkpoints.engine import GenerateRequest
from checkpoints.generate import Generation
from checkpoints.loading import LoadedModel
from checkpoints.tokenizer import Tokenizer
from evaluators.base import Built, Evaluator, EvaluatorError, Sample
from evaluators.data import group_by_id, load_scrolls
from evaluators.metrics import (
    ROUGE_KEYS,
    SCROLLS_METRICS,
    geometric_mean,
    scrolls_aggregate,
    scrolls_sample_scores,
)
from evaluators.options import ScrollsOptions
from evaluators.results import TaskResult, fmt, metric, series

# Generation lengths (tokens) sized to the references of each task.
MAX_NEW_TOKENS = {"gov_report": 1024, "summ_screen_fd": 512, "qmsum": 512, "qasper": 128,
                  "narrative_qa": 64, "quality": 32, "contract_nli": 16}
SPLITS = ("train", "validation", "test")


def truncate_end(tokenizer: Tokenizer, text: str, budget: int) -> tuple[list[int], bool]:
    """Prompt ids of at most `budget` tokens, cutting the end of the input (the document)."""
    ids = tokenizer.encode(text)
    if len(ids) <= budget:
        return ids, False
    return ids[:budget], True


class ScrollsEvaluator(Evaluator):
    name = "scrolls"
    version = "2"  # 2: typed result (evaluators.results)
    Options = ScrollsOptions

    def __init__(self, options: dict[str, Any], data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.examples: dict[str, list[dict[str, Any]]] = {}

    def prepare(self, loaded: LoadedModel) -> None:
        for t in self.options["tasks"]:
            ex = group_by_id(load_scrolls(t, self.options["split"], self.data_dir))
            self.examples[t] = ex[: self.options["limit"]] if self.options["limit"] else ex

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        return [Sample(f"scrolls/{t}/{e['id']}", {"task": t, "index": i})
                for t, exs in self.examples.items() for i, e in enumerate(exs)]

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        t = sample.params["task"]
        ex = self.examples[t][sample.params["index"]]
        max_new = self.options["max_new_tokens"] or MAX_NEW_TOKENS[t]
        max_length = self.options["max_length"] or loaded.config.effective_context
        budget = max_length - max_new
        if budget < 2:
            raise EvaluatorError(f"scrolls: max_length {max_length} leaves no room for a prompt next to "
                                 f"{max_new} generated tokens; raise max_length or lower max_new_tokens")
        ids, truncated = truncate_end(loaded.tokenizer, ex["input"], budget)
        return Built(sample, GenerateRequest(ids, max_new_tokens=max_new),
                     {"scrolls_task": t, "prompt_tokens": len(ids), "truncated": truncated,
                      "references": ex["outputs"]})

    def score(self, built: Built, response: Generation) -> dict[str, Any]:
        t = built.record["scrolls_task"]
        metrics = scrolls_sample_scores(t, response.text, built.record["references"])
        score = geometric_mean([metrics[k] for k in ROUGE_KEYS]) if SCROLLS_METRICS[t] == "rouge" \
            else next(iter(metrics.values()))
        return {"prediction": response.text, "metrics": metrics, "score": score}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        by_task: dict[str, list[dict]] = defaultdict(list)
        for r in records:
            by_task[r["scrolls_task"]].append(r)
        tasks = {}
        for t in self.options["tasks"]:
            rs = by_task.get(t, [])
            tasks[t] = {**scrolls_aggregate(t, [r["metrics"] for r in rs]), "metric": SCROLLS_METRICS[t],
                        "truncated": sum(r["truncated"] for r in rs)}
        scores = [v["score"] for v in tasks.values() if v["score"] is not None]
        return self.typed(tasks, self.options["split"], sum(scores) / len(scores) if scores else None)

    @classmethod
    def typed(cls, tasks: dict[str, dict[str, Any]], split: str, score: float | None) -> TaskResult:
        """The mean task score (headline) and a score per task (0-100); each task's own
        metrics (ROUGE-1/2/L, F1, exact match) go to `extra`."""
        unit = "score (0-100)"
        n = sum(v["n"] for v in tasks.values())
        line = ", ".join(f"{t} {fmt(v['score'], 1)}" for t, v in tasks.items())
        return TaskResult(
            headline="score",
            metrics=[metric("score", score, True, unit, n, f"mean of the tasks' official scores ({split} split)")],
            series=[series("score", "dataset", unit, True, [(t, v["score"], v["n"]) for t, v in tasks.items()])],
            summary=f"SCROLLS {split} {fmt(score, 2)} over {len(tasks)} tasks ({line})",
            extra={"split": split, "tasks": tasks},
        )

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        """Version 1 spread {tasks, split, score} into the entry."""
        return cls.typed(entry["tasks"], entry["split"], entry["score"])


def official_metrics(task: str, predictions: dict[str, str], references: dict[str, list[str]]) -> dict[str, Any]:
    """The official SCROLLS metric dict (the `tau/scrolls` metric script's `compute`) for
    `{id: prediction}` against grouped references: the metric keys, num_predicted,
    mean_prediction_length_characters, all rounded to 4 decimals, then scrolls_score,
    display_keys and display."""
    missing = sorted(set(references) - set(predictions))
    if missing:
        raise EvaluatorError(f"scrolls {task}: {len(missing)} ids have no prediction (e.g. {missing[:3]})")
    per = [scrolls_sample_scores(task, predictions[i], references[i]) for i in references]
    agg = scrolls_aggregate(task, per)
    kind = SCROLLS_METRICS[task]
    if kind == "rouge":
        out: dict[str, Any] = {f"rouge/{k}": agg[k] for k in ROUGE_KEYS}
        out["rouge/geometric_mean"] = agg["score"]
        score_key, display_keys = "rouge/geometric_mean", [f"rouge/{k}" for k in ROUGE_KEYS]
    else:
        out = {kind: agg["score"]}
        score_key, display_keys = kind, [kind]
    out["num_predicted"] = len(per)
    out["mean_prediction_length_characters"] = (
        sum(len(predictions[i]) for i in references) / len(per) if per else 0.0)
    out = {k: round(v, 4) for k, v in out.items()}
    out["scrolls_score"] = out[score_key]
    out["display_keys"] = display_keys
    out["display"] = [out[k] for k in display_keys]
    return out


def score_predictions_file(task: str, predictions_path: Path, data_dir: Path, split: str = "validation") -> dict:
    if task not in SCROLLS_METRICS:
        raise EvaluatorError(f"unknown SCROLLS task {task!r}; available: {', '.join(SCROLLS_METRICS)}")
    try:
        predictions = json.loads(Path(predictions_path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise EvaluatorError(f"{predictions_path}: cannot read predictions ({e}); expected a JSON object "
                             "{id: prediction}") from None
    if not isinstance(predictions, dict) or not all(isinstance(v, str) for v in predictions.values()):
        raise EvaluatorError(f"{predictions_path}: expected a JSON object {{id: prediction string}}")
    refs = {e["id"]: e["outputs"] for e in group_by_id(load_scrolls(task, split, data_dir))}
    return official_metrics(task, predictions, refs)
