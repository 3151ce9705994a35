"""The engine's settings, declared once (as `clients/endpoint/options.py` declares a served
model's): the fields, their bounds, defaults and help that the service's settings
(`LCTX_ENGINE_*`, `service.core.settings.Settings` reads `engine_field`), a worker's config
(`service.runner.spec.WorkerConfig.engine`) and `lctx eval`'s flags (`cli/evaluate.py`)
read, and the one way they become an `Engine` (`EngineOptions.engine`). Pydantic only, and
beside the engine package rather than in it (whose `__init__` imports torch): the CLI's
parser and the service's settings import it without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from checkpoints.requests import DEFAULT_DRAFT_TOKENS, DEFAULT_MAX_BATCH

if TYPE_CHECKING:
    from checkpoints.engine.core import Engine
    from checkpoints.loading import LoadedModel


class EngineOptions(BaseModel):
    """How lctx's engine runs a model's requests (speed and memory only: outputs are the same)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_mb: Annotated[int | None, Field(ge=1, description="KV-cache budget of the decoding batch and the prefix "
                                           "cache in MiB: rows are admitted while each row's reserve (its prompt, "
                                           "max new tokens and a verifying step's overrun, in whole blocks) fits "
                                           "beside the cache; default a quarter of free GPU memory, 2048 on "
                                           "CPU")] = None
    max_batch: Annotated[int, Field(ge=1, le=4096, description="most sequences decoded together")] = DEFAULT_MAX_BATCH
    prefix_cache: Annotated[bool, Field(description="reuse the cached keys and values of prompt prefixes that "
                                        "samples share (a haystack up to its needle); at most half the memory "
                                        "budget, giving way to the decoding batch down to the last prompt's "
                                        "entries; off by itself where the RoPE table follows the length (dynamic "
                                        "NTK, LongRoPE)")] = True
    draft_tokens: Annotated[int | None, Field(ge=0, le=64, description="most tokens a decoding row drafts from its "
                                              "own text and verifies in one step (prompt lookup: the same outputs "
                                              f"in fewer steps); 0 turns it off; default {DEFAULT_DRAFT_TOKENS} on "
                                              "the PyTorch backend, 0 on Triton until measured on a GPU")] = None

    def engine(self, loaded: LoadedModel) -> Engine:
        """The engine that runs `loaded`'s requests with these settings."""
        from checkpoints.engine.core import Engine

        return Engine(loaded.model, loaded.tokenizer, max_batch=self.max_batch, prefix_cache=self.prefix_cache,
                      memory_budget=self.memory_mb << 20 if self.memory_mb is not None else None,
                      draft_tokens=self.draft_tokens)


def engine_field(name: str) -> Any:
    """A copy of `EngineOptions`' field `name` (bounds, default, help) to declare a setting by
    another name (the service's `engine_<name>`)."""
    info: FieldInfo = EngineOptions.model_fields[name]
    return FieldInfo.merge_field_infos(info)
