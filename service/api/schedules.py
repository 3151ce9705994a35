"""/v1/schedules: cron expression, watch folders, suite: the nightly evaluation."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from service.api.deps import DispatcherDep, NameParam, Read, SettingsDep, StoreDep, Write, known_gpus
from service.core.paths import client_error, client_path
from service.schedules import ScheduleTicker, create_schedule
from service.schemas import JobPlan, ScheduleCheckpoint, ScheduleCreate, ScheduleOut, ScheduleRun, errors
from service.views import schedule_out

router = APIRouter(prefix="/v1/schedules", tags=["schedules"], responses=errors(400, 403, 404, 409))


@router.post("", status_code=status.HTTP_201_CREATED, dependencies=Write, response_model=ScheduleOut)
def add_schedule(body: ScheduleCreate, store: StoreDep, settings: SettingsDep,
                 dispatcher: DispatcherDep) -> ScheduleOut:
    """Every time `cron` comes due, checkpoints in the watch folders are evaluated with
    the suite, once per checkpoint fingerprint. The suite is refused now for what a job of it
    would be refused for."""
    from service.cost import plan_job

    gpus = known_gpus(dispatcher)  # each job a schedule makes is checked against the cluster when claimed
    row = create_schedule(store, settings, body, gpus)
    plan = JobPlan.model_validate({**plan_job(list(body.suite.tasks), settings, None, gpus)
                                   .as_dict(), "queued": False})
    return schedule_out(row, settings).model_copy(update={"plan": plan})


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


@router.post("/{name}/run", dependencies=Write, response_model=ScheduleRun)
def run_schedule(name: NameParam, store: StoreDep, settings: SettingsDep, dispatcher: DispatcherDep) -> ScheduleRun:
    """Tick the schedule now, whatever its cron says (its next run is unchanged): each checkpoint
    folder of its watch folders, with the job submitted for it or why it was skipped (the same
    fingerprint already run with this suite, by this schedule or another; a refusal)."""
    schedule = store.get_schedule(name)
    outcomes = ScheduleTicker(settings, store, on_submit=dispatcher.wake if dispatcher else None).run_now(name)
    rows = [ScheduleCheckpoint(folder=client_path(o.folder, settings), checkpoint=o.checkpoint,
                               job=o.job.id if o.job else None,
                               skipped=client_error(o.skipped, settings) if o.skipped else None,
                               seconds=o.seconds, basis=o.basis) for o in outcomes]
    note = None if rows else (f"no checkpoint folder (a folder with a config.json, or its sub-folders that have one) "
                              f"in the watch folders {', '.join(client_path(w, settings) for w in schedule.watch)}; "
                              "save a checkpoint there and run the schedule again")
    known = [r.seconds for r in rows if r.job is not None and r.seconds is not None]
    return ScheduleRun(schedule=name, checkpoints=rows, submitted=sum(r.job is not None for r in rows), note=note,
                       seconds=round(sum(known), 1) if known else None)
