"""The probe: what a server serves and can do, asked before any evaluation request. A model
its /v1/models does not list is asked with a one-token request (servers that load models on
demand), and a refusal quotes the server; then whether it takes token-id prompts, which
dialect scores prompts (`dialects.DIALECTS`, tried in order), /tokenize and /detokenize,
and the thinking switches a chat request accepts. `Capabilities` is recorded with every
result; `registered_context` says which context a registration records."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from checkpoints.errors import EndpointError, NotAServer
from checkpoints.tokenizer import Tokenizer
from clients.endpoint.client import (
    GET_LIMIT,
    Client,
    check_base_url,
    key_forms,
    read_bounded_sync,
    scrub,
    server_error,
)
from clients.endpoint.dialects import DIALECTS, SWITCH_FIELDS, detokenized, prompt_logprobs
from clients.endpoint.options import ApiStyle, EndpointSpec, key_headers
from clients.endpoint.tokenizer import context_of, load_endpoint_tokenizer

PROBE_TEXT = "The quick brown fox jumps over the lazy dog."


@dataclass
class Capabilities:
    """What the server said about itself at registration (recorded with every result)."""

    models: list[str]
    token_prompts: bool  # takes a prompt as a list of token ids (exact tokens; no re-tokenization)
    prompt_logprobs: bool  # returns a log-probability for each of our prompt tokens (by `prompt_scoring`)
    server_version: str | None = None
    server: str | None = None  # what the server calls itself (HTTP `server` header, /version's source)
    listed: bool = True  # the model is in /v1/models (False: the server answered a one-token request for it)
    prompt_scoring: str | None = None  # how prompts are scored: one of SCORING_METHODS, None: not at all
    tokenizer_endpoints: bool = False  # /tokenize and /detokenize at the server's root (vLLM, SGLang)
    max_model_len: int | None = None  # the context the server says it serves (/v1/models or /tokenize)
    # The thinking switches the server took in a chat request without an error (chat_template_kwargs'
    # enable_thinking, reasoning_effort): a server that does not know one may still ignore it.
    thinking_switches: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _NoTokenizer:
    """Decodes nothing: the probe's echo check where no local tokenizer is given."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return ""


def probe(spec: EndpointSpec, tokenizer: Tokenizer | None = None, need_tokenizer: bool = True) -> Capabilities:
    """Ask the server what it serves and supports (EndpointError saying what is wrong).
    `tokenizer`: the served model's, if given (else the server's /tokenize must answer,
    unless `need_tokenizer` is False: then token prompts and scoring are not asked)."""
    probe_spec = EndpointSpec(**{**asdict(spec), "max_retries": 0, "timeout_s": min(spec.timeout_s, 120.0)})
    if tokenizer is None and spec.tokenizer:
        tokenizer = load_endpoint_tokenizer(spec.tokenizer)
    return asyncio.run(_probe(probe_spec, tokenizer, need_tokenizer))


def listed_models(url: str, api_key_env: str | None = None) -> list[str]:
    """The model names a server lists (GET /models, bounded, the key masked in what comes back);
    EndpointError when it gives no model list. `url`: an API root already checked."""
    headers = key_headers(api_key_env)
    forms = key_forms(headers.get("Authorization", "")[7:])
    try:
        with httpx.Client(headers=headers, timeout=30) as http:
            listed = scrub(read_bounded_sync(http, "GET", url + "/models", None, GET_LIMIT, 30, forms), forms)
        return [str(m["id"]) for m in listed.json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
        raise EndpointError(f"{url}/models gave no model list ({type(e).__name__}); give --served-model NAME") from None


def probe_server(base_url: str, allowed_hosts: Sequence[str], served_model: str | None = None,
                 tokenizer: str | None = None, api_style: ApiStyle = "completions",
                 api_key_env: str | None = None) -> tuple[EndpointSpec, Capabilities]:
    """What a server can do, for `lctx endpoints probe`: the model asked about is
    `served_model`, else the first the server lists."""
    url = check_base_url(base_url, allowed_hosts)
    if not served_model:
        names = listed_models(url, api_key_env)
        if not names:
            raise EndpointError(f"{url}/models lists no model; give --served-model NAME")
        served_model = names[0]
    spec = EndpointSpec(url, served_model, tokenizer, None, api_style, api_key_env=api_key_env)
    return spec, probe(spec, need_tokenizer=False)


def unanswered(spec: EndpointSpec, timeout_s: float = 5.0) -> str | None:
    """Why the server does not answer as an OpenAI-compatible one now (None: it does):
    GET /v1/models, once, within `timeout_s`. A judge's check at submission: a job whose
    judge is down is refused rather than failed at its first answer."""
    try:
        headers = key_headers(spec.api_key_env)
        with httpx.Client(headers=headers, timeout=timeout_s) as http:
            response = read_bounded_sync(http, "GET", spec.base_url + "/models", None, GET_LIMIT, timeout_s)
        listed = response.json() if response.status_code == 200 else None
    except EndpointError as e:
        return str(e)
    except (httpx.HTTPError, ValueError) as e:
        return f"no answer ({type(e).__name__})"
    if not isinstance(listed, dict) or not isinstance(listed.get("data"), list):
        return f"GET /v1/models answered HTTP {response.status_code} without a model list"
    return None


def registered_context(given: int | None, tokenizer_dir: str | Path | None,
                       capabilities: Capabilities) -> tuple[int | None, str]:
    """The context a registration records, and where it came from: the one given, else the
    tokenizer folder's config.json, else what the server says (max_model_len). The API's
    registration and `lctx endpoints probe` both read it, so the probe says what `add` will use."""
    if given:
        return given, "given"
    if tokenizer_dir:
        return context_of(tokenizer_dir), "the tokenizer folder's config.json"
    if capabilities.max_model_len:
        return capabilities.max_model_len, "the server's max_model_len"
    return None, "not said"


async def _probe(spec: EndpointSpec, tokenizer: Tokenizer | None, need_tokenizer: bool = True) -> Capabilities:
    async with Client(spec) as client:
        try:
            response = await client.get("/models")
        except (httpx.ConnectError, httpx.TimeoutException) as e:
            raise NotAServer(f"{spec.base_url}/models did not answer ({type(e).__name__}: {e}); "
                                "is the server running and is the URL its API root (ending in /v1)?") from e
        except (httpx.HTTPError, httpx.InvalidURL) as e:  # h11 quotes the bytes it could not parse: not shown
            raise NotAServer(f"{spec.base_url}/models: not an OpenAI-compatible server there "
                                f"({type(e).__name__}); give the server's API root (ending in /v1)") from None
        if response.status_code >= 500:
            # A server that failed (the service answers it as any non-server and logs this; run locally,
            # `lctx endpoints probe` shows it): its own error, and the cause met most often.
            raise NotAServer(f"{spec.base_url}/models answered HTTP {response.status_code}, a server error: "
                             f"{server_error(response)}; the server failed, it is not refusing lctx (transformers "
                             "serve answers 500 here when its hub cache folder does not exist: create it, e.g. "
                             "mkdir -p ~/.cache/huggingface/hub, or the folder HF_HUB_CACHE names)")
        if response.status_code != 200:
            # Not quoted: whatever listens on an allowed host's port would have its first bytes shown.
            raise NotAServer(f"{spec.base_url}/models answered HTTP {response.status_code}: not an "
                                "OpenAI-compatible server there; give the server's API root (ending in /v1) and its "
                                "key variable if it needs one")
        try:
            cards = [m for m in response.json()["data"] if isinstance(m, dict)]
            models = [str(m["id"]) for m in cards]
        except (ValueError, KeyError, TypeError):
            raise NotAServer(f"{spec.base_url}/models did not answer with an OpenAI model list: not an "
                                "OpenAI-compatible server there") from None
        listed = spec.served_model in models
        if not listed:
            # Servers that load models on demand (transformers serve, Ollama, proxies) list only
            # some: the server is asked, and its own answer is the refusal.
            try:
                await _one_token(client, spec)
            except EndpointError as e:
                raise EndpointError(f"the server at {spec.base_url} does not serve {spec.served_model!r}: it lists "
                                    f"{', '.join(models) or 'no model'}, and a one-token request for it was "
                                    f"answered: {e}") from None
        card = next((m for m in cards if str(m["id"]) == spec.served_model), {})
        max_len = card.get("max_model_len") if isinstance(card.get("max_model_len"), int) else None
        server = response.headers.get("server")
        version = None
        for path, key in (("/version", "version"), ("/get_server_info", "version")):
            try:
                answer = await client.get(path, root=True)
                if answer.status_code == 200 and isinstance(answer.json(), dict) and answer.json().get(key):
                    version = str(answer.json()[key])
                    server = {"/version": "vllm", "/get_server_info": "sglang"}[path]
                    break
            except (httpx.HTTPError, ValueError, EndpointError):  # EndpointError: an answer past GET_LIMIT
                continue
        server_ids, tokenize_len = await _server_tokens(client, spec)
        max_len = max_len or tokenize_len
        if tokenizer is None and server_ids is None and need_tokenizer:
            raise EndpointError(f"no tokenizer for {spec.served_model!r}: none was given (--tokenizer / tokenizer) and "
                                f"the server at {spec.base_url} has no /tokenize and /detokenize (vLLM and SGLang do); "
                                "give a folder with the served model's tokenizer.json")
        ids = tokenizer.encode(PROBE_TEXT) if tokenizer is not None else list(server_ids or ())
        token_prompts, scoring = False, None
        if spec.api_style == "completions" and ids:  # no ids: no tokenizer to ask with (`lctx endpoints probe`)
            try:
                await client.post("/completions", {"model": spec.served_model, "prompt": ids, "max_tokens": 1,
                                                   "temperature": 0})
                token_prompts = True
            except EndpointError:
                token_prompts = False
            for row in DIALECTS:
                if row.token_prompts and not token_prompts:
                    continue  # vLLM's extension and echo score our ids only where the server takes ids
                try:
                    await prompt_logprobs(client, row.name, spec.served_model, ids, tokenizer or _NoTokenizer())
                    scoring = row.name
                    break
                except (EndpointError, KeyError, IndexError, TypeError):
                    continue
        return Capabilities(models=models, token_prompts=token_prompts, prompt_logprobs=scoring is not None,
                            server_version=version, server=server, listed=listed, prompt_scoring=scoring,
                            tokenizer_endpoints=server_ids is not None, max_model_len=max_len,
                            thinking_switches=await _thinking_switches(client, spec))


async def _one_token(client: Client, spec: EndpointSpec) -> dict[str, Any]:
    """A one-token request for the served model in the registered style: the model check of
    a name the server does not list (servers that load models on demand answer it)."""
    body: dict[str, Any] = {"model": spec.served_model, "max_tokens": 1, "temperature": 0}
    if spec.api_style == "chat":
        return await client.post("/chat/completions", {**body, "messages": [{"role": "user", "content": PROBE_TEXT}]})
    return await client.post("/completions", {**body, "prompt": PROBE_TEXT})


async def _server_tokens(client: Client, spec: EndpointSpec) -> tuple[list[int] | None, int | None]:
    """PROBE_TEXT's ids from the server's /tokenize, if it has /tokenize and /detokenize
    (vLLM, SGLang), and the max_model_len it reports; (None, None) otherwise."""
    try:
        answer = await client.post("/tokenize", {"model": spec.served_model, "prompt": PROBE_TEXT,
                                                 "add_special_tokens": False}, root=True)
        ids = answer.get("tokens")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
            return None, None
        back = await client.post("/detokenize", {"model": spec.served_model, "tokens": ids}, root=True)
        if detokenized(back) is None:
            return None, None
        length = answer.get("max_model_len")
        return ids, length if isinstance(length, int) and length > 0 else None
    except (EndpointError, AttributeError):
        return None, None


async def _thinking_switches(client: Client, spec: EndpointSpec) -> list[str]:
    """Which thinking switches the server accepts in a chat request (one token each); a
    completions-style endpoint takes the switch in the prompt lctx renders, not here."""
    if spec.api_style != "chat":
        return []
    body = {"model": spec.served_model, "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": PROBE_TEXT}]}
    accepted = []
    for name, fields in SWITCH_FIELDS.items():
        try:
            await client.post("/chat/completions", {**body, **fields})
            accepted.append(name)
        except EndpointError:
            continue
    return accepted
