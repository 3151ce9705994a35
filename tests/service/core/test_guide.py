"""The guide at /guide: the site `make docs` builds, served read-only (GET and HEAD), with no
server path in any answer; a clear 503 saying to run `make docs` while it is not built."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.core.settings import Settings
from tests.helpers import AssetUrls, make_settings

REPO = Path(__file__).resolve().parents[3]


def small_site(site: Path) -> Path:
    (site / "service").mkdir(parents=True)
    (site / "index.html").write_text("<html><body>lctx guide home</body></html>")
    (site / "404.html").write_text("<html><body>page not found in the guide</body></html>")
    (site / "service" / "index.html").write_text("<html><body>the service page</body></html>")
    return site


def client(tmp_path: Path, site: Path) -> TestClient:
    return TestClient(create_app(make_settings(tmp_path, guide_dir=site)))  # no lifespan: nothing starts


def test_guide_pages_are_served_read_only(tmp_path: Path) -> None:
    site = small_site(tmp_path / "site")
    c = client(tmp_path, site)
    assert "lctx guide home" in c.get("/guide/").text
    assert c.get("/guide", follow_redirects=True).text == c.get("/guide/").text
    assert "the service page" in c.get("/guide/service/").text
    missing = c.get("/guide/nowhere/")
    assert missing.status_code == 404 and "page not found in the guide" in missing.text
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert c.request(method, "/guide/").status_code == 405, method
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the client")
    for path in ("/guide/../secret.txt", "/guide/%2e%2e/secret.txt", "/guide/..%2fsecret.txt"):
        r = c.get(path)
        assert r.status_code == 404 and "not for the client" not in r.text, path
    answers = [c.get(p) for p in ("/guide/", "/guide/nowhere/", "/guide/%2e%2e/secret.txt")]
    assert not [r.url for r in answers if str(tmp_path) in r.text or str(tmp_path) in str(r.headers)]


def test_guide_not_built_says_to_run_make_docs(tmp_path: Path) -> None:
    c = client(tmp_path, tmp_path / "not-built")
    for path in ("/guide/", "/guide/service/"):
        r = c.get(path)
        assert r.status_code == 503 and "make docs" in r.json()["detail"], r.text
        assert str(tmp_path) not in r.text
    small_site(tmp_path / "not-built")  # built after the server started: served from then on
    assert c.get("/guide/").status_code == 200


def test_the_default_site_is_mkdocs_site_dir() -> None:
    import yaml

    from service.core.guide import SITE

    assert Settings.model_fields["guide_dir"].default is None
    assert SITE == REPO / yaml.safe_load((REPO / "mkdocs.yml").read_text())["site_dir"]


@pytest.mark.integration  # MkDocs builds the whole site (tens of seconds on a shared CPU)
def test_make_docs_builds_the_site_offline_and_the_service_serves_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", HF_HUB_OFFLINE="1")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "--strict", "-d", str(site)], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    settings_page = (site / "reference" / "settings" / "index.html").read_text()
    assert all(f"LCTX_{name.upper()}" in settings_page for name in Settings.model_fields)
    assert "/v1/jobs" in (site / "reference" / "api" / "index.html").read_text()
    assert (site / "bench" / "results" / "demo_real.png").is_file()
    assert not (site / "hooks.py").exists()
    for page in site.rglob("*.html"):  # every stylesheet, script and image from the site itself
        parser = AssetUrls()
        parser.feed(page.read_text())
        remote = [u for u in parser.urls if "://" in u or u.startswith("//")]
        assert not remote, (page.relative_to(site), remote)
    c = client(tmp_path, site)
    assert not (site / "guide").exists()  # docs/guide/x.md at /guide/x/, not /guide/guide/x/
    for path in ("/guide/", "/guide/real-model/", "/guide/reference/settings/", "/guide/search/search_index.json"):
        assert c.get(path).status_code == 200, path
