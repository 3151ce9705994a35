"""Greedy choice and the stop rule: the one rule the engine's decoding batch and the
one-sequence oracle (`generate.greedy_generate`) both follow, so they stop for the same
reason at the same token (vLLM's `check_stop`, gpt-fast's `sample`).

The choice is made on the device for the whole batch and read back once per step
(`pick`): a read per row, or a comparison per layer, would make the host wait for the
device every time (issue #41: 27 synchronisations per decode step of a 12-layer model)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

Decode = Callable[[list[int]], str]


@dataclass(frozen=True)
class StopRule:
    """When a greedy sequence ends. `eos`: end tokens (EOS unless turned off, plus the
    request's stop ids), left out of the output; `blocked`: what cannot be chosen before
    `min_new_tokens` exist (the end tokens and suppressed ones: transformers' `min_length`);
    `stop`: strings cutting the text before them; `decided(text)`: the evaluator's word
    that the score can no longer change."""

    eos: frozenset[int]
    max_new_tokens: int
    min_new_tokens: int = 0
    blocked: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    decided: Callable[[str], bool] | None = None

    @classmethod
    def make(cls, eos_ids: Sequence[int], max_new_tokens: int, *, stop: Sequence[str] = (), stop_at_eos: bool = True,
             min_new_tokens: int = 0, suppress_ids: Sequence[int] = (), stop_ids: Sequence[int] = (),
             decided: Callable[[str], bool] | None = None) -> StopRule:
        eos = (frozenset(eos_ids) if stop_at_eos else frozenset()) | frozenset(stop_ids)
        return cls(eos=eos, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                   blocked=tuple(sorted(eos | set(suppress_ids))), stop=tuple(s for s in stop if s), decided=decided)

    def blocked_at(self, generated: int) -> tuple[int, ...]:
        """Tokens that cannot be chosen after `generated` new tokens."""
        return self.blocked if generated < self.min_new_tokens else ()

    def exhausted(self, tokens: Sequence[int]) -> bool:
        return len(tokens) >= self.max_new_tokens

    def after(self, tokens: list[int], token: int, decode: Decode) -> tuple[str | None, str | None]:
        """`token` was chosen after `tokens`: (the stop reason or None, the output text when
        a stop string cut it). The token is appended to `tokens` unless it is an end token."""
        if token in self.eos:
            return "eos", None
        tokens.append(token)
        text = decode(tokens) if self.stop or self.decided is not None else ""
        if self.stop:
            cut = min((i for i in (text.find(s) for s in self.stop) if i >= 0), default=-1)
            if cut >= 0:
                return "stop_string", text[:cut]
        if self.exhausted(tokens):
            return "length", None
        if self.decided is not None and self.decided(text):
            return "decided", None
        return None, None


def blocked_mask(rows: Sequence[Sequence[int]], vocab: int, device: torch.device) -> torch.Tensor | None:
    """A (B, V) bool mask of the tokens each row cannot choose, or None when none is blocked."""
    if not any(rows):
        return None
    mask = torch.zeros(len(rows), vocab, dtype=torch.bool)
    for b, ids in enumerate(rows):
        if ids:
            mask[b, list(ids)] = True
    return mask.to(device, non_blocking=device.type == "cuda")


def pick(logits: torch.Tensor, blocked: Sequence[Sequence[int]] = ()) -> list[int]:
    """Greedy next tokens of a batch: logits (B, V), row b unable to choose `blocked[b]`.
    Masked and chosen on the device; the one host read of a decode step."""
    mask = blocked_mask(blocked, logits.shape[-1], logits.device) if blocked else None
    if mask is not None:
        logits = logits.masked_fill(mask, float("-inf"))
    return logits.argmax(dim=-1).tolist()


def to_device(ids: Sequence[int], device: torch.device) -> torch.Tensor:
    """Host token ids as a (N,) long tensor on `device`; on CUDA from pinned memory without
    waiting (a pageable copy would synchronise the stream every decode step)."""
    if device.type != "cuda":
        return torch.tensor(list(ids), dtype=torch.long, device=device)
    return torch.tensor(list(ids), dtype=torch.long, pin_memory=True).to(device, non_blocking=True)
