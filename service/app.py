"""The FastAPI application: `create_app(settings)` wires the store, the dispatcher's
supervisor (jobs run from a process of its own: service/runner/dispatcher.py), the scheduler and
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
from fastapi_offline import FastAPIOffline
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Mount, Route

from evaluators.registry import registry
from service import web
from service.api import (
    checkpoints,
    endpoints,
    health,
    jobs,
    leaderboard,
    regressions,
    results,
    schedules,
    uploads,
)
from service.api.guard import BodyGuard
from service.core import guide
from service.core.errors import Missing, ServiceError
from service.core.metrics import Metrics
from service.core.paths import client_error
from service.core.redact import install_log_redaction
from service.core.settings import Settings, get_settings
from service.runner.supervisor import DispatcherSupervisor
from service.schedules import ScheduleTicker, ensure_configured_schedule
from service.schemas import errors, validation_hint
from service.store import Store
from service.upgrades import Upgrade

log = logging.getLogger("lctx.api")


# How to find or make each kind of stored resource over the API: what a 404 from the store adds
# (the store itself names no route).
FIND = {"checkpoint": "register it with POST /v1/checkpoints", "endpoint": "register it with POST /v1/endpoints",
        "job": "list jobs with GET /v1/jobs", "schedule": "list schedules with GET /v1/schedules"}


def answer_text(exc: ServiceError) -> str:
    """An error's message as the API answers it: a missing resource says where to find one."""
    if isinstance(exc, Missing) and exc.kind in FIND:
        return f"{exc.message}; {FIND[exc.kind]}"
    return exc.message

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
            if "requestBody" in op:  # refused before the body is read (service/api/guard.py)
                for code, answer in errors(413, 415).items():
                    op.setdefault("responses", {})[str(code)] = {
                        "description": answer["description"],
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}}
    if settings.token is None:
        schema.get("components", {}).pop("securitySchemes", None)
    app.openapi_schema = schema
    return schema


def allowed_methods(routes: list[BaseRoute], path: str) -> set[str]:
    """The methods some route answers on `path`: a route's own, GET and HEAD under a mount
    (the dashboard's and the docs' static files). A route whose path is `path` itself is
    that resource (/v1/checkpoints/pull), not the templated one it also matches."""
    matching = [r for r in routes if isinstance(r, Route | Mount) and r.path_regex.match(path)]
    literal = [r for r in matching if isinstance(r, Route) and r.path == path]
    methods: set[str] = set()
    for route in literal or matching:
        methods |= set(route.methods or ()) if isinstance(route, Route) else {"GET", "HEAD"}
    return methods


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    install_log_redaction(settings.secrets)

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
        app.state.metrics = Metrics(store, settings.results)
        dispatcher = DispatcherSupervisor(settings, store, app.state.metrics) if settings.executor else None
        app.state.dispatcher = dispatcher
        app.state.scheduler = ScheduleTicker(
            settings, store, on_submit=dispatcher.wake if dispatcher else None
        ) if settings.scheduler else None

        def start_work() -> None:
            if dispatcher:
                dispatcher.start()  # a live server holding this replica id stops the start here
            if app.state.scheduler:
                app.state.scheduler.start()

        # an upgrade's data migrations (service/upgrades.py) run while the API answers /healthz with their
        # progress and /readyz 503; jobs run once they are done
        app.state.upgrade = Upgrade(store, settings)
        if app.state.upgrade.pending():
            app.state.upgrade.start(then=start_work)
        else:
            try:
                start_work()
            except Exception:
                store.close()
                raise
        try:
            yield
        finally:
            app.state.upgrade.stop()  # after its batch under way: the next start resumes there
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
    routers = [m.router for m in (checkpoints, endpoints, jobs, uploads, results, leaderboard, regressions, schedules,
                                  health)]
    for router in routers:
        app.include_router(router)
    web.mount(app)  # the dashboard at /, its assets under /ui
    guide.mount(app, settings.guide_dir)  # the documentation site `make docs` builds
    # Every route with its full path, read from the routers themselves: FastAPI >= 0.165 keeps an
    # included router as one opaque entry of app.routes, so app.routes alone does not list them.
    routes = [r for r in app.router.routes if isinstance(r, Route | Mount)] + \
        [r for router in routers + [web.router] for r in router.routes]
    app.add_middleware(BodyGuard, settings=settings, routes=routes)  # token and type before the body

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        headers = {401: {"WWW-Authenticate": "Bearer"}, 503: {"Retry-After": "2"}}.get(exc.status)
        detail = client_error(answer_text(exc), settings)
        return JSONResponse({"detail": detail, "code": exc.code}, status_code=exc.status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Starlette's own refusals in our error shape; a 405's `Allow` lists every method of
        the path (Starlette lists only those of the first route that matched it)."""
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            methods = allowed_methods(routes, request.url.path)
            headers["Allow"] = ", ".join(sorted(methods))
            detail = f"{request.method} is not allowed on {request.url.path}; it allows {headers['Allow']}"
        else:
            detail = str(exc.detail)
        code = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}.get(exc.status_code, "bad_request")
        return JSONResponse({"detail": detail, "code": code}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{**{k: v for k, v in e.items() if k in ("loc", "msg", "type")}, "msg": validation_hint(e, request.url.path)}
                  for e in exc.errors()]
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
