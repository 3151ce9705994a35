"""/healthz (the process answers; `upgrading` while an upgrade's data migrations run: done, total,
rate, ETA), /readyz (no upgrade under way, store reachable, the dispatcher process connected to
Ray and reporting), /metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError

from service.api.deps import DispatcherDep, MetricsDep, Read, StoreDep
from service.core.errors import NotReady
from service.schemas import errors

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz(request: Request) -> dict[str, Any]:
    upgrading = request.app.state.upgrade.status()
    return {"status": "ok"} | ({"upgrading": upgrading} if upgrading else {})


@router.get("/readyz", responses=errors(503))
def readyz(request: Request, store: StoreDep, dispatcher: DispatcherDep) -> dict[str, str]:
    if problem := request.app.state.upgrade.not_ready():
        raise NotReady(problem)
    try:
        store.ping()
    except SQLAlchemyError as e:
        raise NotReady(f"database unreachable: {type(e).__name__}") from e
    if dispatcher is not None and (problem := dispatcher.not_ready()):
        raise NotReady(problem)
    return {"status": "ready", "executor": "on" if dispatcher is not None else "off"}


@router.get("/metrics", dependencies=Read, response_class=Response,
            responses={200: {"content": {"text/plain": {}}}})
def metrics(m: MetricsDep, dispatcher: DispatcherDep) -> Response:
    if dispatcher is not None:
        dispatcher.observe_finished()  # jobs end in the dispatcher process: their durations, up to now
    return Response(m.render(), media_type=CONTENT_TYPE_LATEST)
