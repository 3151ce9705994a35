"""Perplexity against context length on a local text (protocols.md, "Perplexity
against length"): non-overlapping windows of L tokens, or with `stride` S a
sliding window as in the YaRN paper (each window of L tokens scores only its
last S tokens, the first window scores all of them). One sample per window."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from checkpoints.engine import RollingRequest
from checkpoints.loading import LoadedModel
from evaluators.base import Built, Evaluator, EvaluatorError, Sample
from evaluators.options import PerplexityOptions
from evaluators.results import TaskResult, fmt, metric, series


class PerplexityEvaluator(Evaluator):
    name = "perplexity"
    version = "2"  # 2: typed result (evaluators.results)
    Options = PerplexityOptions

    def __init__(self, options: dict[str, Any], data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.ids: list[int] = []

    def text_path(self) -> Path:
        path = Path(self.options["text_file"])
        if not path.is_absolute() and self.data_dir is not None and (self.data_dir / path).is_file():
            path = self.data_dir / path
        if not path.is_file():
            raise EvaluatorError(f"perplexity: text_file {self.options['text_file']} not found (looked at {path})")
        return path

    def prepare(self, loaded: LoadedModel) -> None:
        text = self.text_path().read_text(encoding="utf-8", errors="replace")
        self.ids = loaded.tokenizer.encode(text, add_special_tokens=False)
        longest = max(self.options["lengths"])
        if len(self.ids) < longest:
            raise EvaluatorError(f"perplexity: {self.text_path()} has {len(self.ids)} tokens, fewer than the "
                                 f"longest length {longest}; give a longer text or shorter lengths")

    def windows(self, length: int) -> list[tuple[int, int, int]]:
        """(start, end, scored) of each window: tokens [start, end), the last `scored` scored."""
        stride = self.options["stride"]
        out = []
        if stride is None:
            for start in range(0, len(self.ids) - length + 1, length):
                out.append((start, start + length, length - 1))
        else:
            for start in range(0, len(self.ids) - length + 1, stride):
                out.append((start, start + length, length - 1 if start == 0 else min(stride, length - 1)))
        return out[: self.options["windows"]]

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        return [Sample(f"perplexity/len={n}/window={i}", {"length": n, "window": w})
                for n in self.options["lengths"] for i, w in enumerate(self.windows(n))]

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        start, end, scored = sample.params["window"]
        return Built(sample, RollingRequest(self.ids[start:end]),
                     {"length": sample.params["length"], "start": start, "prompt_tokens": end - start,
                      "truncated": False, "prediction": None, "references": None, "tokens": scored})

    def score(self, built: Built, response: torch.Tensor) -> dict[str, Any]:
        scored = built.record["tokens"]
        nll = -float(response[-scored:].sum())  # response: (end - start - 1,) token log-probabilities
        return {"nll": nll, "score": math.exp(nll / scored)}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        by_length: dict[str, Any] = {}
        for n in self.options["lengths"]:
            rs = [r for r in records if r["length"] == n]
            tokens = sum(r["tokens"] for r in rs)
            by_length[str(n)] = {"perplexity": math.exp(sum(r["nll"] for r in rs) / tokens) if tokens else None,
                                 "windows": len(rs), "tokens": tokens}
        return self.typed(by_length, self.options["stride"])

    @classmethod
    def typed(cls, by_length: dict[str, dict[str, Any]], stride: int | None) -> TaskResult:
        """Perplexity per length (lower is better); the headline is the longest length's."""
        longest = max(by_length, key=int) if by_length else None
        top = by_length[longest] if longest else {"perplexity": None, "windows": 0}
        line = ", ".join(f"{k}: {fmt(v['perplexity'], 2)}" for k, v in by_length.items())
        return TaskResult(
            headline="perplexity",
            metrics=[metric("perplexity", top["perplexity"], False, "perplexity", top["windows"],
                            f"at the longest length ({longest} tokens)")],
            series=[series("perplexity", "length", "perplexity", False,
                           [(int(k), v["perplexity"], v["windows"]) for k, v in by_length.items()])],
            summary=f"perplexity {line}" + (f" (stride {stride})" if stride else ""),
            extra={"tokens": {k: v["tokens"] for k, v in by_length.items()}, "stride": stride},
        )

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        """Version 1 spread {by_length, stride} into the entry."""
        return cls.typed(entry["by_length"], entry.get("stride"))
