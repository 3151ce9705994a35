"""The FastAPI application: `create_app(settings)` wires the store, the dispatcher's
supervisor (jobs run from a process of its own: service/dispatcher.py), the scheduler and
metrics in `lifespan`, and maps the error hierarchy to HTTP in one place."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from evaluators.registry import registry
from service import web
from service.api import checkpoints, endpoints, health, jobs, leaderboard, results, schedules
from service.errors import ServiceError
from service.metrics import Metrics
from service.redact import install_log_redaction, redact
from service.schedules import Scheduler, ensure_configured_schedule
from service.schemas import errors
from service.settings import Settings, get_settings
from service.store import Store
from service.supervisor import DispatcherSupervisor
from service.views import client_text

log = logging.getLogger("lctx.api")

def description() -> str:
    """The API's description, its task list read from the evaluators' registry."""
    tasks = "\n".join(f"- `{name}`: {task.summary}" for name, task in registry().items())
    return ("Long-context evaluation of language models: register a checkpoint, submit a job of tasks, poll "
            "it, read results, samples and plots. Mutating requests need `Authorization: Bearer <token>` when "
            f"the server has `LCTX_API_TOKEN`.\n\nTasks:\n{tasks}")


def truthful_openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """The schema as this server behaves: bearer auth (and its 401) only on the operations
    that check a token, which is none without LCTX_API_TOKEN and only the mutating ones
    unless LCTX_PROTECT_READS; no 422 where nothing is validated."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    for operations in schema.get("paths", {}).values():
        for method, op in operations.items():
            secured = "security" in op and settings.token is not None and (method != "get" or settings.protect_reads)
            if not secured:
                op.pop("security", None)
                op.get("responses", {}).pop("401", None)
            if not op.get("parameters") and "requestBody" not in op:
                op.get("responses", {}).pop("422", None)
    if settings.token is None:
        schema.get("components", {}).pop("securitySchemes", None)
    app.openapi_schema = schema
    return schema


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    install_log_redaction()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.prepare()
        store = Store(settings.database)
        store.upgrade()  # a database newer than this code stops the start here
        try:
            ensure_configured_schedule(store, settings)  # LCTX_NIGHTLY_*: the deployment's nightly run
        except Exception:
            store.close()
            raise
        app.state.store = store
        app.state.metrics = Metrics(store)
        dispatcher = DispatcherSupervisor(settings, store, app.state.metrics) if settings.executor else None
        app.state.dispatcher = dispatcher
        app.state.scheduler = Scheduler(
            settings, store, on_submit=dispatcher.wake if dispatcher else None
        ) if settings.scheduler else None
        if dispatcher:
            try:
                dispatcher.start()  # a live server holding this replica id stops the start here
            except Exception:
                store.close()
                raise
        if app.state.scheduler:
            app.state.scheduler.start()
        try:
            yield
        finally:
            if app.state.scheduler:
                app.state.scheduler.stop()
            if dispatcher:
                dispatcher.stop()
            store.close()

    # FastAPIOffline: /docs and /redoc load Swagger UI and ReDoc from the app itself, not a CDN
    # (an air-gapped GPU node has no CDN); its assets are under /static-offline-docs.
    app = FastAPIOffline(title="lctx", version="0.1.0", description=description(), lifespan=lifespan,
                         swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from swagger.io
                         responses={**errors(401, 422), 503: errors(503)[503]})
    app.state.settings = settings
    app.openapi = lambda: truthful_openapi(app, settings)  # type: ignore[method-assign]
    for module in (checkpoints, endpoints, jobs, results, leaderboard, schedules, health):
        app.include_router(module.router)
    web.mount(app)  # the dashboard at /, its assets under /ui

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"detail": client_text(redact(exc.message), settings), "code": exc.code}, status_code=exc.status,
                            headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Starlette's own refusals in our error shape; a 405's `Allow` lists every method of
        the path (Starlette lists only those of the first route that matched it)."""
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            methods = {m for route in app.routes if isinstance(route, APIRoute)
                       and route.path_regex.match(request.url.path) for m in route.methods or ()}
            headers["Allow"] = ", ".join(sorted(methods))
            detail = f"{request.method} is not allowed on {request.url.path}; it allows {headers['Allow']}"
        else:
            detail = str(exc.detail)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        return JSONResponse({"detail": detail, "code": code}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        return JSONResponse({"detail": errors, "code": "invalid"}, status_code=422)

    @app.exception_handler(OperationalError)
    async def database_unavailable(request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc.orig)
        return JSONResponse({"detail": "the database is unavailable or busy; retry shortly", "code": "not_ready"},
                            status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        job = request.path_params.get("job_id")
        log.exception("unexpected error on %s %s (job %s)", request.method, request.url.path, job)
        return JSONResponse({"detail": "internal error; it has been logged", "code": "internal"}, status_code=500)

    return app
