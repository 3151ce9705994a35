"""The documentation site at /guide: the pages `make docs` builds from docs/ (MkDocs) into
var/site of the source tree, served read-only as they are. Until they are built, /guide
answers 503 saying how to build them (never where the server looks for them)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

PREFIX = "/guide"
SITE = Path(__file__).resolve().parents[2] / "var" / "site"  # mkdocs.yml's site_dir
NOT_BUILT = "the guide is not built on this server: run `make docs` in the lctx source tree (or `make serve`)"


class Guide(StaticFiles):
    """StaticFiles (GET and HEAD only; index.html for a folder; the site's 404.html) that
    looks for the site on each request: a site built after the server started is served."""

    def __init__(self, site: Path) -> None:
        super().__init__(directory=site, html=True, check_dir=False)
        self.site = site

    async def check_config(self) -> None:
        if self.site.is_dir():  # not built: get_response answers 503
            await super().check_config()

    async def get_response(self, path: str, scope: Scope) -> Response:
        if not (self.site / "index.html").is_file():
            return JSONResponse({"detail": NOT_BUILT, "code": "not_built"}, status_code=503)
        return await super().get_response(path, scope)


def mount(app: FastAPI, site: Path | None) -> None:
    app.mount(PREFIX, Guide(site or SITE), name="guide")
