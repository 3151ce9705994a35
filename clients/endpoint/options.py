"""A served model's request settings, declared once: the fields, their bounds, defaults and
help that the API's registration (`service.schemas.EndpointCreate` extends this model),
`EndpointSpec` (a registration as the client holds it, validated through it) and both CLIs
(`lctx endpoints add`, `lctx eval --endpoint`: `cli/endpoint_flags.py` makes their flags
from it) read. Pydantic only: the CLI's parser and the API schema import it without the
HTTP client."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from checkpoints.errors import EndpointError
from clients.endpoint.keys import key_variable_refusal

ApiStyle = Literal["completions", "chat"]
API_STYLES: tuple[str, ...] = ("completions", "chat")
NO_NUL_PATTERN = r"^[^\x00]*$"  # PostgreSQL refuses NUL characters in text: refused where they arrive

DEFAULT_API_STYLE: ApiStyle = "completions"
DEFAULT_CONCURRENCY = 8
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_RETRIES = 5


class EndpointOptions(BaseModel):
    """How lctx talks to a served model, beside where it is (the API root)."""

    model_config = ConfigDict(extra="forbid")  # a misspelt field is refused, never ignored

    served_model: Annotated[str, Field(min_length=1, max_length=512, pattern=NO_NUL_PATTERN,
                                       description="the model's name as the server lists it at /v1/models (or "
                                                   "as it answers to it: `transformers serve /path` answers to "
                                                   "the path)")]
    tokenizer: Annotated[str | None, Field(min_length=1, max_length=4096, pattern=NO_NUL_PATTERN,
                                           description="folder with the served model's tokenizer.json: prompts "
                                                       "are counted and truncated with it (default: the server's "
                                                       "/tokenize and /detokenize, where it has them: vLLM, "
                                                       "SGLang)")] = None
    context_length: Annotated[int | None, Field(ge=16, le=16_777_216, description="the served context in tokens "
                                                "(default: max_position_embeddings of the tokenizer folder's "
                                                "config.json, else the server's max_model_len)")] = None
    api_style: Annotated[ApiStyle, Field(description="completions: the prompt as text or token ids; chat: the "
                                                     "messages, the server applies its chat template")] = \
        DEFAULT_API_STYLE
    concurrency: Annotated[int, Field(ge=1, le=1024, description="requests in flight")] = DEFAULT_CONCURRENCY
    timeout_s: Annotated[float, Field(gt=0, le=86_400, description="seconds per request")] = DEFAULT_TIMEOUT_S
    max_retries: Annotated[int, Field(ge=0, le=100, description="retries of a request (timeouts, 429, 5xx, "
                                                                 "dropped connections) with exponential "
                                                                 "backoff")] = DEFAULT_RETRIES
    api_key_env: Annotated[str | None, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", description="NAME of the "
                                             "environment variable (of the process sending the requests) "
                                             "holding the API key: one starting with "
                                             "LCTX_ENDPOINT_KEY_PREFIX or listed in LCTX_ENDPOINT_KEY_NAMES, "
                                             "never a setting of the service; the key itself is never stored "
                                             "or shown by lctx")] = None


@dataclass(frozen=True)
class EndpointSpec:
    """What a registration says about a served model."""

    base_url: str  # ".../v1"
    served_model: str
    tokenizer: str | None  # a local folder with tokenizer.json (the served checkpoint's); None: the server's
    context_length: int | None  # None: the server's (max_model_len of /v1/models or /tokenize)
    api_style: ApiStyle = DEFAULT_API_STYLE
    concurrency: int = DEFAULT_CONCURRENCY
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_retries: int = DEFAULT_RETRIES
    backoff_s: float = 1.0
    api_key_env: str | None = None  # the NAME of the variable holding the key, never the key

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        fields = {k: getattr(self, k) for k in EndpointOptions.model_fields}
        try:
            EndpointOptions.model_validate(fields)  # the bounds, declared once
        except ValidationError as e:
            raise EndpointError("; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}"
                                          for err in e.errors())) from None
        if self.backoff_s < 0:
            raise EndpointError(f"backoff_s must be >= 0, got {self.backoff_s}")
        if (why := key_variable_refusal(self.api_key_env)) is not None:
            raise EndpointError(why)

    def headers(self) -> dict[str, str]:
        return key_headers(self.api_key_env)


def key_headers(api_key_env: str | None) -> dict[str, str]:
    """The bearer header of the key in the variable named `api_key_env` (none without one); never
    a variable `clients.endpoint.keys` reserves."""
    if not api_key_env:
        return {}
    if (why := key_variable_refusal(api_key_env)) is not None:  # checked where the key is read, whoever asks
        raise EndpointError(why)
    key = os.environ.get(api_key_env)
    if not key:
        raise EndpointError(f"the environment variable {api_key_env} (named as this endpoint's API key) "
                            "is not set in the process that sends the requests")
    return {"Authorization": f"Bearer {key}"}
