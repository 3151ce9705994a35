"""The two interfaces evaluators program against, met by lctx's own runtime and by a
served model alike (lm-eval's `LM`, vLLM's engine client), so no evaluator asks which one
it holds:

- `LM`: the three request types (generate until, log-likelihood, rolling log-likelihood),
  results in request order, `done(i, result)` as each request ends; `on_prefill` hears of
  prompt tokens as they are prefilled; `stats` counts prefix-cache reuse (`PrefixUse`) and
  `clock` the seconds spent prefilling and decoding (`StepClock`), `max_batch` the rows
  decoded together (each None where the work happens elsewhere, on a server). Met by
  `engine.Engine` and `endpoint.EndpointEngine`.
- `ModelSource`: what the evaluators read of the model behind an LM: its tokenizer, its
  config (the context: `ContextConfig`), whether it runs elsewhere (`served`: its server's
  reasoning field may carry a think block) and is reached through a chat API (`chat_api`:
  its server applies its own chat template to the messages it is sent), how results
  describe it. Met by `loading.LoadedModel` and `endpoint.ServedModel`.
- `OpenedModel`: a model opened to run requests, its `ModelSource` and its `LM`: met by
  `checkpoints.opening.Opened` (`open_model`) and `clients.endpoint.engine.Served`
  (`open_served`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

if TYPE_CHECKING:
    from checkpoints.generate import Generation
    from checkpoints.requests import GenerateRequest, LoglikelihoodRequest, RollingRequest
    from checkpoints.tokenizer import Tokenizer

Done = Callable[[int, Any], None]  # (index, result) of each request the moment it finishes
Prefilled = Callable[[int], None]  # tokens just prefilled (each chunk) or served by the prefix cache: progress


class Counter(Protocol):
    """Counts an engine keeps over all its calls; a run reads them before and after itself."""

    def since(self, before: Self) -> Self: ...

    def as_dict(self) -> dict[str, float | int]: ...


class PrefixUse(Counter, Protocol):
    """Prompt tokens asked for and those the prefix cache served (`engine.prefix_cache.PrefixStats`)."""

    prompt_tokens: int
    reused_tokens: int


class StepClock(Counter, Protocol):
    """Seconds prefilling and decoding, drafted and kept tokens (`engine.core.EngineClock`)."""

    prefill_s: float
    decode_s: float


class ContextConfig(Protocol):
    """What evaluators read of a model's config: its context (`config.ModelConfig`,
    `endpoint.engine.ServedConfig`)."""

    @property
    def max_position_embeddings(self) -> int: ...

    @property
    def effective_context(self) -> int: ...

    @property
    def rope_scaling(self) -> Any: ...  # None: not scaled, or not known (a served model)

    @property
    def rope_l0(self) -> int: ...


@runtime_checkable
class LM(Protocol):
    stats: PrefixUse | None
    clock: StepClock | None
    max_batch: int | None  # rows decoded together (settable between calls); None: a server batches
    on_prefill: Prefilled | None

    def generate_until(self, requests: Sequence[GenerateRequest], done: Done | None = None) -> list[Generation]: ...

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest],
                      done: Done | None = None) -> list[tuple[float, bool]]: ...

    def loglikelihood_rolling(self, requests: Sequence[RollingRequest],
                              done: Done | None = None) -> list[Any]: ...  # per-token log-probabilities of each text


@runtime_checkable
class ModelSource(Protocol):
    tokenizer: Tokenizer
    config: ContextConfig
    served: bool  # runs on a server (an endpoint), not on lctx's engine
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
