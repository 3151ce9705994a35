"""/v1/jobs/{id}/results, /samples (streamed), /prompt (one sample's prompt), /plots/{name}.png."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, Response, StreamingResponse

from evaluators.samplelog import sample_files
from evaluators.suite import task_keys
from service.api.deps import JobId, Read, SettingsDep, StoreDep
from service.core.errors import Conflict, NotFound
from service.core.layout import job_dir, job_results, task_dir, task_plots
from service.core.names import NAME_PATTERN
from service.core.paths import child
from service.core.status import CANCELLED, FAILED, SUCCEEDED
from service.prompts import find_record, rebuild_prompt
from service.retention import pruned, refuse_if_pruned
from service.runner.results import partial_results
from service.schemas import NO_NUL_PATTERN, TASK_PATTERN, SamplePrompt, errors
from service.store import JobRow
from service.views import client_results

router = APIRouter(prefix="/v1/jobs/{job_id}", tags=["results"], responses=errors(404, 409, 410))


@router.get("/results", dependencies=Read, responses={200: {"content": {"application/json": {}}}})
def get_results(job_id: JobId, store: StoreDep, settings: SettingsDep) -> Response:
    """The job's results JSON once it has succeeded; for a failed or cancelled job, what
    finished (`partial: true`, with its `error`): the tasks that completed and the
    recorded samples of the one that did not, aggregated."""
    job = store.get_job(job_id)
    folder = job_dir(settings, job.id)
    path = job_results(settings, job.id)
    if job.status == SUCCEEDED and path.is_file():
        body = _plot_urls(client_results(json.loads(path.read_bytes()), settings, folder), job.id)
        record = pruned(settings, job.id)
        if record is not None:  # its samples and plots are gone: said, and the plots not offered
            body = {**body, "pruned": record, "plots": []}
    elif job.status in (FAILED, CANCELLED):
        body = client_results(partial_results(settings, job), settings, folder)
    else:
        raise Conflict(f"job {job.id} is {job.status}; results are served once it has ended "
                       f"(its samples so far: GET /v1/jobs/{job.id}/samples)")
    return Response(json.dumps(body, allow_nan=False), media_type="application/json")


def _plot_urls(body: dict[str, Any], job_id: str) -> dict[str, Any]:
    """Each plot of the results with the URL that serves it (results.json names a plot by its
    task and name; one written before kept a URL of its own, the same one)."""
    if isinstance(body.get("plots"), list):
        body["plots"] = [{**p, "url": str(router.url_path_for("get_plot", job_id=job_id, name=p["name"]))}
                         if isinstance(p, dict) and isinstance(p.get("name"), str) else p for p in body["plots"]]
    return body


def _sample_files(dirs: list[Path]) -> Iterator[bytes]:
    """Each task's `samples.jsonl`, then the files of its running units (read as they grow)."""
    for f in (f for d in dirs for f in sample_files(d)):
        try:
            fh = f.open("rb")
        except FileNotFoundError:  # a unit's file folded into samples.jsonl meanwhile
            continue
        with fh:
            for line in fh:
                if line.endswith(b"\n"):  # a record still being written is left for the next read
                    yield line


def _task_key(job: JobRow, task: str) -> tuple[str, dict[str, Any]]:
    """A task key of the job and its spec, or 404 naming the job's tasks."""
    keys = task_keys(job.tasks)
    if task not in keys:
        raise NotFound(f"job {job.id} has no task {task!r}; its tasks: {', '.join(keys)}")
    return task, job.tasks[keys.index(task)]


@router.get("/samples", dependencies=Read, responses={200: {"content": {"application/x-ndjson": {}}}})
def get_samples(job_id: JobId, store: StoreDep, settings: SettingsDep,
                task: Annotated[str | None, Query(pattern=TASK_PATTERN)] = None) -> StreamingResponse:
    """Per-sample records as JSON lines, streamed; available while the job runs."""
    job = store.get_job(job_id)
    refuse_if_pruned(settings, job.id, "per-sample records")
    keys = task_keys(job.tasks) if task is None else [_task_key(job, task)[0]]
    dirs = [task_dir(settings, job.id, k) for k in keys]
    return StreamingResponse(_sample_files(dirs), media_type="application/x-ndjson")


@router.get("/prompt", dependencies=Read, response_model=SamplePrompt)
def get_prompt(job_id: JobId, task: Annotated[str, Query(pattern=TASK_PATTERN, examples=["passkey"])],
               sample: Annotated[str, Query(min_length=1, max_length=256, pattern=NO_NUL_PATTERN,
                                            examples=["passkey/len=128/trial=0"])],
               store: StoreDep, settings: SettingsDep) -> SamplePrompt:
    """The prompt one recorded sample was given, rebuilt from its record, with the needle
    it hides and where (passkey and needle samples; available while the job runs)."""
    job = store.get_job(job_id)
    _, spec = _task_key(job, task)
    refuse_if_pruned(settings, job.id, "per-sample records")
    record = find_record(task_dir(settings, job.id, task), sample)
    prompt, needle = rebuild_prompt(spec, record, settings.data_dir)
    return SamplePrompt(task=task, id=sample, prompt=prompt, needle=needle, needle_start=prompt.find(needle))


@router.get("/plots/{name}.png", dependencies=Read, responses={200: {"content": {"image/png": {}}}},
            response_class=FileResponse)
def get_plot(job_id: JobId, name: Annotated[str, PathParam(pattern=NAME_PATTERN)], store: StoreDep, settings: SettingsDep) -> FileResponse:
    """A plot written by one of the job's evaluators (listed under `plots` in the results)."""
    job = store.get_job(job_id)
    for key in task_keys(job.tasks):
        plots = task_plots(settings, job.id, key)
        path = child(plots, f"{name}.png", "plot name")
        if path.is_file():
            return FileResponse(path, media_type="image/png")
    refuse_if_pruned(settings, job.id, "plots")
    raise NotFound(f"job {job.id} has no plot {name!r}; the results JSON lists its plots")
