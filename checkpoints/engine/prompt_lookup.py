"""Prompt lookup: tokens drafted for a greedy row from its own text, verified by the model
in one step (Saxena 2023, "prompt lookup decoding"; transformers' `prompt_lookup_num_tokens`,
vLLM's n-gram speculator).

Long-context tasks copy: a needle's number, a passage's sentence, and a small model that
rambles repeats its haystack ("The grass is green. The sky is blue. ..."). When the last
n tokens of a row (prompt and generated) occurred before, what followed them then is a
good guess of what follows now. The engine runs the row's last token and the guess in one
step (`Decoder.ragged_logits`) and keeps the guessed tokens up to the first the model would
not have chosen, plus the model's own choice after them: every kept token is the greedy
choice given the tokens before it, so the output is greedy decoding's (up to float rounding:
the step computes several positions at once). A step reads the weights and every row's
keys once however many tokens it verifies, so on the 2-core CPU a step verifying up to 16
drafted tokens of each of 6 rows takes 0.3-0.5 s where a one-token step takes about 0.15 s
(RULER niah_single_1 at 2k: 12 decoding steps in 5.5 s against 127 in 19-22 s,
bench/results/ruler_e2e_cpu.md).

`PromptLookup` keeps one row's tokens and finds the latest earlier occurrence of its last
n-gram (n from `max_ngram` down to `min_ngram`); `DraftLength` is transformers' rule
(`num_assistant_tokens_schedule`) for how many tokens to draft: two more after a step
that kept them all, one fewer otherwise, and the row's acceptance rate, by which
`verify_width` decides how many of the drafted tokens a step checks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from checkpoints.requests import DEFAULT_DRAFT_TOKENS

# n-gram sizes matched, longest first (a 1-gram matches too often to be worth a draft).
MAX_NGRAM = 3
MIN_NGRAM = 2
# The first draft length of a row (the most is the engine's `draft_tokens`).
FIRST_DRAFT = 4
# A row's acceptance rate weighs each earlier draft's outcome by this much less than the next
# (the last five drafts or so count): a row that stops copying, or starts, is seen within a
# few steps.
ACCEPTANCE_DECAY = 0.8


class PromptLookup:
    """One row's text (prompt, then its generated tokens as they come) and a search of it for
    the latest earlier occurrence of its last n-gram: a vectorised scan of the token array at
    each draft (a fraction of a millisecond at 128k tokens), where an index of every n-gram
    would hold hundreds of bytes per token per row."""

    def __init__(self, prompt: Sequence[int], max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"n-gram sizes must satisfy 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.sizes = range(max_ngram, min_ngram - 1, -1)
        self._buf = np.empty(max(16, 2 * len(prompt)), dtype=np.int64)
        self._buf[: len(prompt)] = prompt
        self._len = len(prompt)
        self._seen = 0  # generated tokens already appended

    @property
    def text(self) -> list[int]:
        return self._buf[: self._len].tolist()

    def draft(self, generated: Sequence[int], most: int) -> list[int]:
        """Up to `most` tokens that followed the latest earlier occurrence of the text's last
        n-gram (the longest that occurred before), given the row's `generated` tokens so far
        (appended since the last call); [] when none occurred or `most` < 1."""
        self._extend(generated[self._seen:])
        self._seen = len(generated)
        if most < 1:
            return []
        end, text = self._len, self._buf[: self._len]
        for n in self.sizes:
            starts = end - n  # an earlier occurrence starts at i <= end - n - 1: a token follows it
            if starts < 1:
                continue
            hit = np.ones(starts, dtype=bool)
            for j in range(n):
                hit &= text[j : j + starts] == text[end - n + j]
            found = np.flatnonzero(hit)
            if found.size:
                after = int(found[-1]) + n
                return text[after : after + most].tolist()
        return []

    def _extend(self, tokens: Sequence[int]) -> None:
        if not tokens:
            return
        need = self._len + len(tokens)
        if need > self._buf.shape[0]:
            grown = np.empty(2 * need, dtype=np.int64)
            grown[: self._len] = self._buf[: self._len]
            self._buf = grown
        self._buf[self._len : need] = tokens
        self._len = need


class DraftLength:
    """How many tokens a row drafts next: `first` to start, two more after a step that kept
    its whole draft, one fewer after one that did not (transformers' "heuristic" rule),
    within [1, `most`]; and the share of drafted tokens the row keeps, each given the ones
    before it were kept (`acceptance`: kept tokens over kept tokens and misses, from an even
    start of one each, recent drafts weighing most)."""

    def __init__(self, first: int = FIRST_DRAFT, most: int = DEFAULT_DRAFT_TOKENS) -> None:
        self.most = most
        self.now = max(1, min(first, most))
        self.kept = self.missed = 0.0

    @property
    def acceptance(self) -> float:
        return (self.kept + 1) / (self.kept + self.missed + 2)

    def after(self, drafted: int, kept: int) -> None:
        if drafted == 0:
            return
        self.now = min(self.now + 2, self.most) if kept == drafted else max(1, self.now - 1)
        self.kept = ACCEPTANCE_DECAY * self.kept + kept
        self.missed = ACCEPTANCE_DECAY * self.missed + (kept < drafted)
