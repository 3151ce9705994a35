"""lm-eval's three request types, as every LM (checkpoints/lm.py) takes them: a generation
until a stop, a continuation's log-likelihood, a text's rolling log-likelihood. Frozen
and hashable; their checks run when they are made."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from checkpoints.thinking import SEPARATOR_TOKENS, ThinkPlan

# Most sequences an engine decodes together unless told otherwise: the one declaration the
# engine, `lctx eval --max-batch` and the service's LCTX_ENGINE_MAX_BATCH read (this module
# imports no torch).
DEFAULT_MAX_BATCH = 64
# Most tokens a decoding row drafts from its own text per step (`checkpoints.engine.prompt_lookup`)
# where prompt lookup is on by default: read by the engine and `lctx eval --draft-tokens`.
DEFAULT_DRAFT_TOKENS = 16


@dataclass(frozen=True)
class GenerateRequest:
    """Greedy continuation of `prompt_ids`. Stops at EOS (unless `stop_at_eos` is
    False), at any of `stop_ids` (end tokens besides EOS, left out of the output as EOS
    is: LongBench's samsum ends at the id of "\n"), at the first of `stop` in the decoded
    text (cut before it), or after `max_new_tokens`; until `min_new_tokens` tokens exist,
    EOS, `stop_ids` and `suppress_ids` cannot be chosen (transformers' `min_length`).
    `decided(text)`, when given, is the evaluator's word that the sample's score can no
    longer change whatever follows `text` (the decoded tokens so far): generation stops
    there (stop reason "decided"), the decoding steps after it would not move the score.
    A served model (clients/endpoint/engine.py) generates the whole budget regardless.
    `messages`, when given, is the conversation `prompt_ids` render in the model's chat
    template (MRCR's multi-turn prompts): a chat-style endpoint sends these messages for the
    server's template to render; lctx's engine reads the ids only.
    `think`, when given, is a reasoning model's plan (`checkpoints.thinking`): a think
    block the output opens (or the prompt opened) takes at most `think.budget` tokens and is
    not the answer; `max_new_tokens`, `min_new_tokens`, `stop` and `decided` apply to the
    answer after it. A block that runs out of budget is closed by `think.force_ids` and the
    answer generated after them (budget forcing)."""

    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    min_new_tokens: int = 0
    suppress_ids: tuple[int, ...] = ()
    stop_at_eos: bool = True
    stop_ids: tuple[int, ...] = ()
    decided: Callable[[str], bool] | None = field(default=None, compare=False)
    messages: tuple[dict[str, str], ...] | None = field(default=None, compare=False)
    think: ThinkPlan | None = None

    @property
    def most_new_tokens(self) -> int:
        """Most tokens the request can add to its sequence: the answer's budget, and with
        a think plan the block's, its forced close and the separator before the answer."""
        if self.think is None:
            return self.max_new_tokens
        return (self.think.budget + len(self.think.answer_ids(forced=True)) + SEPARATOR_TOKENS
                + self.max_new_tokens)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_ids", tuple(self.prompt_ids))
        object.__setattr__(self, "stop", tuple(s for s in self.stop if s))
        object.__setattr__(self, "suppress_ids", tuple(self.suppress_ids))
        object.__setattr__(self, "stop_ids", tuple(self.stop_ids))
        if not self.prompt_ids:
            raise ValueError("a generate request needs at least one prompt token (BOS)")
        if self.max_new_tokens < 0 or self.min_new_tokens < 0:
            raise ValueError("max_new_tokens and min_new_tokens must be >= 0")


@dataclass(frozen=True)
class LoglikelihoodRequest:
    context_ids: tuple[int, ...]
    continuation_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "context_ids", tuple(self.context_ids))
        object.__setattr__(self, "continuation_ids", tuple(self.continuation_ids))
        if self.continuation_ids and not self.context_ids:
            raise ValueError("a log-likelihood request needs at least one context token (BOS)")


@dataclass(frozen=True)
class RollingRequest:
    """Score every token of `ids` after the first: log p(ids[t] | ids[:t])."""

    ids: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(self.ids))
