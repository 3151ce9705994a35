"""The dashboard: hand-written HTML, CSS and JavaScript modules served by the app itself
(no build step, no CDN: it works on an air-gapped GPU node). Each page is the same shell
with its page name; the page's module reads the JSON API. Page routes stay out of the
OpenAPI schema: they are not part of the API."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, FastAPI
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from service.schemas import JOB_ID_PATTERN

STATIC = Path(__file__).parent / "static"
ASSETS = "/ui"  # where the static files are mounted
PAGES = {"jobs": "Jobs", "job": "Job", "leaderboard": "Leaderboard", "compare": "Compare",
         "registry": "Checkpoints and schedules"}

router = APIRouter(include_in_schema=False)


@cache
def _shell() -> str:
    return (STATIC / "index.html").read_text(encoding="utf-8")


def page(name: str) -> HTMLResponse:
    html = _shell().replace("{{page}}", name).replace("{{title}}", PAGES[name]).replace("{{assets}}", ASSETS)
    return HTMLResponse(html, headers={"Cache-Control": "no-cache"})


@router.get("/")
async def jobs_page() -> HTMLResponse:
    return page("jobs")


@router.get("/jobs/{job_id}")
async def job_page(job_id: Annotated[str, PathParam(pattern=JOB_ID_PATTERN)]) -> HTMLResponse:
    return page("job")


@router.get("/leaderboard")
async def leaderboard_page() -> HTMLResponse:
    return page("leaderboard")


@router.get("/compare")
async def compare_page() -> HTMLResponse:
    return page("compare")


@router.get("/checkpoints")
async def registry_page() -> HTMLResponse:
    return page("registry")


def mount(app: FastAPI) -> None:
    """The page routes and the assets under ASSETS."""
    app.include_router(router)
    app.mount(ASSETS, StaticFiles(directory=STATIC), name="dashboard")
