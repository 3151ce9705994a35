"""The engine's model interface over an OpenAI-compatible server (vLLM, SGLang,
llama.cpp's server, `transformers serve`): the same three request types and the same
results as `checkpoints.engine.Engine`, so every evaluator runs unchanged on a model
that runs elsewhere (docs/protocols/endpoints.md).

- Prompts arrive as token ids counted with the served model's tokenizer; a prompt plus
  its new tokens longer than the registered context is refused before anything is sent
  (tasks with a truncation rule have already applied it against that context).
- Token ids go to the server as ids where it takes them (vLLM, SGLang) and as the text
  they decode to otherwise; log-likelihoods are asked only of servers that take ids and
  return prompt logprobs (`echo` + `logprobs`), never guessed from generated tokens.
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
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from checkpoints.engine import GenerateRequest, LoglikelihoodRequest, RollingRequest
from checkpoints.errors import EndpointError, EndpointUnavailable
from checkpoints.generate import Generation
from checkpoints.lm import Done
from checkpoints.tokenizer import Tokenizer, load_tokenizer

log = logging.getLogger("lctx.endpoint")

ApiStyle = Literal["completions", "chat"]
API_STYLES: tuple[str, ...] = ("completions", "chat")
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")
PROBE_TEXT = "The quick brown fox jumps over the lazy dog."
KEY_MASK = "***"
MIN_KEY = 8


@dataclass(frozen=True)
class EndpointSpec:
    """What a registration says about a served model."""

    base_url: str  # ".../v1"
    served_model: str
    tokenizer: str  # a local folder with tokenizer.json (the served checkpoint's)
    context_length: int
    api_style: ApiStyle = "completions"
    concurrency: int = 8
    timeout_s: float = 600.0
    max_retries: int = 5
    backoff_s: float = 1.0
    api_key_env: str | None = None  # the NAME of the variable holding the key, never the key

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        if self.api_style not in API_STYLES:
            raise EndpointError(f"api_style {self.api_style!r}: use one of {', '.join(API_STYLES)}")
        for name in ("context_length", "concurrency"):
            if getattr(self, name) < 1:
                raise EndpointError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.timeout_s <= 0 or self.backoff_s < 0 or self.max_retries < 0:
            raise EndpointError("timeout_s must be > 0, backoff_s and max_retries >= 0")

    def headers(self) -> dict[str, str]:
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env)
        if not key:
            raise EndpointError(f"the environment variable {self.api_key_env} (named as this endpoint's API key) "
                                "is not set in the process that sends the requests")
        return {"Authorization": f"Bearer {key}"}


@dataclass
class Capabilities:
    """What the server said about itself at registration (recorded with every result)."""

    models: list[str]
    token_prompts: bool  # takes a prompt as a list of token ids (exact tokens; no re-tokenization)
    prompt_logprobs: bool  # echo + logprobs return a log-probability per prompt token
    server_version: str | None = None
    server: str | None = None  # what the server calls itself (HTTP `server` header, /version's source)

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


class Client:
    """One async client: bounded concurrency, retries with exponential backoff and jitter."""

    def __init__(self, spec: EndpointSpec) -> None:
        self.spec = spec
        self.semaphore = asyncio.Semaphore(spec.concurrency)
        headers = spec.headers()
        key = headers.get("Authorization", "").removeprefix("Bearer ")
        # The key and its JSON-escaped form, as a server would echo it back (MIN_KEY: a shorter
        # "key" such as vLLM's customary EMPTY is no secret and would mask ordinary words).
        self._key_forms = sorted({key, json.dumps(key)[1:-1]}, key=len, reverse=True) if len(key) >= MIN_KEY else []
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(spec.timeout_s, connect=min(10.0, spec.timeout_s)),
                                      limits=httpx.Limits(max_connections=spec.concurrency),
                                      headers=headers)
        self.retried = 0

    def scrubbed(self, response: httpx.Response) -> httpx.Response:
        """The answer with the API key we sent masked in its body and headers: a server that
        echoes the Authorization header (in a completion, a model name, a version, an error)
        cannot make the key part of a prediction, a stored row or an error message."""
        if not self._key_forms:
            return response
        content, headers = response.content, []
        for form in self._key_forms:
            content = content.replace(form.encode(), KEY_MASK.encode())
        for name, value in response.headers.multi_items():
            if name.lower() in ("content-length", "content-encoding", "transfer-encoding"):
                continue  # the body above is decoded and may have changed length
            for form in self._key_forms:
                value = value.replace(form, KEY_MASK)
            headers.append((name, value))
        return httpx.Response(response.status_code, headers=headers, content=content, request=response.request)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.semaphore:
            return await self._with_retries("POST", path, body)

    async def get(self, path: str, root: bool = False) -> httpx.Response:
        url = (api_root(self.spec.base_url) if root else self.spec.base_url) + path
        return self.scrubbed(await self.http.get(url))

    async def _with_retries(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.spec.base_url + path
        last = ""
        for attempt in range(self.spec.max_retries + 1):
            if attempt:
                self.retried += 1
                await asyncio.sleep(self.delay(attempt, last))
            try:
                response = self.scrubbed(await self.http.request(method, url, json=body))
            except (httpx.TimeoutException, httpx.TransportError) as e:  # connect refused, reset, dropped, timed out
                last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                log.warning("%s %s: %s (try %d of %d)", method, url, last, attempt + 1, self.spec.max_retries + 1)
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                self._retry_after = response.headers.get("retry-after")
                log.warning("%s %s: %s (try %d of %d)", method, url, last, attempt + 1, self.spec.max_retries + 1)
                continue
            if response.status_code >= 400:
                raise EndpointError(f"{url} refused the request (HTTP {response.status_code}): {response.text[:300]}")
            try:
                return response.json()
            except ValueError as e:
                raise EndpointError(f"{url} answered with something that is not JSON: {response.text[:200]}") from e
        raise EndpointUnavailable(f"the server at {self.spec.base_url} did not answer after "
                                  f"{self.spec.max_retries + 1} tries (last: {last}); finished samples are kept: "
                                  "start the server again and resume the job to send only the rest")

    _retry_after: str | None = None

    def delay(self, attempt: int, last: str) -> float:
        """Exponential backoff with jitter; a 429's Retry-After (seconds) wins when longer."""
        wait = self.spec.backoff_s * 2 ** (attempt - 1) * (0.75 + 0.5 * random.random())
        if last.startswith("HTTP 429") and self._retry_after and self._retry_after.isdigit():
            wait = max(wait, float(self._retry_after))
        return min(wait, 60.0)


def api_root(base_url: str) -> str:
    """The server's root (the base URL without its /v1): where /version and friends live."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


# --- capability probe -------------------------------------------------------------------------


async def _probe(spec: EndpointSpec, tokenizer: Tokenizer) -> Capabilities:
    async with Client(spec) as client:
        try:
            response = await client.get("/models")
        except (httpx.ConnectError, httpx.TimeoutException) as e:
            raise EndpointError(f"{spec.base_url}/models did not answer ({type(e).__name__}: {e}); "
                                "is the server running and is the URL its API root (ending in /v1)?") from e
        except (httpx.HTTPError, httpx.InvalidURL) as e:  # h11 quotes the bytes it could not parse: not shown
            raise EndpointError(f"{spec.base_url}/models: not an OpenAI-compatible server there "
                                f"({type(e).__name__}); give the server's API root (ending in /v1)") from None
        if response.status_code != 200:
            # Not quoted: whatever listens on an allowed host's port would have its first bytes shown.
            raise EndpointError(f"{spec.base_url}/models answered HTTP {response.status_code}: not an "
                                "OpenAI-compatible server there; give the server's API root (ending in /v1) and its "
                                "key variable if it needs one")
        try:
            models = [str(m["id"]) for m in response.json()["data"]]
        except (ValueError, KeyError, TypeError):
            raise EndpointError(f"{spec.base_url}/models did not answer with an OpenAI model list: not an "
                                "OpenAI-compatible server there") from None
        if spec.served_model not in models:
            raise EndpointError(f"the server at {spec.base_url} does not serve {spec.served_model!r}; "
                                f"it lists {', '.join(models) or 'no model'}")
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
        ids = tokenizer.encode(PROBE_TEXT)
        token_prompts = prompt_logprobs = False
        if spec.api_style == "completions":
            try:
                await client.post("/completions", {"model": spec.served_model, "prompt": ids, "max_tokens": 1,
                                                   "temperature": 0})
                token_prompts = True
            except EndpointError:
                token_prompts = False
            try:
                body = {"model": spec.served_model, "prompt": ids if token_prompts else PROBE_TEXT, "max_tokens": 1,
                        "temperature": 0, "echo": True, "logprobs": 1}
                lp = (await client.post("/completions", body))["choices"][0].get("logprobs") or {}
                values = lp.get("token_logprobs") or []
                prompt_logprobs = len(values) >= len(ids) and all(v is not None for v in values[1:len(ids)])
            except (EndpointError, KeyError, IndexError, TypeError):
                prompt_logprobs = False
        return Capabilities(models=models, token_prompts=token_prompts, prompt_logprobs=prompt_logprobs,
                            server_version=version, server=server)


def probe(spec: EndpointSpec, tokenizer: Tokenizer | None = None) -> Capabilities:
    """Ask the server what it serves and supports (EndpointError saying what is wrong)."""
    probe_spec = EndpointSpec(**{**asdict(spec), "max_retries": 0, "timeout_s": min(spec.timeout_s, 120.0)})
    return asyncio.run(_probe(probe_spec, tokenizer or load_endpoint_tokenizer(spec.tokenizer)))


def load_endpoint_tokenizer(path: str | Path) -> Tokenizer:
    return load_tokenizer(Path(path), None)


def context_of(tokenizer_dir: str | Path) -> int:
    """The context of the checkpoint a tokenizer folder belongs to (its config.json's
    max_position_embeddings); EndpointError asking for it when the folder does not say."""
    config = Path(tokenizer_dir) / "config.json"
    try:
        return int(json.loads(config.read_text())["max_position_embeddings"])
    except (OSError, ValueError, KeyError, TypeError):
        raise EndpointError(f"{config} does not give max_position_embeddings; give the served model's context "
                            "length (--context / context_length)") from None


def allowed_endpoint_hosts() -> list[str]:
    """Hosts an endpoint may be on: LCTX_ENDPOINT_HOSTS (comma-separated, "*" for any), default loopback."""
    value = os.environ.get("LCTX_ENDPOINT_HOSTS", "")
    return [h.strip() for h in value.split(",") if h.strip()] or list(LOOPBACK_HOSTS)


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
    config: ServedConfig = field(init=False)

    def __post_init__(self) -> None:
        self.config = ServedConfig(self.spec.context_length)

    @property
    def path(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        """The identity samples are recorded under (another endpoint or model must not reuse them)."""
        return {"endpoint": self.spec.base_url, "served_model": self.spec.served_model,
                "api_style": self.spec.api_style, "context_length": self.spec.context_length,
                "tokenizer": str(Path(self.spec.tokenizer).resolve()), "backend": "endpoint"}

    def describe_run(self) -> dict[str, Any]:
        """What results record about the model as it ran: the endpoint, the name the server
        reported and its version, what it supports."""
        return {**self.describe(), "reported_model": self.reported_model,
                "server_version": self.capabilities.server_version, "server": self.capabilities.server,
                "capabilities": {"token_prompts": self.capabilities.token_prompts,
                                 "prompt_logprobs": self.capabilities.prompt_logprobs}}


def connect(spec: EndpointSpec, allowed_hosts: Sequence[str] = LOOPBACK_HOSTS) -> ServedModel:
    """Check the URL, load the tokenizer, probe the server: the model evaluators run on."""
    check_base_url(spec.base_url, allowed_hosts)
    tokenizer = load_endpoint_tokenizer(spec.tokenizer)
    return ServedModel(spec, probe(spec, tokenizer), tokenizer)


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
        if self.spec.api_style != "completions" or not caps.prompt_logprobs or not caps.token_prompts:
            raise EndpointError(
                f"{what} needs prompt log-probabilities of exactly our tokens (completions with echo + logprobs and "
                f"token-id prompts); the server at {self.spec.base_url} does not return them "
                f"(token_prompts={caps.token_prompts}, prompt_logprobs={caps.prompt_logprobs}, style="
                f"{self.spec.api_style}); serve the model with vLLM or SGLang for this task")

    def _prompt(self, ids: Sequence[int]) -> list[int] | str:
        if self.served.capabilities.token_prompts:
            return list(ids)
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    # --- the three request types ---

    def generate_until(self, requests: Sequence[GenerateRequest], done: Done | None = None) -> list[Generation]:
        for r in requests:
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
        spec = self.spec
        stops = list(r.stop) + [s for s in (self.tokenizer.decode([i], skip_special_tokens=False)
                                             for i in r.stop_ids) if s]
        body: dict[str, Any] = {"model": spec.served_model, "max_tokens": r.max_new_tokens, "temperature": 0}
        if stops:
            body["stop"] = stops
        if r.min_new_tokens:
            body["min_tokens"] = r.min_new_tokens  # vLLM/SGLang's extension; refused by servers without it
        if r.suppress_ids:
            body["logit_bias"] = {str(i): -100 for i in r.suppress_ids}
        if not r.stop_at_eos:
            body["ignore_eos"] = True
        if spec.api_style == "chat":
            if r.messages is not None:  # a conversation: the server's template renders its turns
                messages = [dict(m) for m in r.messages]
            else:
                messages = [{"role": "user", "content": self.tokenizer.decode(list(r.prompt_ids),
                                                                              skip_special_tokens=False)}]
            answer = await client.post("/chat/completions", {**body, "messages": messages})
            choice = answer["choices"][0]
            text = (choice.get("message") or {}).get("content") or ""
        else:
            answer = await client.post("/completions", {**body, "prompt": self._prompt(r.prompt_ids)})
            choice = answer["choices"][0]
            text = choice.get("text") or ""
        self.served.reported_model = answer.get("model", self.served.reported_model)
        cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)  # servers that overshoot a stop
        if cut >= 0:
            text = text[:cut]
        finish = choice.get("finish_reason")
        stopped = cut >= 0 or (bool(stops) and choice.get("stop_reason") is not None)  # vLLM names the stop
        reason = "length" if finish == "length" else ("stop_string" if stopped else "eos")
        return Generation(text=text, token_ids=self.tokenizer.encode(text, add_special_tokens=False),
                          prompt_tokens=len(r.prompt_ids), stop_reason=reason)

    async def _prompt_logprobs(self, client: Client, ids: Sequence[int]) -> tuple[list[float | None], list[Any]]:
        answer = await client.post("/completions", {"model": self.spec.served_model, "prompt": list(ids),
                                                    "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1})
        self.served.reported_model = answer.get("model", self.served.reported_model)
        lp = answer["choices"][0].get("logprobs") or {}
        values = list(lp.get("token_logprobs") or [])[: len(ids)]
        tops = list(lp.get("top_logprobs") or [])[: len(ids)]
        if len(values) < len(ids) or any(v is None for v in values[1:]):
            raise EndpointError(f"{self.spec.base_url} returned {len(values)} prompt log-probabilities for a prompt of "
                                f"{len(ids)} tokens; it cannot score prompts")
        return values, tops

    async def _loglikelihood(self, client: Client, r: LoglikelihoodRequest) -> tuple[float, bool]:
        ids = list(r.context_ids) + list(r.continuation_ids)
        values, tops = await self._prompt_logprobs(client, ids)
        n = len(r.continuation_ids)
        picked = values[len(ids) - n:]
        greedy = True
        for pos, token in zip(range(len(ids) - n, len(ids)), r.continuation_ids, strict=True):
            top = tops[pos] if pos < len(tops) else None
            if not top:
                greedy = False
                break
            best = max(top, key=top.get)
            greedy = greedy and best == self.tokenizer.decode([token], skip_special_tokens=False)
        return float(sum(picked)), greedy

    async def _rolling(self, client: Client, r: RollingRequest) -> Any:
        import torch

        if len(r.ids) < 2:
            return torch.zeros(0, dtype=torch.float32)
        values, _ = await self._prompt_logprobs(client, r.ids)
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
        log.info("%d requests to %s in %.1fs (%d retries)", len(requests), self.spec.base_url,
                 time.perf_counter() - started, client.retried)
        return results
