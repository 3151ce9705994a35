"""/v1/endpoints and jobs on a served model, over real HTTP against a real server:
`transformers serve` (tests/conftest.py) registered through lctx's API on a real uvicorn;
the job runs through the worker's own code path (service.runner.coordinator.run_job)."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest

from cli.main import main
from service.app import create_app
from service.core.layout import job_results
from service.core.status import RUNNING
from service.runner.coordinator import run_job
from service.store import Store
from tests.helpers import STANDIN_NAME, ThreadServer, make_settings, standin_app

pytestmark = pytest.mark.integration  # servers on loopback (lctx and the model servers)

SECRET = "sk-lctx-test-not-to-be-seen-3f9a"


def test_register_refuse_submit_and_run_on_an_endpoint(transformers_server, real_model, tmp_path, monkeypatch,
                                                        capsys):
    monkeypatch.setenv("LCTX_ENDPOINT_KEY_TEST", SECRET)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "doc.txt").write_text("A document to score. " * 20)
    settings = make_settings(tmp_path, checkpoint_roots=[real_model.parent], data_dir=tmp_path / "data")
    body = {"name": "smol-served", "base_url": transformers_server.url, "served_model": transformers_server.name,
            "tokenizer": real_model.name, "api_key_env": "LCTX_ENDPOINT_KEY_TEST"}
    with ThreadServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=120) as c:
        refused = {
            "scheme": ({**body, "base_url": "ftp://127.0.0.1/v1"}, "scheme must be http or https"),
            "host": ({**body, "base_url": "http://192.0.2.1:8000/v1"}, "is not allowed"),
            "model": ({**body, "served_model": "no-such-model"}, "does not serve 'no-such-model'"),
            "path": ({**body, "base_url": transformers_server.url.removesuffix("/v1") + "/nope"},
                     "not an OpenAI-compatible server there"),
        }
        for case, (bad, message) in refused.items():
            r = c.post("/v1/endpoints", json=bad)
            assert r.status_code == 422 and message in r.text, (case, r.text)
        assert c.post("/v1/endpoints", json={**body, "tokenizer": "/etc"}).status_code in (403, 422)

        # registered through the CLI, as a user would (`lctx endpoints add`)
        assert main(["endpoints", "add", "smol-served", transformers_server.url, "--served-model",
                     transformers_server.name, "--tokenizer", real_model.name, "--api-key-env",
                     "LCTX_ENDPOINT_KEY_TEST", "--url", srv.url]) == 0
        assert "smol-served" in capsys.readouterr().out
        endpoint = c.get("/v1/endpoints/smol-served").json()
        assert endpoint["context_length"] == 8192  # from the tokenizer folder's config.json
        assert endpoint["capabilities"]["prompt_logprobs"] is False
        assert [e["name"] for e in c.get("/v1/endpoints").json()] == ["smol-served"]

        job = {"endpoint": "smol-served", "tasks": [{"name": "passkey", "lengths": [200], "trials": 2}]}
        for extra, message in (({"rope": "yarn:4"}, "RoPE"), ({"backend": "torch"}, "attention backend"),
                               ({"tasks": [{"name": "diagnostics"}]}, "attention statistics"),
                               ({"tasks": [{"name": "perplexity", "text_file": "doc.txt"}]}, "prompt log-probabilities"),
                               ({"checkpoint": real_model.name}, "not both")):
            r = c.post("/v1/jobs", json={**job, **extra})
            assert r.status_code == 422 and message in r.text, (extra, r.text)
        assert main(["submit", "--endpoint", "smol-served", "--task", "passkey:lengths=200:trials=2", "-q",
                     "--url", srv.url]) == 0  # `lctx submit`'s --endpoint comes from the request model
        job_id = capsys.readouterr().out.strip()
        submitted = c.get(f"/v1/jobs/{job_id}").json()
        assert submitted["endpoint"] == "smol-served" and submitted["checkpoint_path"] == transformers_server.url
        assert main(["endpoints", "list", "--url", srv.url]) == 0
        assert "logprobs no" in capsys.readouterr().out

    store = Store(settings.database)
    try:
        assert store.claim_next("endpoint-test").id == job_id
        assert store.get_job(job_id).status == RUNNING
        assert run_job(settings, job_id, store) == "succeeded", store.get_job(job_id).error
    finally:
        store.close()
    results = json.loads((job_results(settings, job_id)).read_text())
    assert results["endpoint"]["name"] == "smol-served"
    assert results["model"]["reported_model"].startswith(transformers_server.name)
    assert results["results"]["passkey"]["samples"] == 2
    # The key is named, never kept: not in the database, the results or any answer.
    db = sqlite3.connect(settings.database.removeprefix("sqlite:///"))
    dump = "\n".join(db.iterdump())
    db.close()
    assert "LCTX_ENDPOINT_KEY_TEST" in dump and SECRET not in dump
    assert SECRET not in json.dumps(results) and SECRET not in json.dumps(endpoint)


def test_a_vllm_server_registered_without_a_tokenizer_scores_prompts(standin_model, transformers_server,
                                                                     tmp_path):
    """The vLLM stand-in (tests/helpers.py: vLLM's documented shapes, numbers by transformers):
    registered with no tokenizer folder (its /tokenize counts prompts, its max_model_len is the
    context), a perplexity job is accepted and runs through the worker's code path; a server
    with no /tokenize is refused at registration, saying what to give."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "doc.txt").write_text("A document to score, sentence by sentence. " * 12)
    settings = make_settings(tmp_path, data_dir=tmp_path / "data")
    with ThreadServer(standin_app("vllm", standin_model)) as vllm, ThreadServer(create_app(settings)) as srv, \
            httpx.Client(base_url=srv.url, timeout=120) as c:
        r = c.post("/v1/endpoints", json={"name": "tok-less", "base_url": vllm.url + "/v1",
                                          "served_model": STANDIN_NAME})
        assert r.status_code == 201, r.text
        endpoint = r.json()
        assert endpoint["tokenizer"] is None and endpoint["context_length"] == standin_model.context
        assert endpoint["capabilities"]["prompt_scoring"] == "vllm"
        assert endpoint["capabilities"]["tokenizer_endpoints"] is True
        r = c.post("/v1/endpoints", json={"name": "no-tok", "base_url": transformers_server.url,
                                          "served_model": transformers_server.name, "context_length": 2048})
        assert r.status_code == 422 and "no /tokenize and /detokenize" in r.text, r.text
        job = c.post("/v1/jobs", json={"endpoint": "tok-less", "tasks": [
            {"name": "perplexity", "text_file": "doc.txt", "lengths": [64]}]})
        assert job.status_code == 202, job.text
        job_id = job.json()["id"]
        store = Store(settings.database)
        try:
            assert store.claim_next("endpoint-test").id == job_id
            assert run_job(settings, job_id, store) == "succeeded", store.get_job(job_id).error
        finally:
            store.close()
    results = json.loads((job_results(settings, job_id)).read_text())
    assert results["model"]["tokenizer"] == "server" and results["model"]["capabilities"]["prompt_scoring"] == "vllm"
    assert results["results"]["perplexity"]["result"]["metrics"][0]["value"] > 1
