"""No secret of the service leaves it, tried as an attacker would (issue #36): a registered
endpoint that echoes the Authorization header back in everything it answers (its model
list, server header, version, completions, errors). The service is a real uvicorn on
loopback with an API token and a database URL; the attacker's server is a stand-in on
loopback (it has to be hostile, so it cannot be a real serving engine); the job runs
through the worker's own code path (service.runner.coordinator.run_job)."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service.app import create_app
from service.core.settings import Settings
from service.runner.coordinator import run_job
from service.store import Store
from tests.helpers import ThreadServer, make_settings

pytestmark = pytest.mark.integration  # a server on loopback

TOKEN = "lctx-api-token-0f3c9a7e51"
ENDPOINT_KEY = "sk-endpoint-key-7d21b4c8e9"
HF_TOKEN = "hf_not_a_real_token_9a8b7c6d"


def echo_server() -> tuple[FastAPI, list[str]]:
    """An OpenAI-compatible server that puts the Authorization header it gets in every answer."""
    app, seen = FastAPI(), []

    def auth(request: Request) -> str:
        value = request.headers.get("authorization", "")
        seen.append(value)
        return value

    @app.get("/v1/models")
    @app.get("/alt/v1/models")  # the same server under a root without /version: its server header is kept
    def models(request: Request) -> JSONResponse:
        a = auth(request)
        return JSONResponse({"data": [{"id": "echo"}, {"id": f"leak {a}"}]}, headers={"server": f"echo {a}"})

    @app.get("/version")
    def version(request: Request) -> dict:
        return {"version": auth(request)}

    @app.post("/v1/completions")
    @app.post("/alt/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        a, body = auth(request), await request.json()
        if body.get("echo") or body.get("model") != "echo":
            return JSONResponse({"error": f"no such thing for {a}", "model": body.get("model")}, status_code=400)
        return JSONResponse({"model": f"echo {a}", "choices": [
            {"text": f" The pass key is 12345. Sent: {a}", "finish_reason": "length"}]})

    return app, seen


def everything_said(c: httpx.Client, job_id: str) -> str:
    """Every answer a reader without the token gets about the endpoint and the job."""
    pages = [c.get(p) for p in ("/v1/endpoints", "/v1/endpoints/echo", f"/v1/jobs/{job_id}", "/v1/jobs",
                                f"/v1/jobs/{job_id}/results", f"/v1/jobs/{job_id}/samples", "/v1/checkpoints",
                                "/v1/leaderboard?task=passkey", "/checkpoints", "/metrics")]
    assert all(p.status_code == 200 for p in pages), [(p.url, p.status_code, p.text[:200]) for p in pages]
    return "\n".join(p.text for p in pages)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LCTX_API_TOKEN", TOKEN)
    monkeypatch.setenv("LCTX_ENDPOINT_KEY_ECHO", ENDPOINT_KEY)
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)


def test_an_echoing_endpoint_gets_no_service_secret_and_shows_nothing_it_got(env, models: Path, tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    settings = make_settings(tmp_path, api_token=TOKEN)
    hostile, seen = echo_server()
    body = {"name": "echo", "served_model": "echo", "tokenizer": "tiny", "context_length": 4096}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with ThreadServer(hostile) as evil, ThreadServer(create_app(settings)) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as c:
        body["base_url"] = f"{evil.url}/v1"
        # The service's own variables and any variable outside the allow-list are refused, and
        # nothing is sent: the hostile server never hears of them.
        for name in ("LCTX_API_TOKEN", "LCTX_DATABASE_URL", "HF_TOKEN", "PATH", "HOME", "RAY_AUTH_TOKEN",
                     "LCTX_ENDPOINT_KEY_PREFIX", "SOME_OTHER_KEY"):
            r = c.post("/v1/endpoints", json={**body, "api_key_env": name}, headers=auth)
            assert r.status_code == 422 and f"api_key_env {name!r} is not allowed" in r.text, (name, r.text)
            assert "LCTX_ENDPOINT_KEY_" in r.text  # says what is allowed
        assert seen == []
        # A served model named wrongly: the refusal quotes the server's model list, masked.
        r = c.post("/v1/endpoints", json={**body, "served_model": "other", "api_key_env": "LCTX_ENDPOINT_KEY_ECHO"},
                   headers=auth)
        assert r.status_code == 422 and "leak Bearer ***" in r.text and ENDPOINT_KEY not in r.text, r.text
        r = c.post("/v1/endpoints", json={**body, "api_key_env": "LCTX_ENDPOINT_KEY_ECHO"}, headers=auth)
        assert r.status_code == 201, r.text
        assert seen and set(seen) == {f"Bearer {ENDPOINT_KEY}"}  # the endpoint's own key, and only that
        capabilities = r.json()["capabilities"]
        assert capabilities["server_version"] == "Bearer ***" and "leak Bearer ***" in capabilities["models"]
        r = c.post("/v1/endpoints", json={**body, "name": "alt", "base_url": f"{evil.url}/alt/v1",
                                          "api_key_env": "LCTX_ENDPOINT_KEY_ECHO"}, headers=auth)
        assert r.status_code == 201 and r.json()["capabilities"]["server"].endswith("echo Bearer ***"), r.text
        assert r.json()["tokenizer"] == "tiny"  # relative to its root, not the server's path

        # room for the whole echo (40 tokens): an answer past max_new_tokens is cut to it (and said so)
        job = c.post("/v1/jobs", json={"endpoint": "echo", "tasks": [{"name": "passkey", "lengths": [300],
                                                                      "trials": 2, "max_new_tokens": 64}]},
                     headers=auth)
        assert job.status_code == 202, job.text
        job_id = job.json()["id"]
        store = Store(settings.database)
        try:
            assert store.claim_next("secrets-test").id == job_id
            assert run_job(settings, job_id, store) == "succeeded", store.get_job(job_id).error
        finally:
            store.close()
        said = everything_said(c, job_id)
        samples = [json.loads(line) for line in c.get(f"/v1/jobs/{job_id}/samples").text.splitlines()]

    assert len(samples) == 2 and all("Sent: Bearer ***" in json.dumps(s) for s in samples), samples
    stored = _dump(settings) + "\n".join(p.read_text(errors="replace") for p in settings.home.rglob("*")
                                         if p.is_file() and p.suffix in (".json", ".jsonl", ".log"))
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (TOKEN, ENDPOINT_KEY, HF_TOKEN):
        assert secret not in said, secret
        assert secret not in stored, secret
        assert secret not in logged, secret


def _dump(settings: Settings) -> str:
    db = sqlite3.connect(settings.database.removeprefix("sqlite:///"))
    try:
        return "\n".join(db.iterdump())
    finally:
        db.close()


def test_the_allow_list_is_the_operators_and_never_admits_the_services_own(tmp_path: Path) -> None:
    """LCTX_ENDPOINT_KEY_NAMES may add names, not the service's settings or its libraries'
    variables; a prefix that would admit them stops the start too."""
    settings = make_settings(tmp_path, endpoint_key_names=["VLLM_API_KEY"], endpoint_key_prefix="")
    settings.check_endpoint_key("VLLM_API_KEY")
    for refused in ("LCTX_ENDPOINT_KEY_ECHO", "LCTX_API_TOKEN"):  # no prefix now
        with pytest.raises(Exception, match="is not allowed"):
            settings.check_endpoint_key(refused)
    for names, prefix, message in ((["LCTX_API_TOKEN"], "LCTX_ENDPOINT_KEY_", "setting of lctx.s service"),
                                   (["RAY_AUTH_TOKEN"], "LCTX_ENDPOINT_KEY_", "read by the service"),
                                   ([], "LCTX_", "own variables")):
        with pytest.raises(ValueError, match=message):
            Settings(home=tmp_path, endpoint_key_names=names, endpoint_key_prefix=prefix)
