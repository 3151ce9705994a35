"""The checkpoints page's endpoints section in a real browser (Debian's Chromium) against
a real server: a URL the service refuses shows the API's message; a real OpenAI-compatible
server (`transformers serve`, tests/conftest.py) registers and appears in the table."""

from __future__ import annotations

import pytest

from service.app import create_app
from tests.helpers import ThreadServer, make_settings
from tests.service.web.browser import new_page

pytestmark = pytest.mark.integration  # a browser and servers


def test_register_an_endpoint_from_the_checkpoints_page(chromium, transformers_server, real_model, tmp_path) -> None:
    settings = make_settings(tmp_path, checkpoint_roots=[real_model.parent])
    with ThreadServer(create_app(settings)) as srv:
        page, console = new_page(chromium, srv.url)
        page.goto("/checkpoints")
        page.locator("#endpoint-form").wait_for(state="attached")
        assert "No endpoints registered" in page.locator("main").inner_text()
        page.click("#endpoint-form >> xpath=ancestor::details/summary")
        page.fill("#endpoint-form [name=name]", "smol")
        page.fill("#endpoint-form [name=base_url]", "http://192.0.2.1:8001/v1")
        page.fill("#endpoint-form [name=served_model]", transformers_server.name)
        page.fill("#endpoint-form [name=tokenizer]", real_model.name)
        page.click("#endpoint-form button[type=submit]")
        page.locator("#endpoint-form-status .error").wait_for()
        assert "is not allowed" in page.locator("#endpoint-form-status").inner_text()
        page.fill("#endpoint-form [name=base_url]", transformers_server.url)
        page.click("#endpoint-form button[type=submit]")
        page.locator("#endpoints-table").wait_for(timeout=120_000)
        row = page.locator("#endpoints-table").inner_text()
        assert "smol" in row and transformers_server.url in row and transformers_server.name in row
        assert console.refusals(422) == []  # the refused registration is the API's answer, not a page error
