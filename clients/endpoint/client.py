"""The HTTP side of a served model: which URLs lctx may call (`check_base_url`, the
operator's allow-list) and one retrying client (`Client`: bounded concurrency, a timeout,
a 429 / 5xx or a dropped connection retried with exponential backoff and jitter; a server
that stays down raises `EndpointUnavailable` naming the URL and the last error).

What a server sends back is data, bounded before it is trusted: every request has a
deadline for the whole exchange (connect, headers and body: `timeout_s`, not only per read,
so a server that drips a byte every few seconds cannot hold a job), and its body is read up
to a byte limit made from the request's own token budget (`answer_limit`); an answer beyond
it, or one of the wrong shape (`Unusable`, raised by the caller's `read`), is a server error:
retried, then `EndpointUnavailable` quoting the answer's first bytes.

The API key is read from the environment variable the registration names, at the moment
a request is made; it is never stored, logged or put in an error message, and is masked in
everything the server answers (`Client.scrubbed`, `scrub`)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from checkpoints.errors import EndpointError, EndpointUnavailable
from clients.endpoint.options import EndpointSpec

log = logging.getLogger("lctx.endpoint")

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")
KEY_MASK = "***"
MIN_KEY = 8
T = TypeVar("T")

# The byte limit of an answer (`answer_limit`): fixed room for the JSON around it, then per token the
# request may generate (a token is a few bytes of text; \uXXXX escapes and a reasoning field's own
# copy fit in 32), per prompt token it asks scored (an entry of logprobs, ids and decoded text) and
# per character /tokenize counts or token /detokenize spells out. Generous: only a server that sends
# far more than it was asked for meets it.
ANSWER_SLACK = 256 << 10
BYTES_PER_NEW_TOKEN = 32
BYTES_PER_SCORED_TOKEN = 1024
BYTES_PER_TOKENIZED_CHAR = 16
BYTES_PER_DETOKENIZED_TOKEN = 128
GET_LIMIT = 8 << 20  # /v1/models, /version: a model list, a version
SHOWN = 200  # characters of a server's answer an error quotes


class Unusable(EndpointError):
    """An answer lctx cannot use as it is (larger than its request allows, JSON of the wrong
    shape): a server error, retried as a 5xx is."""


def shown(value: Any) -> str:
    """A server's answer (or a part of it) as an error quotes it: JSON, at most SHOWN characters."""
    try:
        text = json.dumps(value, ensure_ascii=False) if not isinstance(value, bytes) else value.decode(errors="replace")
    except (TypeError, ValueError):
        text = repr(value)
    return text[:SHOWN] + ("..." if len(text) > SHOWN else "")


def answer_limit(path: str, body: dict[str, Any] | None) -> int:
    """The most bytes lctx reads of the answer to `body` at `path`: ANSWER_SLACK plus the
    request's own budget (the tokens it may generate, the prompt tokens it asks scored, the
    text /tokenize counts, the tokens /detokenize spells out)."""
    if body is None:
        return GET_LIMIT
    params = body.get("sampling_params") if isinstance(body.get("sampling_params"), dict) else {}
    new = body.get("max_tokens") or params.get("max_new_tokens") or 0
    limit = ANSWER_SLACK + BYTES_PER_NEW_TOKEN * (new if isinstance(new, int) else 0)
    prompt = body.get("prompt", body.get("input_ids"))
    if body.get("prompt_logprobs") or body.get("echo") or body.get("return_logprob"):
        limit += BYTES_PER_SCORED_TOKEN * (len(prompt) if isinstance(prompt, list | str) else 0)
    if path.endswith("/tokenize") and isinstance(prompt, str):
        limit += BYTES_PER_TOKENIZED_CHAR * len(prompt)
    if path.endswith("/detokenize") and isinstance(body.get("tokens"), list):
        limit += BYTES_PER_DETOKENIZED_TOKEN * len(body["tokens"])
    return limit


def too_large(limit: int, first: bytes, forms: Sequence[str] = ()) -> Unusable:
    """The error of an answer past `limit` bytes, quoting its `first` bytes with the key masked."""
    for form in forms:
        first = first.replace(form.encode(), KEY_MASK.encode())
    return Unusable(f"the answer passed {limit:,} bytes, the most lctx reads of an answer to this request (its "
                    f"token budget with room): the server sent far more than it was asked for; it began {shown(first)}")


def bounded_response(response: httpx.Response, content: bytes) -> httpx.Response:
    """`response` with the body read (`content`, decoded): headers that described the wire form dropped."""
    headers = [(k, v) for k, v in response.headers.multi_items()
               if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")]
    return httpx.Response(response.status_code, headers=headers, content=content, request=response.request)


async def read_bounded(http: httpx.AsyncClient, method: str, url: str, body: dict[str, Any] | None,
                       limit: int, deadline_s: float, forms: Sequence[str] = ()) -> httpx.Response:
    """One exchange within `deadline_s` seconds in all (connect, headers, body; httpx.ReadTimeout
    past it) and at most `limit` bytes of body (decoded: a compressed answer counts as it
    unpacks; `Unusable` past it, quoting the first bytes with the key's `forms` masked, the
    connection closed, the rest never read)."""

    async def exchange() -> httpx.Response:
        async with http.stream(method, url, json=body) as response:
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                chunks.append(chunk)
                if size > limit:
                    raise too_large(limit, b"".join(chunks)[:SHOWN + 200], forms)
            return bounded_response(response, b"".join(chunks))

    try:
        async with asyncio.timeout(deadline_s):
            return await exchange()
    except TimeoutError:
        raise httpx.ReadTimeout(f"no whole answer within {deadline_s:g} s (timeout_s: the deadline of a "
                                "request, its body included)") from None


def read_bounded_sync(http: httpx.Client, method: str, url: str, body: dict[str, Any] | None, limit: int,
                      deadline_s: float, forms: Sequence[str] = ()) -> httpx.Response:
    """`read_bounded` for a synchronous client: the deadline is checked as each piece of the body
    arrives (the client's own read timeout bounds the wait for one), the limit the same."""
    started = time.monotonic()
    with http.stream(method, url, json=body) as response:
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            chunks.append(chunk)
            if size > limit:
                raise too_large(limit, b"".join(chunks)[:SHOWN + 200], forms)
            if time.monotonic() - started > deadline_s:
                raise httpx.ReadTimeout(f"no whole answer within {deadline_s:g} s (timeout_s: the deadline of a "
                                        "request, its body included)")
        return bounded_response(response, b"".join(chunks))


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


def allowed_endpoint_hosts() -> list[str]:
    """Hosts an endpoint may be on: LCTX_ENDPOINT_HOSTS (comma-separated, "*" for any), default loopback."""
    value = os.environ.get("LCTX_ENDPOINT_HOSTS", "")
    return [h.strip() for h in value.split(",") if h.strip()] or list(LOOPBACK_HOSTS)


def api_root(base_url: str) -> str:
    """The server's root (the base URL without its /v1): where /version and friends live."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


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
    """The JSON object of an answer that is not to be retried (EndpointError quoting the server
    otherwise; `Unusable`, retried, for JSON that is not an object)."""
    if response.status_code >= 400:
        raise EndpointError(f"{url} refused the request (HTTP {response.status_code}): {response.text[:300]}")
    try:
        answer = response.json()
    except ValueError as e:
        raise EndpointError(f"{url} answered with something that is not JSON: {response.text[:200]}") from e
    if not isinstance(answer, dict):
        raise Unusable(f"the answer is a JSON {type(answer).__name__}, not an object: {shown(answer)}")
    return answer


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

    async def post(self, path: str, body: dict[str, Any], root: bool = False,
                   read: Callable[[dict[str, Any]], T] | None = None) -> Any:
        """POST to the API root (`root`: the server's root, where /generate and /tokenize live);
        the answer's JSON object, or what `read` makes of it (`read` raising `Unusable` for an
        answer of the wrong shape: retried as a server error)."""
        async with self.semaphore:
            return await self._with_retries("POST", path, body, root, read)

    async def get(self, path: str, root: bool = False) -> httpx.Response:
        """A GET within the deadline and GET_LIMIT bytes (httpx.ReadTimeout, `Unusable` past them)."""
        url = (api_root(self.spec.base_url) if root else self.spec.base_url) + path
        return self.scrubbed(await read_bounded(self.http, "GET", url, None, GET_LIMIT, self.spec.timeout_s,
                                                 self._key_forms))

    async def _with_retries(self, method: str, path: str, body: dict[str, Any], root: bool = False,
                            read: Callable[[dict[str, Any]], T] | None = None) -> Any:
        url = (api_root(self.spec.base_url) if root else self.spec.base_url) + path
        limit = answer_limit(path, body)
        last, retry_after = "", None  # this request's own: concurrent requests do not share them
        unusable = False  # the last try was answered, with nothing lctx can use
        for attempt in range(self.spec.max_retries + 1):
            if attempt:
                self.retried += 1
                await asyncio.sleep(backoff(self.spec, attempt, retry_after))
            try:
                response = self.scrubbed(await read_bounded(self.http, method, url, body, limit, self.spec.timeout_s,
                                                            self._key_forms))
                if response.status_code not in RETRY_STATUS:
                    answer = answer_of(url, response)
                    return read(answer) if read is not None else answer
            except (httpx.TimeoutException, httpx.TransportError) as e:  # connect refused, reset, dropped, timed out
                last, retry_after, unusable = (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__), None, False
                log.warning("%s %s: %s (try %d of %d)", method, url, last, attempt + 1, self.spec.max_retries + 1)
                continue
            except Unusable as e:  # too large, or not the shape the request's answer has
                last, retry_after, unusable = str(e), None, True
                log.warning("%s %s: %s (try %d of %d)", method, url, last, attempt + 1, self.spec.max_retries + 1)
                continue
            last, unusable = f"HTTP {response.status_code}: {response.text[:200]}", False
            retry_after = response.headers.get("retry-after") if response.status_code in (429, 503) else None
            log.warning("%s %s: %s (try %d of %d)", method, url, last, attempt + 1, self.spec.max_retries + 1)
        what = f"gave no usable answer to {path}" if unusable else "did not answer"
        raise EndpointUnavailable(f"the server at {self.spec.base_url} {what} after "
                                  f"{self.spec.max_retries + 1} tries (last: {last}); finished samples are kept: "
                                  "start the server again (or fix it) and resume the job to send only the rest")
