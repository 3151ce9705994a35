"""httpx client of the API, used by the CLI (and handy from notebooks)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

from service.core.settings import Settings, get_settings
from service.schemas import (
    CheckpointOut,
    EndpointOut,
    JobCreate,
    JobList,
    JobOut,
    JobPlan,
    ScheduleOut,
    ScheduleRun,
)


class ApiError(Exception):
    """The API refused a request (4xx/5xx) or could not be reached."""

    def __init__(self, status: int, detail: Any) -> None:
        if isinstance(detail, list):  # pydantic validation errors: one line each
            detail = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', []))}: {e.get('msg')}" for e in detail)
        super().__init__(f"{status}: {detail}" if status else str(detail))
        self.status, self.detail = status, detail


class ServiceClient:
    """The lctx service's API over HTTP (named apart from clients.endpoint.Client, a served model's)."""

    def __init__(self, base_url: str | None = None, token: str | None = None, timeout: float = 30.0,
                 settings: Settings | None = None) -> None:
        settings = settings or get_settings()
        headers = {}
        token = token if token is not None else settings.token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base_url = (base_url or settings.url).rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, url, **kwargs)
        except httpx.HTTPError as e:
            raise ApiError(0, f"cannot reach the lctx API at {self.base_url} ({e}); start it with `lctx serve` "
                              "or set LCTX_BASE_URL") from e
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise ApiError(response.status_code, detail)
        return response

    # -- resources -------------------------------------------------------------------

    def add_checkpoint(self, name: str, path: str) -> CheckpointOut:
        return CheckpointOut.model_validate(self.request("POST", "/v1/checkpoints",
                                                         json={"name": name, "path": path}).json())

    def pull(self, name: str, hub: str | None = None, revision: str = "main", gguf: str | None = None,
             path: str | None = None) -> CheckpointOut:
        body = {"name": name, "hub": hub, "revision": revision, "gguf": gguf, "path": path}
        response = self.request("POST", "/v1/checkpoints/pull", json=body, timeout=None)  # downloads take long
        return CheckpointOut.model_validate(response.json())

    def checkpoints(self) -> list[CheckpointOut]:
        return [CheckpointOut.model_validate(c) for c in self.request("GET", "/v1/checkpoints").json()]

    def add_endpoint(self, **fields: Any) -> EndpointOut:
        """Register a served model (fields of EndpointCreate; the key stays in its variable)."""
        body = {k: v for k, v in fields.items() if v is not None}
        return EndpointOut.model_validate(self.request("POST", "/v1/endpoints", json=body).json())

    def endpoints(self) -> list[EndpointOut]:
        return [EndpointOut.model_validate(e) for e in self.request("GET", "/v1/endpoints").json()]

    def submit(self, checkpoint: str | None, tasks: list[dict[str, Any]], **fields: Any) -> JobOut:
        """POST /v1/jobs; `fields` are the request's other fields (rope, backend, priority,
        endpoint in place of the checkpoint, ...: whatever `JobCreate` declares; the server
        validates them)."""
        unknown = sorted(set(fields) - set(JobCreate.model_fields))
        if unknown:
            raise ValueError(f"unknown job fields {unknown}; a job takes {', '.join(JobCreate.model_fields)}")
        body = {**({"checkpoint": checkpoint} if checkpoint is not None else {}), "tasks": tasks, **fields}
        return JobOut.model_validate(self.request("POST", "/v1/jobs", json=body).json())

    def upload(self, body: dict[str, Any]) -> JobOut:
        """POST /v1/uploads: a local run's results and samples recorded as a job."""
        return JobOut.model_validate(self.request("POST", "/v1/uploads", json=body, timeout=None).json())

    def schedules(self) -> list[ScheduleOut]:
        return [ScheduleOut.model_validate(s) for s in self.request("GET", "/v1/schedules").json()]

    def add_schedule(self, body: dict[str, Any]) -> ScheduleOut:
        """POST /v1/schedules: a cron, watch folders and a suite; refused as a job of the suite would be."""
        return ScheduleOut.model_validate(self.request("POST", "/v1/schedules", json=body).json())

    def delete_schedule(self, name: str) -> None:
        """DELETE /v1/schedules/{name}: the jobs it submitted stay."""
        self.request("DELETE", f"/v1/schedules/{name}")

    def run_schedule(self, name: str) -> ScheduleRun:
        """POST /v1/schedules/{name}/run: the schedule ticked now; what it submitted or skipped."""
        return ScheduleRun.model_validate(self.request("POST", f"/v1/schedules/{name}/run", timeout=None).json())

    def plan(self, checkpoint: str | None, tasks: list[dict[str, Any]], **fields: Any) -> JobPlan:
        """POST /v1/jobs?dry_run=true: the job's samples, tokens and estimated time, refused as a
        submission would be, nothing queued."""
        body = {**({"checkpoint": checkpoint} if checkpoint is not None else {}), "tasks": tasks, **fields}
        return JobPlan.model_validate(self.request("POST", "/v1/jobs", params={"dry_run": "true"}, json=body).json())

    def job(self, job_id: str) -> JobOut:
        return JobOut.model_validate(self.request("GET", f"/v1/jobs/{job_id}").json())

    def jobs(self, **filters: Any) -> JobList:
        params = {k: v for k, v in filters.items() if v is not None}
        return JobList.model_validate(self.request("GET", "/v1/jobs", params=params).json())

    def cancel(self, job_id: str) -> JobOut:
        return JobOut.model_validate(self.request("POST", f"/v1/jobs/{job_id}/cancel").json())

    def resume(self, job_id: str) -> JobOut:
        return JobOut.model_validate(self.request("POST", f"/v1/jobs/{job_id}/resume").json())

    def results(self, job_id: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/jobs/{job_id}/results").json()

    def leaderboard(self, task: str, **filters: Any) -> dict[str, Any]:
        params = {"task": task, **{k: v for k, v in filters.items() if v is not None}}
        return self.request("GET", "/v1/leaderboard", params=params).json()

    def compare(self, task: str, jobs: list[str]) -> dict[str, Any]:
        return self.request("GET", "/v1/compare", params={"task": task, "jobs": jobs}).json()

    def regressions(self, **filters: Any) -> list[dict[str, Any]]:
        params = {k: v for k, v in filters.items() if v is not None}
        return self.request("GET", "/v1/regressions", params=params).json()

    def samples(self, job_id: str) -> Iterator[str]:
        with self.http.stream("GET", f"/v1/jobs/{job_id}/samples") as response:
            if response.status_code >= 400:
                response.read()
                raise ApiError(response.status_code, response.json().get("detail"))
            yield from response.iter_lines()
