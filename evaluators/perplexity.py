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
from evaluators.base import Built, Evaluator, EvaluatorError, Sample, as_int, as_int_list


class PerplexityEvaluator(Evaluator):
    name = "perplexity"
    version = "1"
    defaults = {"lengths": [1024, 2048, 4096], "text_file": None, "stride": None, "windows": 8, "seed": 0}
    selection = ("lengths", "windows")

    @classmethod
    def check(cls, o: dict[str, Any]) -> dict[str, Any]:
        o["lengths"] = as_int_list("lengths", o["lengths"], cls.name, minimum=2)
        if o["stride"] is not None:
            o["stride"] = as_int("stride", o["stride"], cls.name, minimum=1)
        o["windows"] = as_int("windows", o["windows"], cls.name, minimum=1)
        o["seed"] = as_int("seed", o["seed"], cls.name)
        if not isinstance(o["text_file"], str) or not o["text_file"]:
            raise EvaluatorError("perplexity: text_file is required: a local UTF-8 text file (absolute, or "
                                 "relative to the data directory), e.g. a PG-19 or Proof-Pile document")
        return o

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

    def aggregate(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        by_length: dict[str, Any] = {}
        for n in self.options["lengths"]:
            rs = [r for r in records if r["length"] == n]
            tokens = sum(r["tokens"] for r in rs)
            by_length[str(n)] = {"perplexity": math.exp(sum(r["nll"] for r in rs) / tokens) if tokens else None,
                                 "windows": len(rs), "tokens": tokens}
        return {"by_length": by_length, "stride": self.options["stride"]}
