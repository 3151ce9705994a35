"""/v1/jobs: submit, list, get, cancel."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from service.api.deps import (
    DispatcherDep,
    JobId,
    Read,
    SettingsDep,
    StoreDep,
    Write,
    cluster_gpus,
    known_gpus,
)
from service.core.names import NAME_PATTERN
from service.core.status import FINAL
from service.disk import disk_of
from service.schemas import NO_NUL_PATTERN, TASK_PATTERN, JobCreate, JobList, JobOut, JobPlan, Status, errors
from service.submission import data_warnings, submit
from service.views import job_out

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=errors(400, 403, 404, 409))
log = logging.getLogger("lctx.api")


@router.post("", status_code=status.HTTP_202_ACCEPTED, dependencies=Write, response_model=JobOut | JobPlan,
             responses={200: {"model": JobPlan, "description": "the plan of a dry run: nothing queued"}})
def submit_job(body: JobCreate, store: StoreDep, settings: SettingsDep, dispatcher: DispatcherDep,
               dry_run: Annotated[bool, Query(description="plan the job (samples, tokens, estimated time) and "
                                                      "refuse it as a submission would, without queuing it")] = False,
               ) -> Response | JobOut:
    """Queue an evaluation; the job is committed to the store before this answers. The answer's
    `plan` gives its samples, tokens and estimated time on this service's hardware, with warnings
    (a job over 10 minutes); a job estimated over LCTX_MAX_JOB_SECONDS is refused (422). What is
    wrong with its data but does not stop it (files from before a benchmark's fix) is answered in
    `warnings`. Bad input is refused before anything waits for the cluster; a valid job submitted
    while the cluster is starting is queued and checked against its resources when claimed."""
    served = body.endpoint is not None  # a served model's job needs nothing of the cluster's
    job, cost = submit(store, settings, body, None if served else known_gpus(dispatcher), dry_run=dry_run,
                       await_cluster=None if served else lambda: cluster_gpus(dispatcher))
    plan = JobPlan.model_validate({**cost.as_dict(), "queued": job is not None})
    if job is None:
        return Response(plan.model_dump_json(), media_type="application/json", status_code=status.HTTP_200_OK)
    if dispatcher is not None:
        dispatcher.wake()
    warnings = data_warnings(job.tasks, settings)
    for warning in warnings:
        log.warning("job %s: %s", job.id, warning)
    return job_out(job, settings).model_copy(update={"plan": plan, "warnings": warnings})


@router.get("", dependencies=Read, response_model=JobList)
def list_jobs(
    store: StoreDep,
    settings: SettingsDep,
    status: Status | None = None,
    checkpoint: Annotated[str | None, Query(max_length=4096, pattern=NO_NUL_PATTERN)] = None,
    task: Annotated[str | None, Query(pattern=TASK_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    schedule: Annotated[str | None, Query(pattern=NAME_PATTERN, description="jobs submitted by this schedule")] = None,
) -> JobList:
    rows, total = store.list_jobs(status, checkpoint, task, limit, offset, schedule)
    return JobList(items=[job_out(r, settings) for r in rows], total=total, limit=limit, offset=offset,
                   by_status=store.count_listed(status, checkpoint, task, schedule))


@router.get("/{job_id}", dependencies=Read, response_model=JobOut)
async def get_job(job_id: JobId, store: StoreDep, settings: SettingsDep) -> Response:
    """Status, per-task progress, timestamps and error of one job.

    The hot path of pollers, so it runs on the event loop: a primary-key read takes well
    under a millisecond (SQLite WAL readers never wait for writers), less than the
    thread-pool hop a sync endpoint costs; and the body is serialised once, without
    FastAPI re-validating it."""
    job = store.get_job(job_id)
    out = job_out(job, settings)
    if job.status in FINAL:  # what its files take (a handful of directory entries; none while it runs)
        out = out.model_copy(update={"disk": disk_of(settings, job.id)})
    return Response(out.model_dump_json(), media_type="application/json")


@router.post("/{job_id}/cancel", dependencies=Write, response_model=JobOut)
def cancel_job(job_id: JobId, store: StoreDep, settings: SettingsDep, dispatcher: DispatcherDep) -> JobOut:
    """Cancel a queued or running job; a running job's Ray task is stopped."""
    job = store.cancel(job_id)
    if dispatcher is not None:
        dispatcher.wake()
    return job_out(job, settings)


@router.post("/{job_id}/resume", dependencies=Write, response_model=JobOut)
def resume_job(job_id: JobId, store: StoreDep, settings: SettingsDep, dispatcher: DispatcherDep) -> JobOut:
    """Queue a failed or cancelled job again: it goes on from what it recorded (finished
    tasks kept, recorded samples not run again), e.g. after the disk had no room."""
    job = store.resume(job_id)
    if dispatcher is not None:
        dispatcher.wake()
    return job_out(job, settings)
