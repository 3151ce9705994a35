"""Greedy choice and the stop rule: the one rule the engine's decoding batch and the
one-sequence oracle (`generate.greedy_generate`) both follow, so they stop for the same
reason at the same token (vLLM's `check_stop`, gpt-fast's `sample`).

The choice is made on the device for the whole batch and read back once per step
(`pick`): a read per row, or a comparison per layer, would make the host wait for the
device every time (issue #41: 27 synchronisations per decode step of a 12-layer model)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from checkpoints.thinking import SEPARATOR_TOKENS, ThinkPlan

if TYPE_CHECKING:
    from checkpoints.requests import GenerateRequest
    from checkpoints.tokenizer import TextStream

Decode = Callable[[list[int]], str]
Streams = Callable[[], "TextStream"]  # a tokenizer's `decode_stream`: a fresh incremental decoder
# Tokens decoded to find the end of a think block as it is written: more than any delimiter takes.
_CLOSE_WINDOW = 24


@dataclass
class ThinkState:
    """Where a row is in its output when its model may think: `opened` once its block is
    open (or the prompt opened it), `start` the index of its answer's first token once
    thinking ended (None while thinking, or before it is known whether it thinks)."""

    opened: bool = False
    start: int | None = None
    separator: int = 0  # whitespace tokens after the block, not counted as answer


@dataclass
class AnswerText:
    """A row's answer text kept as its tokens arrive (`TextStream`): a stop string or an
    evaluator's `decided` is checked on each step's new text, not on the whole output
    decoded again (which costs its length squared over a generation). `start`: the answer's
    first token index the text began at; `fed`: the tokens read so far."""

    start: int
    stream: TextStream
    text: str = ""
    fed: int = 0
    pending: bool = False  # the last token gave no text yet (a character split across tokens)

    def read(self, tokens: Sequence[int]) -> str:
        for token in tokens[self.start + self.fed:]:
            piece = self.stream.step(token)
            self.text += piece or ""
            self.pending = piece is None
            self.fed += 1
        return self.text


@dataclass(frozen=True)
class StopRule:
    """When a greedy sequence ends. `eos`: end tokens (EOS unless turned off, plus the
    request's stop ids), left out of the output; `blocked`: what cannot be chosen before
    `min_new_tokens` exist (the end tokens and suppressed ones: transformers' `min_length`);
    `stop`: strings cutting the text before them; `decided(text)`: the evaluator's word
    that the score can no longer change.

    With `think` (a reasoning model's plan) the output is a think block, then the answer:
    inside the block only EOS and the thinking budget end it (reason "thinking_budget":
    the caller closes the block and generates the answer; "thought": the block closed and
    the answer follows the plan's prefix, which the caller appends); every other rule applies to the
    answer's tokens and text alone. The rule of one row keeps that row's `state`."""

    eos: frozenset[int]
    max_new_tokens: int
    min_new_tokens: int = 0
    blocked: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    decided: Callable[[str], bool] | None = None
    think: ThinkPlan | None = None
    state: ThinkState = field(default_factory=ThinkState, compare=False)
    streams: Streams | None = field(default=None, compare=False)  # None: the whole answer decoded each step
    answer: list[AnswerText] = field(default_factory=list, compare=False)  # the row's AnswerText, once made

    @classmethod
    def make(cls, eos_ids: Sequence[int], max_new_tokens: int, *, stop: Sequence[str] = (), stop_at_eos: bool = True,
             min_new_tokens: int = 0, suppress_ids: Sequence[int] = (), stop_ids: Sequence[int] = (),
             decided: Callable[[str], bool] | None = None, think: ThinkPlan | None = None,
             streams: Streams | None = None) -> StopRule:
        eos = (frozenset(eos_ids) if stop_at_eos else frozenset()) | frozenset(stop_ids)
        return cls(eos=eos, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                   blocked=tuple(sorted(eos | set(suppress_ids))), stop=tuple(s for s in stop if s), decided=decided,
                   think=think, state=ThinkState(opened=think is not None and think.inside), streams=streams)

    @classmethod
    def of(cls, request: GenerateRequest, eos_ids: Sequence[int], streams: Streams | None = None) -> StopRule:
        """The rule of one request (a fresh state: one per row); `streams`, the tokenizer's
        `decode_stream` where it has one."""
        return cls.make(eos_ids, request.max_new_tokens, stop=request.stop, stop_at_eos=request.stop_at_eos,
                        min_new_tokens=request.min_new_tokens, suppress_ids=request.suppress_ids,
                        stop_ids=request.stop_ids, decided=request.decided, think=request.think, streams=streams)

    @property
    def answer_start(self) -> int:
        """Index of the answer's first token (0 without thinking; only read once known)."""
        return 0 if self.think is None else (self.state.start or 0)

    def thinking(self) -> bool:
        """Whether the next token is still part of the think block (or may be)."""
        return self.think is not None and self.state.start is None

    def blocked_at(self, generated: int) -> tuple[int, ...]:
        """Tokens that cannot be chosen after `generated` new tokens (the answer's minimum
        counts answer tokens: nothing is blocked while thinking)."""
        if self.thinking():
            return ()
        return self.blocked if generated - self.answer_start < self.min_new_tokens else ()

    def exhausted(self, tokens: Sequence[int]) -> bool:
        if self.thinking():
            return len(tokens) >= self.think.budget  # type: ignore[union-attr]
        return len(tokens) - self.answer_start >= self.max_new_tokens

    def room(self, tokens: Sequence[int]) -> int:
        """Tokens the row may still emit before a budget ends it (the thinking budget while
        it thinks)."""
        if self.thinking():
            return self.think.budget - len(tokens)  # type: ignore[union-attr]
        return self.answer_start + self.max_new_tokens - len(tokens)

    def answer_text(self, tokens: Sequence[int], decode: Decode) -> str:
        """The answer's text of an output (all of it without thinking)."""
        text = decode(list(tokens[self.answer_start:]))
        return text if self.think is None else text.lstrip()

    def after(self, tokens: list[int], token: int, decode: Decode) -> tuple[str | None, str | None]:
        """`token` was chosen after `tokens`: (the stop reason or None, the output text when
        a stop string cut it). The token is appended to `tokens` unless it is an end token."""
        if self.thinking():
            return self._thinking_after(tokens, token, decode)
        if token in self.eos:
            return "eos", None
        tokens.append(token)
        if self.think is not None and self.state.separator < SEPARATOR_TOKENS \
                and not decode(tokens[self.answer_start:]).strip():
            self.state.start = len(tokens)  # "</think>\n\n": the answer starts after the blank
            self.state.separator += 1
            return None, None
        checked, text = self._new_text(tokens, decode) if self.stop or self.decided is not None else (0, "")
        if self.stop:
            # earlier steps found none: a stop string can only end in this step's new text
            cut = min((i for i in (text.find(s, max(0, checked - len(s) + 1)) for s in self.stop) if i >= 0),
                      default=-1)
            if cut >= 0:
                return "stop_string", text[:cut]
        if self.exhausted(tokens):
            return "length", None
        if self.decided is not None and self.decided(text):
            return "decided", None
        return None, None

    def _new_text(self, tokens: list[int], decode: Decode) -> tuple[int, str]:
        """(the length of the answer's text known complete at the last step, its text now):
        read incrementally where the tokenizer streams, else (and while a character is split
        across tokens, or a token adds no text) decoded whole, so every check sees exactly
        the text a whole decode gives."""
        if self.streams is None:
            return 0, self.answer_text(tokens, decode)
        if not self.answer or self.answer[0].start != self.answer_start:  # the answer (re)starts here
            self.answer[:] = [AnswerText(self.answer_start, self.streams())]
        answer = self.answer[0]
        before = answer.text if self.think is None else answer.text.lstrip()
        now = answer.read(tokens)
        if answer.pending:  # the whole decode shows the split character as U+FFFD: check what it shows
            return len(before), self.answer_text(tokens, decode)
        return len(before), now if self.think is None else now.lstrip()

    def _thinking_after(self, tokens: list[int], token: int, decode: Decode) -> tuple[str | None, str | None]:
        plan, state = self.think, self.state
        assert plan is not None
        if token in self.eos:
            return "eos", None  # ended inside its block: no answer
        tokens.append(token)
        opening = plan.format.open
        if not state.opened:
            head = decode(tokens, skip_special_tokens=False).lstrip()  # type: ignore[call-arg]
            if head.startswith(opening):
                state.opened = True
            elif not opening.startswith(head):  # it answers without thinking: the whole output is the answer
                state.start = 0
                tokens.pop()
                return self.after(tokens, token, decode)
        if state.opened:
            # The close can only have been completed by this token: the last few tokens hold it
            # (decoding the whole block at every step would cost its length squared).
            tail = decode(tokens[-_CLOSE_WINDOW:], skip_special_tokens=False)  # type: ignore[call-arg]
            if plan.format.close in tail and (plan.inside or opening not in tail
                                              or tail.rfind(plan.format.close) > tail.rfind(opening)):
                state.start = len(tokens)
                if plan.prefix_ids:  # the answer comes after the task's prefix: the caller appends it
                    return "thought", None
                return ("length", None) if self.max_new_tokens == 0 else (None, None)
        if len(tokens) >= plan.budget:
            return "thinking_budget", None
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
