"""Headless Chromium from Debian's package (/usr/bin/chromium, installed by `make test`)
driven by Playwright: no browser is downloaded. Every console error and uncaught page
error is collected, so a test can assert a page loaded cleanly."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = Path(os.environ.get("LCTX_CHROMIUM", "/usr/bin/chromium"))
VIEWPORT = {"width": 1366, "height": 900}  # a laptop screen
# Where screenshots go: LCTX_SCREENSHOTS=docs/screenshots refreshes the guide's pictures (docs/guide/dashboard.md).
SCREENSHOTS = os.environ.get("LCTX_SCREENSHOTS")


@dataclass
class Console:
    """Console errors and page errors seen since the last `take()`."""

    errors: list[str] = field(default_factory=list)

    def take(self) -> list[str]:
        out, self.errors = self.errors, []
        return out

    def refusals(self, *statuses: int) -> list[str]:
        """The errors, less Chromium's own line for each expected refused request (it logs
        every 4xx answer to fetch as "Failed to load resource")."""
        codes = "|".join(map(str, statuses))
        expected = re.compile(rf"Failed to load resource: the server responded with a status of ({codes})\b")
        return [e for e in self.take() if not expected.search(e)]


def chromium_path() -> str:
    if not CHROMIUM.is_file() and not shutil.which("chromium"):
        raise RuntimeError(f"no Chromium at {CHROMIUM}: install Debian's package (`apt-get install -y "
                           "--no-install-recommends chromium`; `make test` does it) or set LCTX_CHROMIUM")
    return str(CHROMIUM if CHROMIUM.is_file() else shutil.which("chromium"))


@contextmanager
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # --no-sandbox: tests run as root in CI containers, where Chromium's sandbox refuses to start
        b = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


def new_page(b: object, base_url: str, viewport: dict[str, int] = VIEWPORT) -> tuple[object, Console]:
    context = b.new_context(base_url=base_url, viewport=viewport)  # a fresh sessionStorage per context
    page = context.new_page()
    page.set_default_timeout(20_000)
    console = Console()
    page.on("console", lambda m: console.errors.append(f"console: {m.text} ({m.location.get('url')})")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: console.errors.append(f"page error: {e}"))
    return page, console


def screenshot(page: object, folder: Path, name: str, full_page: bool = False) -> Path:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
