"""POST /v1/checkpoints/pull over real HTTP: a hub repository from huggingface_hub's
offline cache (built here) lands in the checkpoint root, registered with its commit;
refusals name the problem (a name taken, paths outside the roots, an unsupported GGUF)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.app import create_app
from tests.checkpoints.hf_models import COMMIT, REPO, build_hf_model, hub_cache, hub_offline, tiny_gguf
from tests.helpers import ThreadServer, make_settings

pytestmark = pytest.mark.integration  # a server on loopback


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    model = tmp_path / "hf-model"
    build_hf_model(model)
    (model / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    hub_offline(monkeypatch, hub_cache(tmp_path / "hub", model))
    with ThreadServer(create_app(make_settings(tmp_path))) as srv, httpx.Client(base_url=srv.url, timeout=120) as c:
        yield c


def test_pull_from_the_hub_registers_with_its_commit(api: httpx.Client, tmp_path: Path) -> None:
    r = api.post("/v1/checkpoints/pull", json={"name": "tiny", "hub": REPO})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["path"] == "tiny" and body["family"] == "llama" and body["chat_template"] == "chat_template.jinja"
    assert body["source"]["commit"] == COMMIT and body["source"]["repo_id"] == REPO
    assert (tmp_path / "models" / "tiny" / "model.safetensors").is_file()
    assert api.get("/v1/checkpoints/tiny").json()["source"]["commit"] == COMMIT
    again = api.post("/v1/checkpoints/pull", json={"name": "tiny", "hub": REPO})
    assert again.status_code == 409 and "already registered" in again.json()["detail"]
    other = api.post("/v1/checkpoints/pull", json={"name": "tiny2", "hub": REPO, "path": "tiny"})
    assert other.status_code == 409 and "already exists" in other.json()["detail"]


def test_pull_refusals(api: httpx.Client, tmp_path: Path) -> None:
    r = api.post("/v1/checkpoints/pull", json={"name": "x", "hub": "not-an-id"})
    assert r.status_code == 422 and "hub" in r.text
    r = api.post("/v1/checkpoints/pull", json={"name": "x", "hub": REPO, "gguf": "a.gguf"})
    assert r.status_code == 422 and "exactly one of hub" in r.text
    r = api.post("/v1/checkpoints/pull", json={"name": "x", "hub": "lctx-test/absent"})
    assert r.status_code == 422 and "not in the hub cache" in r.json()["detail"]
    r = api.post("/v1/checkpoints/pull", json={"name": "x", "hub": REPO, "path": "../outside"})
    assert r.status_code == 422 and "'..'" in r.json()["detail"]
    outside = tiny_gguf(tmp_path / "outside.gguf", "llama")
    r = api.post("/v1/checkpoints/pull", json={"name": "x", "gguf": str(outside)})
    assert r.status_code == 403 and "outside the allowed roots" in r.json()["detail"]
    tiny_gguf(tmp_path / "models" / "m.gguf", "mamba")
    r = api.post("/v1/checkpoints/pull", json={"name": "x", "gguf": "m.gguf"})
    assert r.status_code == 422 and "GGUF architecture 'mamba' is not supported" in r.json()["detail"]
    assert not (tmp_path / "models" / "x").exists()
    assert api.get("/v1/checkpoints").json() == []


def test_lctx_pull_command(api: httpx.Client, capsys: pytest.CaptureFixture) -> None:
    from cli.main import main

    url = ["--url", str(api.base_url)]
    assert main(["pull", REPO, "--revision", "main", *url]) == 0
    out = capsys.readouterr().out
    assert "tiny-llama" in out and f"commit {COMMIT}" in out and "chat template: chat_template.jinja" in out
    assert main(["pull", "lctx-test/absent", *url]) == 1
    assert "not in the hub cache" in capsys.readouterr().err
