"""Synthetic training text for the demo checkpoints: passkey prompts in exactly
the format of the passkey protocol (TDA paper appendix C; see
`docs/protocols/protocols.md`), each followed by its answer, plus
windows of any extra local text.

The prompt text is `checkpoints.passkey_text`, the same the passkey evaluator builds
its prompts from."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from checkpoints.passkey_text import KEY_RANGE, answer_text, garbage, needle_text, passkey_prompt
from checkpoints.tokenizer import ByteTokenizer


@dataclass
class Batch:
    """input_ids (B, T); targets (B, T) with -100 where nothing is predicted;
    answer_mask (B, T) True where the target is a copy of the key (see `Row`)."""

    input_ids: torch.Tensor
    targets: torch.Tensor
    answer_mask: torch.Tensor


@dataclass
class Row:
    """One training row: token ids and the spans (start, length) of tokens that
    can only be predicted by copying the key (the answer, with its EOS, and the
    key's repeat inside the needle)."""

    ids: list[int]
    copies: list[tuple[int, int]]


class SyntheticText:
    """A seeded stream of training rows for a byte-tokenised model.

    Each passkey row is BOS + prompt + answer + EOS with the prompt at a random
    length in [min_len, seq_len] tokens (the longest prompt of the protocol that
    fits, like the evaluator's), so the model sees every depth and every length
    up to the training length. With extra text, a `text_fraction` of rows are
    random windows of it instead."""

    def __init__(
        self,
        seq_len: int,
        seed: int,
        texts: list[str] | None = None,
        text_fraction: float = 0.0,
        min_len: int | None = None,
        dense_fraction: float = 0.0,
    ) -> None:
        self.tokenizer = ByteTokenizer()
        self.fixed = len(self.tokenizer.encode(passkey_prompt(KEY_RANGE[1], 0, 0)))  # longest key
        if seq_len <= self.fixed:
            raise ValueError(
                f"seq_len {seq_len} is too short: a passkey prompt with no haystack already takes "
                f"{self.fixed} byte tokens; use --seq-len {self.fixed + 64} or more"
            )
        self.seq_len = seq_len
        self.min_len = max(self.fixed, min_len or self.fixed)
        self.rng = random.Random(seed)
        self.text_ids = [t.encode("utf-8") for t in (texts or []) if t]
        if text_fraction and not self.text_ids:
            raise ValueError("text_fraction > 0 needs at least one non-empty extra text")
        if not 0.0 <= text_fraction < 1.0:
            raise ValueError(f"text_fraction must be in [0, 1), got {text_fraction}")
        self.text_fraction = text_fraction
        self.dense_fraction = dense_fraction  # share of curriculum rows (see `dense_row`)

    def passkey_row(self) -> Row:
        target = self.rng.randint(self.min_len, self.seq_len)
        key = self.rng.randint(*KEY_RANGE)
        # Byte tokens: the prompt grows one token per garbage character.
        fixed = len(self.tokenizer.encode(passkey_prompt(key, 0, 0)))
        g = target - fixed
        depth = self.rng.randint(0, g)
        text = passkey_prompt(key, g, depth)
        prompt = self.tokenizer.encode(text)
        answer = self.tokenizer.encode(answer_text(key), add_special_tokens=False)
        # The key's second occurrence in the needle is the other place a copy is learned (+1: BOS).
        repeat = 1 + text.index(f"Remember it. {key} ") + len("Remember it. ")
        copies = [(len(prompt), len(answer) + 1), (repeat, len(str(key)))]
        return Row(prompt + answer + self.tokenizer.eos_ids, copies)

    def dense_row(self) -> Row:
        """Curriculum row: the protocol's garbage with a needle every few dozen
        bytes, each needle's repeat being a short-range copy. Copy targets are
        several times denser than in a protocol row, which helps the copying
        circuit form within a few hundred steps on a CPU."""
        parts: list[str] = []
        length = 0  # BOS, and the "\n" joins counted per block
        copies: list[tuple[int, int]] = []
        while True:
            key = self.rng.randint(*KEY_RANGE)
            chunk = garbage(self.rng.randint(0, 30))
            block = "\n".join([chunk, needle_text(key)]) if chunk else needle_text(key)
            if length + 1 + len(block) > self.seq_len:
                break
            repeat = length + 1 + block.index(f"Remember it. {key} ") + len("Remember it. ")
            copies.append((repeat, len(str(key))))
            parts.append(block)
            length += 1 + len(block)
        return Row(self.tokenizer.encode("\n".join(parts)), copies)

    def text_row(self) -> Row:
        data = self.rng.choice(self.text_ids)
        n = min(len(data), self.seq_len)
        lo = self.rng.randint(0, len(data) - n)
        return Row([self.tokenizer.BOS, *data[lo : lo + n - 1]], [])

    def row(self) -> Row:
        if self.text_fraction and self.rng.random() < self.text_fraction:
            return self.text_row()
        if self.dense_fraction and self.rng.random() < self.dense_fraction:
            return self.dense_row()
        return self.passkey_row()

    def batch(self, size: int) -> Batch:
        rows = [self.row() for _ in range(size)]
        width = max(len(r.ids) for r in rows) - 1
        inputs = torch.full((size, width), self.tokenizer.PAD, dtype=torch.long)
        targets = torch.full((size, width), -100, dtype=torch.long)
        answer = torch.zeros((size, width), dtype=torch.bool)
        for i, row in enumerate(rows):
            n = len(row.ids) - 1
            inputs[i, :n] = torch.tensor(row.ids[:-1])
            targets[i, :n] = torch.tensor(row.ids[1:])
            for start, length in row.copies:
                answer[i, start - 1 : start - 1 + length] = True  # position t predicts token t + 1
        return Batch(inputs, targets, answer)


def read_texts(paths: list[str | Path]) -> list[str]:
    """Extra local training text (UTF-8 files), with a clear error for a bad path."""
    texts = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise ValueError(f"extra text file {path} does not exist; give UTF-8 text files with --text")
        texts.append(path.read_text(encoding="utf-8", errors="replace"))
    return texts
