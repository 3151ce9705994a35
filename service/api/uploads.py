"""/v1/uploads: a run made elsewhere (`lctx eval`) recorded as a job (`lctx upload`)."""

from __future__ import annotations

from fastapi import APIRouter, status

from service.api.deps import SettingsDep, StoreDep, Write
from service.schemas import JobOut, UploadCreate, errors
from service.uploads import record_upload
from service.views import job_out

router = APIRouter(prefix="/v1/uploads", tags=["jobs"], responses=errors(400, 403, 404, 409))


@router.post("", status_code=status.HTTP_201_CREATED, dependencies=Write, response_model=JobOut)
def upload_run(body: UploadCreate, store: StoreDep, settings: SettingsDep) -> JobOut:
    """Record the results and samples of `lctx eval --out OUT` as a succeeded job of a registered
    checkpoint, marked `ran_elsewhere`: the leaderboard, the dashboard and comparisons show it as
    any job. Refused (409) when the run's weights are not the checkpoint's (fingerprints differ),
    422 when a task, an entry or a sample does not read as this service's."""
    return job_out(record_upload(store, settings, body), settings)
