"""Dependencies shared by the routers: the store, settings and dispatcher of the running
app, and bearer-token auth (constant-time compare). They are `async` because they never
block: a sync dependency costs a thread-pool hop on every request."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.core.errors import Unauthorized
from service.core.metrics import Metrics
from service.core.settings import Settings
from service.runner.supervisor import DispatcherSupervisor
from service.schemas import JOB_ID_PATTERN, NAME_PATTERN
from service.store import Store

_bearer = HTTPBearer(auto_error=False, description="LCTX_API_TOKEN, when the service has one")


async def get_store(request: Request) -> Store:
    return request.app.state.store


async def get_app_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_dispatcher(request: Request) -> DispatcherSupervisor | None:
    """The supervisor of the dispatcher process (None: this server runs no jobs, LCTX_EXECUTOR=false)."""
    return request.app.state.dispatcher


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


def token_refusal(settings: Settings, scheme: str | None, credentials: str | None) -> Unauthorized | None:
    """Why a request's credentials do not pass (None: they do, or the service has no token).
    The one check of the routes' dependencies and of the guard that runs before a body is read."""
    token = settings.token
    if token is None:
        return None
    if scheme is None or credentials is None or scheme.lower() != "bearer":
        return Unauthorized("this service needs `Authorization: Bearer <token>` (the server's LCTX_API_TOKEN)")
    if not secrets.compare_digest(credentials.encode(), token.encode()):
        return Unauthorized("the bearer token does not match the server's LCTX_API_TOKEN")
    return None


def _check(settings: Settings, creds: HTTPAuthorizationCredentials | None) -> None:
    refusal = token_refusal(settings, creds.scheme if creds else None, creds.credentials if creds else None)
    if refusal is not None:
        raise refusal


async def require_write(request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    _check(request.app.state.settings, creds)


async def require_read(request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    settings = request.app.state.settings
    if settings.protect_reads:
        _check(settings, creds)


CLUSTER_WAIT_S = 10.0  # how long a submission waits for the dispatcher's first report after start


def known_gpus(dispatcher: DispatcherSupervisor | None) -> int | None:
    """The cluster's GPUs as the dispatcher last reported them, without waiting (None: not
    reported yet, or this server runs no dispatcher)."""
    return None if dispatcher is None else dispatcher.gpus()


def cluster_gpus(dispatcher: DispatcherSupervisor | None) -> int | None:
    """The cluster's GPUs for a check that depends on them (a backend, the dtype weights load
    in), asked once everything that does not depend on them has passed: right after start, waits
    up to CLUSTER_WAIT_S for the dispatcher's first report, then None (not known yet). A job
    queued then is checked against the resources when the executor claims it
    (`service.submission.check_resources`): never a 503 for a valid job in a service's first
    seconds, never a 503 before a bad request's 4xx (issue #60). None too where this server runs
    no dispatcher (LCTX_EXECUTOR=false: the cluster is another replica's and unknown here)."""
    if dispatcher is None:
        return None
    return dispatcher.wait_gpus(CLUSTER_WAIT_S)


StoreDep = Annotated[Store, Depends(get_store)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
DispatcherDep = Annotated[DispatcherSupervisor | None, Depends(get_dispatcher)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
JobId = Annotated[str, Path(pattern=JOB_ID_PATTERN, description="job id from POST /v1/jobs")]
NameParam = Annotated[str, Path(pattern=NAME_PATTERN)]
Write = [Depends(require_write)]
Read = [Depends(require_read)]
