"""The HTTP side of a served model: which URLs lctx may call (`check_base_url`, the
operator's allow-list) and one retrying client (`Client`: bounded concurrency, a timeout,
a 429 / 5xx or a dropped connection retried with exponential backoff and jitter; a server
that stays down raises `EndpointUnavailable` naming the URL and the last error).

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
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx

from checkpoints.errors import EndpointError, EndpointUnavailable
from clients.endpoint.options import EndpointSpec

log = logging.getLogger("lctx.endpoint")

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")
KEY_MASK = "***"
MIN_KEY = 8


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
    """The JSON of an answer that is not to be retried (EndpointError quoting the server otherwise)."""
    if response.status_code >= 400:
        raise EndpointError(f"{url} refused the request (HTTP {response.status_code}): {response.text[:300]}")
    try:
        return response.json()
    except ValueError as e:
        raise EndpointError(f"{url} answered with something that is not JSON: {response.text[:200]}") from e


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
