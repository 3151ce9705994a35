"""The engine's model interface over an OpenAI-compatible server (vLLM, SGLang,
llama.cpp's server, `transformers serve`): the same three request types and the same
results as `checkpoints.engine.Engine`, so every evaluator runs unchanged on a model
that runs elsewhere (docs/protocols/endpoints.md).

- The probe (`probe`) asks the server what it serves and can do: a model its /v1/models
  does not list is asked with a one-token request (servers that load models on demand),
  and a refusal quotes the server; token-id prompts; how it scores prompts; /tokenize.
- Prompts arrive as token ids counted with the served model's tokenizer (a local folder,
  or the server's /tokenize: `ServerTokenizer`); a prompt plus its new tokens longer than
  the registered context is refused before anything is sent (tasks with a truncation rule
  have already applied it against that context).
- Token ids go to the server as ids where it takes them (vLLM, SGLang) and as the text
  they decode to otherwise; log-likelihoods are asked only of servers that return the
  log-probabilities of our prompt tokens (vLLM's `prompt_logprobs`, SGLang's /generate
  with `return_logprob`, or `echo` + `logprobs`), never guessed from generated tokens.
- Greedy decoding: temperature 0, stop strings and `max_tokens` per request.
- Many requests in flight (asyncio + httpx, bounded by `concurrency`) so the server's
  own batching does the work; requests sorted by prompt ids, so those that share a
  haystack prefix go out together while the server's prefix cache holds it.
- A timeout, a 429 / 5xx or a dropped connection is retried with exponential backoff;
  a server that stays down raises `EndpointUnavailable` naming the URL and the last error.
  `done(i, result)` runs the moment each request is answered, so the caller records every
  finished sample before a failure propagates.

The API key is read from the environment variable the registration names, at the
moment a request is made; it is never stored, logged or put in an error message, and is
masked in everything the server answers (`Client.scrubbed`)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from checkpoints.errors import EndpointError, EndpointUnavailable, NotAServer
from checkpoints.lm import Done
from checkpoints.tokenizer import Tokenizer, load_tokenizer
from clients.endpoint.options import (  # noqa: F401 - API_STYLES re-exported
    API_STYLES,
    DEFAULT_API_STYLE,
    DEFAULT_CONCURRENCY,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    ApiStyle,
    EndpointOptions,
)

if TYPE_CHECKING:  # the engine's types (torch): imported where requests run, so `lctx endpoints probe` stays light
    from checkpoints.engine import GenerateRequest, LoglikelihoodRequest, RollingRequest
    from checkpoints.generate import Generation

log = logging.getLogger("lctx.endpoint")

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")
PROBE_TEXT = "The quick brown fox jumps over the lazy dog."
KEY_MASK = "***"
MIN_KEY = 8
# How prompt log-probabilities are asked for, in the order the probe tries them: vLLM's
# `prompt_logprobs` extension of /v1/completions, SGLang's native /generate with
# `return_logprob` from `logprob_start_len` 0, and the OpenAI `echo` + `logprobs`.
SCORING_METHODS: tuple[str, ...] = ("vllm", "sglang", "echo")


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

    def headers(self) -> dict[str, str]:
        return key_headers(self.api_key_env)


def key_headers(api_key_env: str | None) -> dict[str, str]:
    """The bearer header of the key in the variable named `api_key_env` (none without one)."""
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise EndpointError(f"the environment variable {api_key_env} (named as this endpoint's API key) "
                            "is not set in the process that sends the requests")
    return {"Authorization": f"Bearer {key}"}


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


def check_base_url(url: str, allowed_hosts: Sequence[str]) -> str:
    """The URL normalised (no trailing slash), or EndpointError: http/https only, no
    credentials in it, the host in `allowed_hosts` ("*" allows any; the default is
    loopback only, so a registration cannot make the service call arbitrary hosts)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise EndpointError(f"endpoint URL {url!r}: the scheme must be http or https, e.g. http://127.0.0.1:8001/v1")
    if parts.username or parts.password:
        raise EndpointError("endpoint URL: put no credentials in the URL; name an environment variable "
                            "holding the API key instead (api_key_env)")
    host = (parts.hostname or "").lower()
    if not host:
        raise EndpointError(f"endpoint URL {url!r} has no host")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise EndpointError(f"endpoint URL {url!r}: the port must be 1..65535 (or left out)")
    if parts.query or parts.fragment:
        raise EndpointError(f"endpoint URL {url!r}: give the API root only (e.g. http://127.0.0.1:8001/v1)")
    allowed = {h.lower() for h in allowed_hosts}
    if "*" not in allowed and host not in allowed:
        try:
            loop_ok = ipaddress.ip_address(host).is_loopback and "loopback" in allowed
        except ValueError:
            loop_ok = False
        if not loop_ok:
            raise EndpointError(f"endpoint host {host!r} is not allowed: allowed are {', '.join(sorted(allowed))} "
                                "(set LCTX_ENDPOINT_HOSTS to a comma-separated list to allow more)")
    return url.strip().rstrip("/")


# --- the HTTP client ---------------------------------------------------------------------


def key_forms(key: str) -> list[str]:
    """The key and its JSON-escaped form, as a server would echo it back, longest first
    (MIN_KEY: a shorter "key" such as vLLM's customary EMPTY is no secret and would mask
    ordinary words)."""
    return sorted({key, json.dumps(key)[1:-1]}, key=len, reverse=True) if len(key) >= MIN_KEY else []


def scrub(response: httpx.Response, forms: Sequence[str]) -> httpx.Response:
    """`response` with every form of the key masked in its body and headers."""
    if not forms:
        return response
    content, headers = response.content, []
    for form in forms:
        content = content.replace(form.encode(), KEY_MASK.encode())
    for name, value in response.headers.multi_items():
        if name.lower() in ("content-length", "content-encoding", "transfer-encoding"):
            continue  # the body above is decoded and may have changed length
        for form in forms:
            value = value.replace(form, KEY_MASK)
        headers.append((name, value))
    return httpx.Response(response.status_code, headers=headers, content=content, request=response.request)


def backoff(spec: EndpointSpec, attempt: int, retry_after: str | None) -> float:
    """Exponential backoff with jitter; a 429's or 503's Retry-After (seconds) wins when longer."""
    wait = spec.backoff_s * 2 ** (attempt - 1) * (0.75 + 0.5 * random.random())
    try:
        wait = max(wait, float(retry_after)) if retry_after else wait
    except ValueError:
        pass  # an HTTP date: the backoff stands
    return min(wait, 60.0)


def answer_of(url: str, response: httpx.Response) -> dict[str, Any]:
    """The JSON of an answer that is not to be retried (EndpointError quoting the server otherwise)."""
    if response.status_code >= 400:
        raise EndpointError(f"{url} refused the request (HTTP {response.status_code}): {response.text[:300]}")
    try:
        return response.json()
    except ValueError as e:
        raise EndpointError(f"{url} answered with something that is not JSON: {response.text[:200]}") from e


class Client:
    """One async client: bounded concurrency, retries with exponential backoff and jitter."""

    def __init__(self, spec: EndpointSpec) -> None:
        self.spec = spec
        self.semaphore = asyncio.Semaphore(spec.concurrency)
        headers = spec.headers()
        self._key_forms = key_forms(headers.get("Authorization", "").removeprefix("Bearer "))
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(spec.timeout_s, connect=min(10.0, spec.timeout_s)),
                                      limits=httpx.Limits(max_connections=spec.concurrency),
                                      headers=headers)
        self.retried = 0

    def scrubbed(self, response: httpx.Response) -> httpx.Response:
        """The answer with the API key we sent masked in its body and headers: a server that
        echoes the Authorization header (in a completion, a model name, a version, an error)
        cannot make the key part of a prediction, a stored row or an error message. Every
        request goes through here: completions, /generate, /tokenize, the probe's."""
        return scrub(response, self._key_forms)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def post(self, path: str, body: dict[str, Any], root: bool = False) -> dict[str, Any]:
        """POST to the API root (`root`: the server's root, where /generate and /tokenize live)."""
        async with self.semaphore:
            return await self._with_retries("POST", path, body, root)

    async def get(self, path: str, root: bool = False) -> httpx.Response:
        url = (api_root(self.spec.base_url) if root else self.spec.base_url) + path
        return self.scrubbed(await self.http.get(url))

    async def _with_retries(self, method: str, path: str, body: dict[str, Any], root: bool = False) -> dict[str, Any]:
        url = (api_root(self.spec.base_url) if root else self.spec.base_url) + path
        last, retry_after = "", None  # this request's own: concurrent requests do not share them
        for attempt in range(self.spec.max_retries + 1):
            if attempt:
                self.retried += 1
                await asyncio.sleep(backoff(self.spec, attempt, retry_after))
            try:
                response = self.scrubbed(await self.http.request(method, url, json=body))
            except (httpx.TimeoutException, httpx.TransportError) as e:  # connect refused, reset, dropped, timed out
                last, retry_after = (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__), None
                log.warning("%s %s: %s (try %d of %d)", method, url, last, attempt + 1, self.spec.max_retries + 1)
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                retry_after = response.headers.get("retry-after") if response.status_code in (429, 503) else None
                log.warning("%s %s: %s (try %d of %d)", method, url, last, attempt + 1, self.spec.max_retries + 1)
                continue
            return answer_of(url, response)
        raise EndpointUnavailable(f"the server at {self.spec.base_url} did not answer after "
                                  f"{self.spec.max_retries + 1} tries (last: {last}); finished samples are kept: "
                                  "start the server again and resume the job to send only the rest")


def api_root(base_url: str) -> str:
    """The server's root (the base URL without its /v1): where /version and friends live."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


# --- capability probe -------------------------------------------------------------------------


def vllm_prompt_logprobs(answer: dict[str, Any], ids: Sequence[int]) -> tuple[list[float | None], list[bool]]:
    """Per-token log-probabilities of `ids` (the first None) and whether each token was the
    model's top choice, from vLLM's completions `choices[0].prompt_logprobs`: one entry per
    prompt token, the first null, each a map from token id to {logprob, rank, decoded_token}
    holding the prompt's token and the top ones."""
    entries = answer["choices"][0].get("prompt_logprobs")
    if not isinstance(entries, list) or len(entries) != len(ids):
        raise EndpointError(f"prompt_logprobs has {len(entries) if isinstance(entries, list) else 'no'} entries for "
                            f"a prompt of {len(ids)} tokens")
    values: list[float | None] = [None]
    top = [False]
    for token, entry in zip(ids[1:], entries[1:], strict=True):
        mine = (entry or {}).get(str(token))
        if not isinstance(mine, dict) or not isinstance(mine.get("logprob"), int | float):
            raise EndpointError(f"prompt_logprobs gives no log-probability for prompt token {token}")
        values.append(float(mine["logprob"]))
        top.append(mine.get("rank") == 1)
    return values, top


def sglang_prompt_logprobs(answer: dict[str, Any], ids: Sequence[int]) -> tuple[list[float | None], list[bool]]:
    """The same from SGLang's /generate `meta_info`: `input_token_logprobs` one
    [logprob, token id, text] per prompt token from `logprob_start_len` 0 (the first
    logprob null), `input_top_logprobs` the top [logprob, token id, text] lists."""
    meta = answer["meta_info"]
    entries, tops = meta.get("input_token_logprobs"), meta.get("input_top_logprobs") or []
    if not isinstance(entries, list) or len(entries) != len(ids):
        raise EndpointError(f"input_token_logprobs has {len(entries) if isinstance(entries, list) else 'no'} "
                            f"entries for a prompt of {len(ids)} tokens")
    values: list[float | None] = [None]
    top = [False]
    for pos in range(1, len(ids)):
        logprob, token = entries[pos][0], entries[pos][1]
        if token != ids[pos] or not isinstance(logprob, int | float):
            raise EndpointError(f"input_token_logprobs[{pos}] is {entries[pos]!r}, not prompt token {ids[pos]}")
        values.append(float(logprob))
        best = tops[pos] if pos < len(tops) else None
        top.append(bool(best) and best[0][1] == ids[pos])
    return values, top


def echo_prompt_logprobs(answer: dict[str, Any], ids: Sequence[int],
                         tokenizer: Tokenizer) -> tuple[list[float | None], list[bool]]:
    """The same from the OpenAI `echo` + `logprobs`: `choices[0].logprobs.token_logprobs` one
    per prompt token (the first may be null), `top_logprobs` maps of token text to logprob."""
    lp = answer["choices"][0].get("logprobs") or {}
    values = list(lp.get("token_logprobs") or [])[: len(ids)]
    tops = list(lp.get("top_logprobs") or [])[: len(ids)]
    if len(values) < len(ids) or any(not isinstance(v, int | float) for v in values[1:]):
        raise EndpointError(f"echo returned {len(values)} prompt log-probabilities for a prompt of {len(ids)} tokens")
    top = [False]
    for pos in range(1, len(ids)):
        best = tops[pos] if pos < len(tops) else None
        top.append(bool(best) and max(best, key=best.get) == tokenizer.decode([ids[pos]], skip_special_tokens=False))
    return [None] + [float(v) for v in values[1:]], top


def scoring_request(method: str, model: str, ids: Sequence[int]) -> tuple[str, dict[str, Any], bool]:
    """(path, body, at the server's root) of a request for the prompt log-probabilities of `ids`."""
    if method == "vllm":
        return "/completions", {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0,
                                "prompt_logprobs": 1}, False
    if method == "sglang":
        return "/generate", {"input_ids": list(ids), "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                             "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 1}, True
    return "/completions", {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0, "echo": True,
                            "logprobs": 1}, False


async def prompt_logprobs(client: Client, method: str, model: str, ids: Sequence[int],
                          tokenizer: Tokenizer) -> tuple[list[float | None], list[bool]]:
    """Ask the server for the prompt log-probabilities of `ids` by `method` (SCORING_METHODS)."""
    path, body, root = scoring_request(method, model, ids)
    answer = await client.post(path, body, root=root)
    try:
        if method == "vllm":
            return vllm_prompt_logprobs(answer, ids)
        if method == "sglang":
            return sglang_prompt_logprobs(answer, ids)
        return echo_prompt_logprobs(answer, ids, tokenizer)
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise EndpointError(f"{client.spec.base_url}: the {method} prompt log-probabilities are not in the documented "
                            f"shape ({type(e).__name__}: {e})") from None


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


def detokenized(answer: Any) -> str | None:
    """The text of a /detokenize answer: vLLM's `prompt`, SGLang's `text`."""
    if not isinstance(answer, dict):
        return None
    text = answer.get("prompt", answer.get("text"))
    return text if isinstance(text, str) else None


def server_error(response: httpx.Response) -> str:
    """A failed server's own error message (an OpenAI error body's `message`, FastAPI's
    `detail`, or its text), one line, at most 300 characters."""
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        text = (error.get("message") if isinstance(error, dict) else None) or body.get("message") or body.get("detail")
    except (ValueError, AttributeError):
        text = None
    text = str(text or response.text or "no message").replace("\n", " ").strip()
    return text[:300] + ("..." if len(text) > 300 else "")


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
            except (httpx.HTTPError, ValueError):
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
            for method in SCORING_METHODS:
                if method != "sglang" and not token_prompts:
                    continue  # vLLM's extension and echo score our ids only where the server takes ids
                try:
                    await prompt_logprobs(client, method, spec.served_model, ids, tokenizer or _NoTokenizer())
                    scoring = method
                    break
                except (EndpointError, KeyError, IndexError, TypeError):
                    continue
        return Capabilities(models=models, token_prompts=token_prompts, prompt_logprobs=scoring is not None,
                            server_version=version, server=server, listed=listed, prompt_scoring=scoring,
                            tokenizer_endpoints=server_ids is not None, max_model_len=max_len,
                            thinking_switches=await _thinking_switches(client, spec))


# A served model's thinking switch per setting of the `thinking` option, as the chat request's fields.
SWITCH_FIELDS = {"enable_thinking": {"chat_template_kwargs": {"enable_thinking": False}},
                 "reasoning_effort": {"reasoning_effort": "low"}}


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


def thinking_fields(setting: str) -> dict[str, Any]:
    """The chat request's fields that switch a served model's thinking as the task asks:
    `chat_template_kwargs` (Qwen3's and SmolLM3's enable_thinking) or `reasoning_effort`
    (gpt-oss); nothing for `default`."""
    if setting in ("on", "off"):
        return {"chat_template_kwargs": {"enable_thinking": setting == "on"}}
    if setting in ("low", "medium", "high"):
        return {"reasoning_effort": setting}
    return {}


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


def probe_server(base_url: str, allowed_hosts: Sequence[str], served_model: str | None = None,
                 tokenizer: str | None = None, api_style: ApiStyle = "completions",
                 api_key_env: str | None = None) -> tuple[EndpointSpec, Capabilities]:
    """What a server can do, for `lctx endpoints probe`: the model asked about is
    `served_model`, else the first the server lists."""
    url = check_base_url(base_url, allowed_hosts)
    if not served_model:
        headers = key_headers(api_key_env)
        try:
            with httpx.Client(headers=headers, timeout=30) as http:
                listed = scrub(http.get(url + "/models"), key_forms(headers.get("Authorization", "")[7:]))
            names = [str(m["id"]) for m in listed.json()["data"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            raise EndpointError(f"{url}/models gave no model list ({type(e).__name__}); give --served-model") from None
        if not names:
            raise EndpointError(f"{url}/models lists no model; give --served-model NAME")
        served_model = names[0]
    spec = EndpointSpec(url, served_model, tokenizer, None, api_style, api_key_env=api_key_env)
    return spec, probe(spec, need_tokenizer=False)


def served_identity(base_url: str, served_model: str) -> str:
    """What identifies a served model (sha256 hex of its URL and model name): a job's
    fingerprint on an endpoint, a served judge's identity."""
    import hashlib

    return hashlib.sha256(f"endpoint\0{base_url}\0{served_model}".encode()).hexdigest()


def unanswered(spec: EndpointSpec, timeout_s: float = 5.0) -> str | None:
    """Why the server does not answer as an OpenAI-compatible one now (None: it does):
    GET /v1/models, once, within `timeout_s`. A judge's check at submission: a job whose
    judge is down is refused rather than failed at its first answer."""
    try:
        headers = key_headers(spec.api_key_env)
        with httpx.Client(headers=headers, timeout=timeout_s) as http:
            response = http.get(spec.base_url + "/models")
        listed = response.json() if response.status_code == 200 else None
    except EndpointError as e:
        return str(e)
    except (httpx.HTTPError, ValueError) as e:
        return f"no answer ({type(e).__name__})"
    if not isinstance(listed, dict) or not isinstance(listed.get("data"), list):
        return f"GET /v1/models answered HTTP {response.status_code} without a model list"
    return None


def load_endpoint_tokenizer(path: str | Path) -> Tokenizer:
    _tokenizer_folder(path)
    return load_tokenizer(Path(path), None)


def _tokenizer_folder(path: str | Path) -> Path:
    """The tokenizer folder given, which must exist (EndpointError saying so otherwise)."""
    folder = Path(path)
    if not folder.is_dir():
        raise EndpointError(f"the tokenizer folder {folder} does not exist; give the folder holding the served "
                            "model's tokenizer.json and config.json (--tokenizer / tokenizer)")
    return folder


def context_of(tokenizer_dir: str | Path) -> int:
    """The context of the checkpoint a tokenizer folder belongs to (its config.json's
    max_position_embeddings); EndpointError asking for it when the folder does not say."""
    config = _tokenizer_folder(tokenizer_dir) / "config.json"
    try:
        return int(json.loads(config.read_text())["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        raise EndpointError(f"{config} does not give max_position_embeddings; give the served model's context "
                            "length (--context / context_length)") from None


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


def allowed_endpoint_hosts() -> list[str]:
    """Hosts an endpoint may be on: LCTX_ENDPOINT_HOSTS (comma-separated, "*" for any), default loopback."""
    value = os.environ.get("LCTX_ENDPOINT_HOSTS", "")
    return [h.strip() for h in value.split(",") if h.strip()] or list(LOOPBACK_HOSTS)


# --- the server's tokenizer -------------------------------------------------------------------


class ServerTokenizer:
    """The served model's tokenizer asked of the server (`/tokenize`, `/detokenize` at its
    root: vLLM, SGLang) where no tokenizer folder is given: prompt lengths and truncation
    count the server's own tokens. Answers are cached (a haystack's pieces are counted
    many times) and `encode_batch` sends up to `concurrency` requests at once. Synchronous:
    evaluators build prompts in threads; every answer passes the key mask (`scrub`)."""

    chat_template: str | None = None  # the server applies its own (chat style)
    chat_template_source: str | None = None
    vocab_size = 0  # not told by the server
    CACHE = 65_536

    def __init__(self, spec: EndpointSpec) -> None:
        self.spec = spec
        headers = spec.headers()
        self._forms = key_forms(headers.get("Authorization", "").removeprefix("Bearer "))
        self.http = httpx.Client(timeout=httpx.Timeout(spec.timeout_s, connect=min(10.0, spec.timeout_s)),
                                 headers=headers, limits=httpx.Limits(max_connections=spec.concurrency))
        self._cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.eos_ids: list[int] = []
        bos = self.encode("", add_special_tokens=True)  # what the server adds in front of every prompt
        self.bos_id: int | None = bos[0] if len(bos) == 1 else None

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = api_root(self.spec.base_url) + path
        last, retry_after = "", None
        for attempt in range(self.spec.max_retries + 1):
            if attempt:
                time.sleep(backoff(self.spec, attempt, retry_after))
            try:
                response = scrub(self.http.post(url, json=body), self._forms)
            except (httpx.TimeoutException, httpx.TransportError) as e:
                last, retry_after = f"{type(e).__name__}: {e}", None
                continue
            if response.status_code in RETRY_STATUS:
                last, retry_after = f"HTTP {response.status_code}: {response.text[:200]}", response.headers.get(
                    "retry-after")
                continue
            return answer_of(url, response)
        raise EndpointUnavailable(f"the server at {self.spec.base_url} did not answer {path} after "
                                  f"{self.spec.max_retries + 1} tries (last: {last})")

    def _cached(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        value = compute()
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > self.CACHE:
                self._cache.popitem(last=False)
        return value

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        def ask() -> tuple[int, ...]:
            answer = self._post("/tokenize", {"model": self.spec.served_model, "prompt": text,
                                              "add_special_tokens": add_special_tokens})
            ids = answer.get("tokens") if isinstance(answer, dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise EndpointError(f"{self.spec.base_url}: /tokenize answered without a list of token ids")
            return tuple(ids)

        return list(self._cached(("encode", text, add_special_tokens), ask))

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        if len(texts) < 2:
            return [self.encode(t, add_special_tokens) for t in texts]
        with ThreadPoolExecutor(max_workers=self.spec.concurrency) as pool:
            return list(pool.map(lambda t: self.encode(t, add_special_tokens), texts))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        def ask() -> str:
            text = detokenized(self._post("/detokenize", {"model": self.spec.served_model, "tokens": list(ids),
                                                          "skip_special_tokens": skip_special_tokens}))
            if text is None:
                raise EndpointError(f"{self.spec.base_url}: /detokenize answered without the text")
            return text

        return self._cached(("decode", tuple(ids), skip_special_tokens), ask)

    def save(self, path: Path) -> None:
        raise EndpointError("the served model's tokenizer lives on its server: there is no file to save")

    def close(self) -> None:
        self.http.close()


# --- the served model, as evaluators see it -----------------------------------------------------


@dataclass(frozen=True)
class ServedConfig:
    """The part of a model's config that evaluators read of a served model: its context."""

    effective_context: int
    rope_scaling: None = None  # the server's settings apply; not known here

    @property
    def max_position_embeddings(self) -> int:
        return self.effective_context

    @property
    def rope_l0(self) -> int:
        """The context it was trained at, as far as lctx knows: the registered one."""
        return self.effective_context


@dataclass
class ServedModel:
    """An endpoint in place of a `LoadedModel`: a tokenizer, a context and a description;
    no weights here, so what needs them (RoPE override, attention backend, diagnostics) is
    refused before a job starts."""

    spec: EndpointSpec
    capabilities: Capabilities
    tokenizer: Tokenizer
    reported_model: str | None = None  # the model name the server put in its answers
    retries: int = 0  # requests sent again (429, 5xx, dropped connections) over the run
    config: ServedConfig = field(init=False)

    def __post_init__(self) -> None:
        if self.spec.context_length is None:
            raise EndpointError(f"the context of {self.spec.served_model!r} is not known: give it (--context / "
                                "context_length) or a tokenizer folder whose config.json has max_position_embeddings")
        self.config = ServedConfig(self.spec.context_length)

    @property
    def path(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        """The identity samples are recorded under (another endpoint or model must not reuse them)."""
        return {"endpoint": self.spec.base_url, "served_model": self.spec.served_model,
                "api_style": self.spec.api_style, "context_length": self.spec.context_length,
                "tokenizer": str(Path(self.spec.tokenizer).resolve()) if self.spec.tokenizer else "server",
                "backend": "endpoint"}

    def describe_run(self) -> dict[str, Any]:
        """What results record about the model as it ran: the endpoint, the name the server
        reported and its version, what it supports."""
        caps = self.capabilities
        return {**self.describe(), "reported_model": self.reported_model,
                "server_version": caps.server_version, "server": caps.server, "retries": self.retries,
                "capabilities": {"token_prompts": caps.token_prompts, "prompt_logprobs": caps.prompt_logprobs,
                                 "prompt_scoring": caps.prompt_scoring, "listed": caps.listed,
                                 "tokenizer_endpoints": caps.tokenizer_endpoints}}


def connect(spec: EndpointSpec, allowed_hosts: Sequence[str] = LOOPBACK_HOSTS) -> ServedModel:
    """Check the URL, load the tokenizer (or take the server's), probe the server: the
    model evaluators run on. A context left out is the tokenizer folder's, else the server's."""
    check_base_url(spec.base_url, allowed_hosts)
    tokenizer = load_endpoint_tokenizer(spec.tokenizer) if spec.tokenizer else None
    capabilities = probe(spec, tokenizer)
    if spec.context_length is None:
        context = context_of(spec.tokenizer) if spec.tokenizer else capabilities.max_model_len
        spec = replace(spec, context_length=context)
    return ServedModel(spec, capabilities, tokenizer or ServerTokenizer(spec))


# --- the engine -------------------------------------------------------------------------------


def prefix_order(prompts: Sequence[tuple[int, ...]]) -> list[int]:
    """Indices sorted by token ids: prompts that share a prefix (one haystack, needles at
    several depths) become neighbours and go out together, while the server's prefix cache
    still holds their shared part."""
    return sorted(range(len(prompts)), key=lambda i: prompts[i])


class EndpointEngine:
    """`Engine`'s three calls over a served model; results in request order."""

    def __init__(self, served: ServedModel) -> None:
        self.served = served
        self.spec = served.spec
        self.tokenizer = served.tokenizer
        self.sent = 0  # requests answered (the resume test counts them)
        self.stats = None  # prefix reuse happens in the server, unseen here
        self.clock = None  # so does the split between prefill and decoding
        self.on_prefill = None  # prompts are prefilled in the server: no progress by token

    # --- checks made before anything is sent ---

    def _check_fits(self, prompt_len: int, new: int, what: str) -> None:
        if prompt_len + new > self.spec.context_length:
            raise EndpointError(
                f"a {what} of {prompt_len} prompt tokens + {new} new tokens exceeds the endpoint's context of "
                f"{self.spec.context_length} tokens; lower the task's lengths (or its max_length) so prompts fit, "
                "or register the endpoint with the context its server really has")

    def _check_logprobs(self, what: str) -> None:
        caps = self.served.capabilities
        if self.spec.api_style != "completions" or caps.prompt_scoring not in SCORING_METHODS:
            raise EndpointError(
                f"{what} needs prompt log-probabilities of exactly our tokens (vLLM's prompt_logprobs, SGLang's "
                f"/generate with return_logprob, or echo + logprobs with token-id prompts); the server at "
                f"{self.spec.base_url} does not return them (token_prompts={caps.token_prompts}, "
                f"prompt_scoring={caps.prompt_scoring}, style={self.spec.api_style}); serve the model with vLLM "
                "or SGLang for this task")

    def _prompt(self, ids: Sequence[int]) -> list[int] | str:
        if self.served.capabilities.token_prompts:
            return list(ids)
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    # --- the three request types ---

    def generate_until(self, requests: Sequence[GenerateRequest], done: Done | None = None) -> list[Generation]:
        for r in requests:
            if r.think is None:  # a thinking request that does not fit is answered beyond_context, unsent
                self._check_fits(len(r.prompt_ids), r.max_new_tokens, "generation")
        return self._run(requests, self._generate, done)

    def loglikelihood(self, requests: Sequence[LoglikelihoodRequest],
                      done: Done | None = None) -> list[tuple[float, bool]]:
        if requests:
            self._check_logprobs("log-likelihood scoring")
        for r in requests:
            self._check_fits(len(r.context_ids) + len(r.continuation_ids), 0, "log-likelihood request")
        return self._run(requests, self._loglikelihood, done)

    def loglikelihood_rolling(self, requests: Sequence[RollingRequest], done: Done | None = None) -> list[Any]:
        if requests:
            self._check_logprobs("rolling log-likelihood (perplexity)")
        for r in requests:
            self._check_fits(len(r.ids), 0, "rolling log-likelihood request")
        return self._run(requests, self._rolling, done)

    # --- one request each ---

    async def _generate(self, client: Client, r: GenerateRequest) -> Generation:
        from checkpoints.generate import Generation

        spec, plan = self.spec, r.think
        thinks = plan is not None and plan.setting != "off"  # switched off: the answer's budget and stops alone
        budget = r.max_new_tokens + (plan.budget if thinks else 0)  # type: ignore[union-attr]
        if thinks and spec.context_length is not None and len(r.prompt_ids) + budget > spec.context_length:
            # prompt + thinking budget + answer budget beyond the served context: counted, never cut
            return Generation(text="", token_ids=[], prompt_tokens=len(r.prompt_ids), stop_reason="beyond_context")
        stops = list(r.stop) + [s for s in (self.tokenizer.decode([i], skip_special_tokens=False)
                                             for i in r.stop_ids) if s]
        # A model that may think: one request bounds thinking and answer together (max_tokens), so
        # it gets both budgets; stop strings are the answer's and are applied here, not to the thinking.
        body: dict[str, Any] = {"model": spec.served_model, "max_tokens": budget, "temperature": 0}
        if stops and not thinks:
            body["stop"] = stops
        if r.min_new_tokens:
            body["min_tokens"] = r.min_new_tokens  # vLLM/SGLang's extension; refused by servers without it
        if r.suppress_ids:
            body["logit_bias"] = {str(i): -100 for i in r.suppress_ids}
        if not r.stop_at_eos:
            body["ignore_eos"] = True
        reasoning: str | None = None
        if spec.api_style == "chat":
            if r.messages is not None:  # a conversation: the server's template renders its turns
                messages = [dict(m) for m in r.messages]
            else:
                messages = [{"role": "user", "content": self.tokenizer.decode(list(r.prompt_ids),
                                                                              skip_special_tokens=False)}]
            if plan is not None:
                body.update(thinking_fields(plan.setting))
            answer = await client.post("/chat/completions", {**body, "messages": messages})
            choice = answer["choices"][0]
            message = choice.get("message") or {}
            text = message.get("content") or ""
            # vLLM's reasoning parser (`reasoning`; `reasoning_content` before 2026, and SGLang's)
            reasoning = message.get("reasoning") or message.get("reasoning_content")
        else:
            answer = await client.post("/completions", {**body, "prompt": self._prompt(r.prompt_ids)})
            choice = answer["choices"][0]
            text = choice.get("text") or ""
        self.served.reported_model = answer.get("model", self.served.reported_model)
        finish = choice.get("finish_reason")
        if plan is not None:
            return await self._answer_after_thinking(client, r, text, reasoning, finish, stops, answer)
        cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)  # servers that overshoot a stop
        if cut >= 0:
            text = text[:cut]
        stopped = cut >= 0 or (bool(stops) and choice.get("stop_reason") is not None)  # vLLM names the stop
        reason = "length" if finish == "length" else ("stop_string" if stopped else "eos")
        return Generation(text=text, token_ids=self.tokenizer.encode(text, add_special_tokens=False),
                          prompt_tokens=len(r.prompt_ids), stop_reason=reason)

    async def _answer_after_thinking(self, client: Client, r: GenerateRequest, text: str, reasoning: str | None,
                                     finish: str | None, stops: list[str], answer: dict[str, Any]) -> Generation:
        """A thinking model's generation: the thinking from the server's reasoning field, or
        split from the text by the model's delimiters (a server without a reasoning parser);
        the answer cut to its own budget and stop strings. Thinking that used up the request
        (no answer, finish `length`) is closed for it where the server takes token prompts:
        a second request continues the prompt, the thinking and the forced close."""
        from checkpoints.generate import Generation

        plan = r.think
        assert plan is not None
        thinking, reply = (reasoning, text) if reasoning is not None else plan.format.split(text, plan.inside)
        details = (answer.get("usage") or {}).get("completion_tokens_details") or {}
        counted = details.get("reasoning_tokens") if isinstance(details, dict) else None
        thinking_tokens = counted if isinstance(counted, int) else \
            len(self.tokenizer.encode(thinking, add_special_tokens=False)) if thinking else 0
        truncated = bool(thinking) and not reply.strip() and finish == "length"
        reason = "length" if finish == "length" else "eos"
        if truncated and self.spec.api_style == "completions":
            raw = text if reasoning is None else thinking
            ids = [*r.prompt_ids, *self.tokenizer.encode(raw, add_special_tokens=False), *plan.answer_ids(True)]
            more = await client.post("/completions", {"model": self.spec.served_model, "prompt": self._prompt(ids),
                                                      "max_tokens": r.max_new_tokens, "temperature": 0})
            reply, reason = more["choices"][0].get("text") or "", more["choices"][0].get("finish_reason")
            reason = "length" if reason == "length" else "eos"
        ids = self.tokenizer.encode(reply.lstrip(), add_special_tokens=False)
        if len(ids) > r.max_new_tokens:  # the request's max_tokens held both budgets: the answer keeps its own
            ids, reason = ids[:r.max_new_tokens], "length"
            reply = self.tokenizer.decode(ids)
        reply = reply.lstrip()
        cut = min((i for i in (reply.find(s) for s in stops) if i >= 0), default=-1)
        if cut >= 0:
            reply, reason = reply[:cut], "stop_string"
        return Generation(text=reply, token_ids=ids, prompt_tokens=len(r.prompt_ids), stop_reason=reason,
                          thinking=thinking, thinking_tokens=thinking_tokens, thinking_truncated=truncated)

    async def _loglikelihood(self, client: Client, r: LoglikelihoodRequest) -> tuple[float, bool]:
        ids = list(r.context_ids) + list(r.continuation_ids)
        values, top = await prompt_logprobs(client, self.served.capabilities.prompt_scoring or "", self.spec.served_model,
                                            ids, self.tokenizer)
        start = len(ids) - len(r.continuation_ids)
        return float(sum(v for v in values[start:] if v is not None)), all(top[start:])

    async def _rolling(self, client: Client, r: RollingRequest) -> Any:
        import torch

        if len(r.ids) < 2:
            return torch.zeros(0, dtype=torch.float32)
        values, _ = await prompt_logprobs(client, self.served.capabilities.prompt_scoring or "", self.spec.served_model,
                                          r.ids, self.tokenizer)
        return torch.tensor(values[1:], dtype=torch.float32)

    # --- the loop ---

    def _run(self, requests: Sequence[Any], one: Any, done: Done | None) -> list[Any]:
        if not requests:
            return []
        return asyncio.run(self._gather(requests, one, done))

    async def _gather(self, requests: Sequence[Any], one: Any, done: Done | None) -> list[Any]:
        results: list[Any] = [None] * len(requests)
        keys = [getattr(r, "prompt_ids", None) or getattr(r, "context_ids", None) or getattr(r, "ids", ())
                for r in requests]
        started = time.perf_counter()
        async with Client(self.spec) as client:
            async def run(i: int) -> tuple[int, Any]:
                return i, await one(client, requests[i])

            # Tasks are created in prefix order; the semaphore admits them in that order.
            tasks = [asyncio.create_task(run(i)) for i in prefix_order(keys)]
            try:
                for next_done in asyncio.as_completed(tasks):
                    i, result = await next_done
                    results[i] = result
                    self.sent += 1
                    if done is not None:
                        done(i, result)  # recorded before anything else can fail
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                self.served.retries += client.retried  # counted for a failed run too
        log.info("%d requests to %s in %.1fs (%d retries)", len(requests), self.spec.base_url,
                 time.perf_counter() - started, client.retried)
        return results
