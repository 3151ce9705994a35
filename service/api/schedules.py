"""/v1/schedules: cron expression, watch folders, suite: the nightly evaluation."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from service.api.deps import DispatcherDep, NameParam, Read, SettingsDep, StoreDep, Write, cluster_gpus
from service.schedules import create_schedule
from service.schemas import ScheduleCreate, ScheduleOut, errors
from service.views import schedule_out

router = APIRouter(prefix="/v1/schedules", tags=["schedules"], responses=errors(400, 403, 404, 409))


@router.post("", status_code=status.HTTP_201_CREATED, dependencies=Write, response_model=ScheduleOut)
def add_schedule(body: ScheduleCreate, store: StoreDep, settings: SettingsDep,
                 dispatcher: DispatcherDep) -> ScheduleOut:
    """Every time `cron` comes due, checkpoints in the watch folders are evaluated with
    the suite, once per checkpoint fingerprint. The suite is refused now for what a job of it
    would be refused for."""
    return schedule_out(create_schedule(store, settings, body, cluster_gpus(dispatcher)), settings)


@router.get("", dependencies=Read, response_model=list[ScheduleOut])
def list_schedules(store: StoreDep, settings: SettingsDep) -> list[ScheduleOut]:
    return [schedule_out(r, settings) for r in store.list_schedules()]


@router.get("/{name}", dependencies=Read, response_model=ScheduleOut)
def get_schedule(name: NameParam, store: StoreDep, settings: SettingsDep) -> ScheduleOut:
    return schedule_out(store.get_schedule(name), settings)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, dependencies=Write)
def delete_schedule(name: NameParam, store: StoreDep) -> Response:
    store.delete_schedule(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
