"""/docs and /redoc work on an air-gapped node: every script, stylesheet and icon the
pages reference is served by lctx itself (no CDN, no web fonts)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urljoin, urlparse

import httpx
import pytest

from service.app import create_app
from tests.helpers import AssetUrls, ThreadServer, make_settings

pytestmark = pytest.mark.integration  # a server on loopback


def test_docs_pages_load_every_asset_from_the_server(tmp_path: Path) -> None:
    with ThreadServer(create_app(make_settings(tmp_path))) as srv, httpx.Client(base_url=srv.url) as c:
        for page in ("/docs", "/redoc"):
            r = c.get(page)
            assert r.status_code == 200, page
            parser = AssetUrls()
            parser.feed(r.text)
            assert len(parser.urls) >= 2, (page, parser.urls)  # the UI's script and its stylesheet or icon
            for url in parser.urls:
                absolute = urljoin(srv.url + page, url)
                assert urlparse(absolute).netloc == urlparse(srv.url).netloc, f"{page} loads {url} from elsewhere"
                asset = c.get(absolute)
                assert asset.status_code == 200 and len(asset.content) > 100, (page, url, asset.status_code)
            assert "fonts.googleapis" not in r.text and "cdn.jsdelivr" not in r.text
        assert '"validatorUrl": null' in c.get("/docs").text
        assert c.get("/openapi.json").json()["info"]["title"] == "lctx"
