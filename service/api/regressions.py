"""GET /v1/regressions: the drops nightly schedules found (service/regressions.py), newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import Read, StoreDep
from service.schemas import JOB_ID_PATTERN, NO_NUL_PATTERN, TASK_PATTERN, RegressionOut, errors

router = APIRouter(tags=["regressions"])


@router.get("/v1/regressions", dependencies=Read, response_model=list[RegressionOut], responses=errors(422))
def list_regressions(store: StoreDep,
                     schedule: Annotated[str | None, Query(max_length=128, pattern=NO_NUL_PATTERN)] = None,
                     lineage: Annotated[str | None, Query(max_length=1024, pattern=NO_NUL_PATTERN)] = None,
                     task: Annotated[str | None, Query(pattern=TASK_PATTERN)] = None,
                     job: Annotated[str | None, Query(pattern=JOB_ID_PATTERN)] = None,
                     limit: Annotated[int, Query(ge=1, le=1000)] = 50,
                     offset: Annotated[int, Query(ge=0)] = 0) -> list[RegressionOut]:
    """Each drop of a watched column (a task's headline, its points along length) between a
    lineage's new checkpoint and the previous one (or the schedule's pinned baseline) whose paired
    95% interval excludes zero and which reached the schedule's threshold; filtered by schedule,
    lineage (the checkpoint's folder as job paths show it), task or the job that dropped."""
    rows = store.list_regressions(schedule=schedule, lineage=lineage, task=task, job=job, limit=limit, offset=offset)
    return [RegressionOut.model_validate(r) for r in rows]
