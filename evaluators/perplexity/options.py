"""The options of sliding-window perplexity (docs/protocols/protocols.md)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import model_validator

from evaluators.options import MAX_LENGTH, FilePath, Int, IntList, Seed, TaskOptions, option


class PerplexityOptions(TaskOptions):
    task: ClassVar[str] = "perplexity"

    lengths: IntList(2, MAX_LENGTH) = option([1024, 2048, 4096], "window lengths in tokens, BOS included",
                                             selects=True, tokens=True)
    text_file: FilePath = option(..., "the documents (absolute, or relative to the data directory): a UTF-8 "
                                 ".txt file, a .jsonl of {\"text\": ...} per line, or a folder of .txt files, "
                                 "e.g. PG-19 or Proof-Pile documents", file=True, folder=True)
    max_tokens: Int(ge=2, le=MAX_LENGTH) = option(32_768, "tokens scored per document (its first max_tokens): "
                                                  "the same tokens at every length", tokens=True)
    stride: Int(ge=1, le=MAX_LENGTH) | None = option(None, "sliding-window stride in tokens, as YaRN's "
                                                     "evaluation (default: L - 1, windows back to back after a BOS; without a "
                                                     "BOS they overlap by one context token)")
    seed: Seed = 0

    def context_needed(self) -> int:
        return max(self.lengths)  # each window is scored whole

    @model_validator(mode="after")
    def _budget(self) -> PerplexityOptions:
        if max(self.lengths) > self.max_tokens + 1:
            raise ValueError(f"the longest length {max(self.lengths)} exceeds max_tokens {self.max_tokens} (+1 "
                             "for BOS): no window could be that long; raise max_tokens or drop that length")
        return self
