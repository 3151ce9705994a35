"""The two interfaces evaluators program against, met by lctx's own runtime and by a
served model alike (lm-eval's `LM`, vLLM's engine client), so no evaluator asks which one
it holds:

- `LM`: the three request types (generate until, log-likelihood, rolling log-likelihood),
  results in request order, `done(i, result)` as each request ends; `on_prefill` hears of
  prompt tokens as they are prefilled; `stats` counts prefix-cache reuse and `clock` the
  seconds spent prefilling and decoding (None where the work happens elsewhere). Met by `engine.Engine` and `endpoint.EndpointEngine`.
- `ModelSource`: what the evaluators read of the model behind an LM: its tokenizer, its
  config (the context), whether it is reached through a chat API (`chat_api`: its server
  applies its own chat template to the messages it is sent), how results describe it. Met by `loading.LoadedModel` and
  `endpoint.ServedModel`.
- `OpenedModel`: a model opened to run requests, its `ModelSource` and its `LM`: met by
  `checkpoints.opening.Opened` (`open_model`) and `clients.endpoint.engine.Served`
  (`open_served`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

Done = Callable[[int, Any], None]  # (index, result) of each request the moment it finishes
Prefilled = Callable[[int], None]  # tokens just prefilled (each chunk) or served by the prefix cache: progress


@runtime_checkable
class LM(Protocol):
    stats: Any  # PrefixStats, or None
    clock: Any  # engine.EngineClock, or None
    on_prefill: Prefilled | None

    def generate_until(self, requests: Sequence[Any], done: Done | None = None) -> list[Any]: ...

    def loglikelihood(self, requests: Sequence[Any], done: Done | None = None) -> list[tuple[float, bool]]: ...

    def loglikelihood_rolling(self, requests: Sequence[Any], done: Done | None = None) -> list[Any]: ...


@runtime_checkable
class ModelSource(Protocol):
    tokenizer: Any
    config: Any  # max_position_embeddings, effective_context, rope_scaling (None: not known), rope_l0
    chat_api: bool  # a chat-style server: sent messages, it renders its own template (and thinking switch)

    def describe(self) -> dict[str, Any]: ...

    def describe_run(self) -> dict[str, Any]: ...


class OpenedModel(Protocol):
    @property
    def source(self) -> ModelSource: ...

    @property
    def engine(self) -> LM: ...

    @property
    def behaviour(self) -> str: ...  # what its answers depend on beyond its identity ("" for weights)

    @property
    def notes(self) -> dict[str, Any]: ...  # what results add to its description (token counts estimated)
