"""The FastAPI application: `create_app(settings)` wires the store, executor, scheduler
and metrics in `lifespan`, and maps the error hierarchy to HTTP in one place."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError

from service.api import checkpoints, health, jobs, leaderboard, results, schedules
from service.errors import ServiceError
from service.execution import Executor
from service.metrics import Metrics
from service.schedules import Scheduler, ensure_configured_schedule
from service.settings import Settings, get_settings
from service.store import Store

log = logging.getLogger("lctx.api")

DESCRIPTION = """Long-context evaluation of language models: register a checkpoint, submit a job
(passkey, needle grid, LongBench, SCROLLS, perplexity, attention diagnostics), poll it, read
results, samples and plots. Mutating requests need `Authorization: Bearer <token>` when the
server has `LCTX_API_TOKEN`."""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

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
        app.state.executor = Executor(settings, store, app.state.metrics) if settings.executor else None
        app.state.scheduler = Scheduler(
            settings, store, on_submit=app.state.executor.wake if app.state.executor else None
        ) if settings.scheduler else None
        if app.state.executor:
            app.state.executor.start()
        if app.state.scheduler:
            app.state.scheduler.start()
        try:
            yield
        finally:
            if app.state.scheduler:
                app.state.scheduler.stop()
            if app.state.executor:
                app.state.executor.stop()
            store.close()

    app = FastAPI(title="lctx", version="0.1.0", description=DESCRIPTION, lifespan=lifespan,
                  responses={401: {"description": "missing or wrong bearer token"},
                             422: {"description": "invalid request"}})
    app.state.settings = settings
    for module in (checkpoints, jobs, results, leaderboard, schedules, health):
        app.include_router(module.router)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"detail": exc.message, "code": exc.code}, status_code=exc.status, headers=headers)

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
