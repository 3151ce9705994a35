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
the step computes several positions at once). On a CPU a step's cost is its weights' and
keys' bytes more than its arithmetic, so verifying eight tokens costs about what decoding
one does (bench/results/ruler_e2e_cpu.md measures it).

`PromptLookup` keeps one row's n-gram index (the most recent earlier occurrence of each
n-gram, n from `max_ngram` down to `min_ngram`); `DraftLength` is transformers' schedule
of how many tokens to draft: two more after a step that kept them all, one fewer
otherwise."""

from __future__ import annotations

from collections.abc import Sequence

# n-gram sizes matched, longest first (a 1-gram matches too often to be worth a draft).
MAX_NGRAM = 3
MIN_NGRAM = 2
# Draft lengths: the first, and the most one step drafts per row.
FIRST_DRAFT = 4
MAX_DRAFT = 16


class PromptLookup:
    """One row's text (prompt, then its generated tokens as they come) and the most recent
    earlier position each of its n-grams ended at."""

    def __init__(self, prompt: Sequence[int], max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"n-gram sizes must satisfy 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.sizes = range(max_ngram, min_ngram - 1, -1)
        self.text: list[int] = list(prompt)
        self._prompt = len(self.text)
        self._seen = 0  # generated tokens already appended to `text`
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.sizes}
        self._indexed = 0  # n-grams ending at positions < this are in the index

    def draft(self, generated: Sequence[int], most: int) -> list[int]:
        """Up to `most` tokens that followed the latest earlier occurrence of the text's last
        n-gram (the longest that occurred before), given the row's `generated` tokens so far
        (appended since the last call); [] when none occurred or `most` < 1."""
        self.text.extend(generated[self._seen:])
        self._seen = len(generated)
        end = len(self.text)
        self._index_until(end - 1)
        if most < 1:
            return []
        for n in self.sizes:
            if end < n:
                continue
            at = self._index[n].get(tuple(self.text[end - n:]))
            if at is not None:
                return self.text[at : at + most]
        return []

    def _index_until(self, last_end: int) -> None:
        """Index every n-gram ending before position `last_end` (the current one, ending at
        the text's end, must not find itself)."""
        text = self.text
        for end in range(max(self._indexed, 1), last_end + 1):
            for n in self.sizes:
                if end >= n:
                    self._index[n][tuple(text[end - n : end])] = end
        self._indexed = max(self._indexed, last_end + 1)


class DraftLength:
    """How many tokens a row drafts next: `first` to start, two more after a step that kept
    its whole draft, one fewer after one that did not (transformers' "heuristic" schedule),
    within [1, `most`]."""

    def __init__(self, first: int = FIRST_DRAFT, most: int = MAX_DRAFT) -> None:
        self.most = most
        self.now = max(1, min(first, most))

    def after(self, drafted: int, kept: int) -> None:
        if drafted == 0:
            return
        self.now = min(self.now + 2, self.most) if kept == drafted else max(1, self.now - 1)
