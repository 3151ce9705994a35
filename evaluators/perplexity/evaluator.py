"""Perplexity against context length (protocols.md, "Perplexity against length"),
as YaRN's evaluation (jquesnelle/yarn, eval/perplexity.py) computes it.

Documents: a .txt file, a .jsonl of {"text": ...} or a folder of .txt files; each is
tokenized and cut to its first `max_tokens` tokens. At every length L the same tokens
are scored, so the curve measures context length, not text position: every token of a
document when the model has a BOS (put before every window, as YaRN's evaluation does),
and every token but the document's first when it has none (that token has no context).
A window is L tokens: BOS plus L - 1 text tokens, or L text tokens without a BOS, whose
first token is then only context. Windows start every `stride` text tokens (default
L - 1: back to back with a BOS, overlapping by that one context token without) and each
scores only the tokens past the previous window's end, YaRN's `trg_len`. One sample per
window.

Reported per length: the token-weighted perplexity exp(sum NLL / tokens) (headline) and
YaRN's figure, exp of the mean over windows of each window's mean NLL."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from checkpoints.engine import RollingRequest
from checkpoints.loading import LoadedModel
from evaluators.data import json_objects, read_text
from evaluators.errors import EvaluatorError
from evaluators.perplexity.options import PerplexityOptions
from evaluators.plots import lines
from evaluators.results import TaskResult, fmt, metric, series
from evaluators.task import Built, Evaluator, Sample
from evaluators.uncertainty import ErrorRule


def read_documents(path: Path) -> list[tuple[str, str]]:
    """(name, text) of each document: a .jsonl's lines ({"text": ...}), a folder's .txt files
    (sorted by name) or one text file."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".txt" and p.is_file())
        if not files:
            raise EvaluatorError(f"perplexity: folder {path} has no .txt files; put one document per .txt file")
        return [(p.name, read_text(p, "perplexity: text_file")) for p in files]
    if path.suffix == ".jsonl":
        docs = []
        for lineno, rec in json_objects(path, "a document"):
            if not isinstance(rec.get("text"), str):
                raise EvaluatorError(f"perplexity: {path}:{lineno} has no string 'text'; write one "
                                     f"{{\"text\": ...}} per line")
            docs.append((f"{path.name}:{lineno}", rec["text"]))
        if not docs:
            raise EvaluatorError(f"perplexity: {path} has no documents; write one {{\"text\": ...}} per line")
        return docs
    return [(path.name, read_text(path, "perplexity: text_file"))]


def windows(n: int, text_len: int, stride: int, bos: bool) -> list[tuple[int, int, int]]:
    """YaRN's loop over a document of n tokens: (begin, end, scored) per window of up to
    `text_len` text tokens starting every `stride`; each scores its last `scored` tokens,
    those past the previous window's end. A token needs context to be scored: BOS, or
    without one an earlier token of its own window (so a window's first text token is
    scored only when a BOS precedes it)."""
    out = []
    prev_end = 0
    for begin in range(0, n, stride):
        end = min(begin + text_len, n)
        first = max(prev_end, begin + (0 if bos else 1))
        if end > first:
            out.append((begin, end, end - first))
        prev_end = max(prev_end, end)
        if end == n:
            break
    return out


def default_stride(length: int) -> int:
    """L - 1 text tokens: with a BOS the windows lie back to back; without one they overlap
    by the one token that gives the next window's first scored token its context."""
    return length - 1


class PerplexityEvaluator(Evaluator):
    name = "perplexity"
    scores_prompts = True
    # 2: typed result; 3: the same tokens at every length (whole documents up to max_tokens), BOS per window,
    #    several documents, token-weighted and YaRN's mean-over-windows figures; 4: without a BOS, windows
    #    overlap by one context token so every token but the document's first is scored (and counted) once
    version = "4"
    Options = PerplexityOptions
    errors = ErrorRule(measured={
        "perplexity": "a measurement of the text given: exp of the mean negative log-likelihood over its windows, "
                      "not a mean of sampled scores",
        "perplexity_yarn": "a measurement of the text given, as perplexity"})
    options: PerplexityOptions

    def __init__(self, options: PerplexityOptions, data_dir: Path | None = None) -> None:
        super().__init__(options, data_dir)
        self.docs: list[tuple[str, list[int]]] = []
        self.bos: list[int] = []

    def text_path(self) -> Path:
        path = Path(self.options.text_file)
        if not path.is_absolute() and self.data_dir is not None and (self.data_dir / path).exists():
            path = self.data_dir / path
        if not path.exists():
            raise EvaluatorError(f"perplexity: text_file {self.options.text_file} not found (looked at {path})")
        return path

    def prepare(self, loaded: LoadedModel) -> None:
        tok = loaded.tokenizer
        self.bos = [tok.bos_id] if tok.bos_id is not None else []
        budget = self.options.max_tokens
        self.docs = [(name, tok.encode(text, add_special_tokens=False)[:budget])
                     for name, text in read_documents(self.text_path())]
        self.docs = [(name, ids) for name, ids in self.docs if len(ids) > (0 if self.bos else 1)]
        longest_doc = max((len(ids) for _, ids in self.docs), default=0)
        need = max(self.options.lengths) - len(self.bos)
        if longest_doc < need:
            raise EvaluatorError(f"perplexity: the longest document of {self.text_path()} has {longest_doc} "
                                 f"tokens (up to max_tokens), fewer than the {need} text tokens of the longest "
                                 "length; give longer documents or shorter lengths")
        stride = self.options.stride
        shortest = default_stride(min(self.options.lengths))
        if stride is not None and stride > shortest:
            raise EvaluatorError(f"perplexity: stride {stride} is longer than the {shortest} tokens the shortest "
                                 "window can score, so tokens between windows would go unscored; lower stride")

    def plan(self, loaded: LoadedModel) -> list[Sample]:
        out = []
        for n in self.options.lengths:
            text_len = n - len(self.bos)
            stride = self.options.stride or default_stride(n)
            for d, (_, ids) in enumerate(self.docs):
                for i, w in enumerate(windows(len(ids), text_len, stride, bool(self.bos))):
                    out.append(Sample(f"perplexity/len={n}/doc={d}/window={i}", {"length": n, "doc": d, "window": w}))
        return out

    def build(self, loaded: LoadedModel, sample: Sample) -> Built:
        begin, end, scored = sample.params["window"]
        ids = self.bos + self.docs[sample.params["doc"]][1][begin:end]
        return Built(sample, RollingRequest(ids),
                     {"length": sample.params["length"], "doc": sample.params["doc"], "start": begin, "end": end,
                      "prompt_tokens": len(ids), "truncated": False, "prediction": None, "references": None,
                      "tokens": scored, "bos": bool(self.bos)})

    def score(self, built: Built, response: torch.Tensor) -> dict[str, Any]:
        scored = built.record["tokens"]
        nll = -float(response[-scored:].sum())  # response: (len(ids) - 1,) token log-probabilities
        return {"nll": nll, "score": math.exp(nll / scored)}

    def aggregate(self, records: list[dict[str, Any]]) -> TaskResult:
        by_length: dict[str, Any] = {}
        for n in self.options.lengths:
            rs = [r for r in records if r["length"] == n]
            tokens = sum(r["tokens"] for r in rs)
            by_length[str(n)] = {
                "perplexity": math.exp(sum(r["nll"] for r in rs) / tokens) if tokens else None,
                "perplexity_yarn": math.exp(sum(r["nll"] / r["tokens"] for r in rs) / len(rs)) if rs else None,
                "windows": len(rs), "tokens": tokens, "documents": len({r["doc"] for r in rs}),
            }
        return self.typed(by_length, self.options.stride, self.options.max_tokens)

    @classmethod
    def typed(cls, by_length: dict[str, dict[str, Any]], stride: int | None,
              max_tokens: int | None = None) -> TaskResult:
        """Perplexity per length (lower is better), token-weighted and YaRN's mean over
        windows; the headline is the longest length's token-weighted figure."""
        longest = max(by_length, key=int) if by_length else None
        top = by_length[longest] if longest else {"perplexity": None, "windows": 0}
        line = ", ".join(f"{k}: {fmt(v['perplexity'], 2)}" for k, v in by_length.items())
        metrics = [metric("perplexity", top["perplexity"], False, "perplexity", top["windows"],
                          f"token-weighted, exp(sum NLL / tokens), at the longest length ({longest} tokens)")]
        out = [series("perplexity", "length", "perplexity", False,
                      [(int(k), v["perplexity"], v["windows"]) for k, v in by_length.items()])]
        if "perplexity_yarn" in top:  # version 3
            metrics.append(metric("perplexity_yarn", top["perplexity_yarn"], False, "perplexity", top["windows"],
                                  f"YaRN's: exp(mean over windows of the window's mean NLL), at {longest} tokens"))
            out.append(series("perplexity_yarn", "length", "perplexity", False,
                              [(int(k), v["perplexity_yarn"], v["windows"]) for k, v in by_length.items()]))
        return TaskResult(
            headline="perplexity", metrics=metrics, series=out,
            summary=f"perplexity {line}" + (f" (stride {stride})" if stride else ""),
            extra={"tokens": {k: v["tokens"] for k, v in by_length.items()}, "stride": stride,
                   "max_tokens": max_tokens},
        )

    @classmethod
    def legacy_result(cls, entry: dict[str, Any]) -> TaskResult:
        """Version 1 spread {by_length, stride} into the entry."""
        return cls.typed(entry["by_length"], entry.get("stride"))

    def plots(self, records: list[dict[str, Any]], result: TaskResult, folder: Path) -> list[Path]:
        found = {s.name: s for s in result.series}
        xs = [int(p.key) for p in found["perplexity"].points]
        return [lines(folder / "perplexity_vs_length.png", xs,
                      {name: [p.value for p in s.points] for name, s in found.items()},
                      "perplexity against context length (the same tokens at every length)",
                      "context length (tokens, BOS included)", "perplexity")]
