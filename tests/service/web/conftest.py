"""One headless Chromium for the dashboard tests (Playwright's sync API allows one per thread)."""

from __future__ import annotations

import pytest

from tests.service.web.browser import browser


@pytest.fixture(scope="session")
def chromium():
    with browser() as b:
        yield b
