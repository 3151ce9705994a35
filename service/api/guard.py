"""What is refused before a request body is read: a write without the service's token
(401), a body announced larger than LCTX_MAX_BODY_MB (413) and a body that is not JSON
where a route takes JSON (415). FastAPI reads and parses a route's body before it solves
the route's dependencies, so without this a 64 MiB POST with no token was read whole
(and its JSON parsed) only to be answered 401. A body sent without a Content-Length
(chunked) is counted as it streams: 413 once it passes the limit."""

from __future__ import annotations

from fastapi import HTTPException
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.deps import token_refusal
from service.core.settings import Settings

READS = frozenset({"GET", "HEAD", "OPTIONS"})


def is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def too_large(settings: Settings) -> str:
    return (f"the request body is larger than the {settings.max_body_mb:g} MiB this service reads "
            "(LCTX_MAX_BODY_MB); send a smaller request")


def refusal(status: int, detail: str, code: str, **headers: str) -> JSONResponse:
    """A refusal in the API's error shape; the connection is closed (its body is not read)."""
    return JSONResponse({"detail": detail, "code": code}, status_code=status, headers={**headers, "Connection": "close"})


class BodyGuard:
    """ASGI middleware: for a request to a write route (every non-GET route of the API
    needs the token: tests/service/api/test_guard.py checks that), the token is checked
    from the headers alone and a body's content type before anything is read."""

    def __init__(self, app: ASGIApp, settings: Settings, routes: list[BaseRoute]) -> None:
        self.app, self.settings, self.routes = app, settings, routes

    def _route(self, scope: Scope) -> APIRoute | None:
        for route in self.routes:
            if isinstance(route, APIRoute) and route.matches(scope)[0] == Match.FULL:
                return route
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in READS:
            return await self.app(scope, receive, send)
        route = self._route(scope)
        if route is None:  # 404 and 405 are the router's to answer
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        unauthorized = token_refusal(self.settings, scheme or None, credentials.strip() or None)
        if unauthorized is not None:
            response = refusal(unauthorized.status, unauthorized.message, unauthorized.code,
                               **{"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        limit = int(self.settings.max_body_mb * 2**20)
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            return await refusal(413, too_large(self.settings), "too_large")(scope, receive, send)
        has_body = length not in ("", "0") or "transfer-encoding" in headers
        if route.body_field is not None and has_body and not is_json(headers.get("content-type", "")):
            given = headers.get("content-type") or "no Content-Type"
            detail = f"this endpoint takes a JSON body (Content-Type: application/json); got {given}"
            return await refusal(415, detail, "unsupported_media_type")(scope, receive, send)
        return await self.app(scope, capped(receive, limit, self.settings), send)


def capped(receive: Receive, limit: int, settings: Settings) -> Receive:
    """`receive` that stops a body sent without a Content-Length (chunked) once it passes
    `limit`: FastAPI re-raises an HTTPException met while reading a body, so the 413 is
    answered in the API's error shape."""
    seen = 0

    async def receive_capped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, too_large(settings))
        return message

    return receive_capped
