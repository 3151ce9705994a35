"""The endpoint backend against the servers people run, as they run them:

- prompt scoring through vLLM's `prompt_logprobs` and SGLang's `/generate` with
  `return_logprob` equals lctx's engine on the same model within 1e-3 per token. No GPU
  here, so neither server runs: stand-ins on loopback answer in each server's documented
  request and response shapes with the numbers computed by transformers on the real model
  (tests/helpers.py: standin_app);
- the server's /tokenize and /detokenize in place of a tokenizer folder (the same stand-ins);
- what cannot apply to a served model refused before any request (a closed port: nothing listens);
- chat style, and the retry path, against the real `transformers serve` (tests/conftest.py),
  the latter behind a loopback proxy that answers 429 with Retry-After and 503 for a while;
- `lctx endpoints probe URL`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import torch
from fastapi import FastAPI, Request, Response

from checkpoints.engine import Engine, LoglikelihoodRequest, RollingRequest
from checkpoints.errors import EndpointError
from checkpoints.loading import load_model
from checkpoints.tokenizer import load_tokenizer
from cli.main import main
from clients.endpoint.engine import EndpointEngine, connect
from clients.endpoint.options import EndpointSpec
from clients.endpoint.tokenizer import ServerTokenizer
from evaluators.suite import RESULTS_FILE
from tests.helpers import STANDIN_NAME, ThreadServer, free_port, standin_app

pytestmark = pytest.mark.integration  # servers: transformers serve and the stand-ins on loopback

TEXT = ("The quick brown fox jumps over the lazy dog. Long-context models read whole books; "
        "perplexity tells how well they predict each next word of a text they have not seen.")


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def lctx_engine(real_model):
    loaded = load_model(real_model, device="cpu")
    return Engine(loaded.model, loaded.tokenizer), loaded.tokenizer


@pytest.mark.parametrize("flavour", ["vllm", "sglang"])
def test_prompt_scoring_through_vllm_and_sglang_equals_lctx_engine(flavour, standin_model, lctx_engine, real_model):
    engine, tokenizer = lctx_engine
    ids = tuple(tokenizer.encode(TEXT))
    context, choices = tokenizer.encode("The capital of France is"), [" Paris", " Berlin", " a"]
    asks = [LoglikelihoodRequest(tuple(context), tuple(tokenizer.encode(c, add_special_tokens=False))) for c in choices]
    calls: list[str] = []
    with ThreadServer(standin_app(flavour, standin_model, calls=calls)) as server:
        served = connect(EndpointSpec(server.url + "/v1", STANDIN_NAME, str(real_model), None))
        assert served.capabilities.prompt_scoring == flavour and served.capabilities.token_prompts
        remote = EndpointEngine(served)
        got, want = remote.loglikelihood_rolling([RollingRequest(ids)])[0], engine.loglikelihood_rolling(
            [RollingRequest(ids)])[0]
        assert got.shape == want.shape == (len(ids) - 1,)
        assert torch.allclose(got, want.float(), atol=1e-3, rtol=0), (got - want).abs().max()
        for (lp, greedy), (lp0, greedy0) in zip(remote.loglikelihood(asks), engine.loglikelihood(asks), strict=True):
            assert abs(lp - lp0) < 1e-3 * 3 and greedy == greedy0
    scoring = "/v1/completions" if flavour == "vllm" else "/generate"
    assert calls.count(scoring) >= 5  # the probe's, the rolling request's and the three choices'


@pytest.mark.parametrize("flavour", ["vllm", "sglang"])
def test_the_servers_tokenizer_counts_prompts_when_none_is_given(flavour, standin_model, real_model, tmp_path):
    local = load_tokenizer(real_model, None)
    calls: list[str] = []
    with ThreadServer(standin_app(flavour, standin_model, calls=calls)) as server:
        served = connect(EndpointSpec(server.url + "/v1", STANDIN_NAME, None, None))
        tok = served.tokenizer
        assert isinstance(tok, ServerTokenizer) and served.capabilities.tokenizer_endpoints
        assert served.spec.context_length == standin_model.context  # max_model_len of /v1/models or /tokenize
        texts = [TEXT, "a needle: 7 2 9", TEXT[:40], "é ü 中文"]
        assert tok.encode_batch(texts, add_special_tokens=False) == [local.encode(t, add_special_tokens=False)
                                                                     for t in texts]
        ids = local.encode(TEXT)
        assert tok.decode(ids, skip_special_tokens=False) == local.decode(ids, skip_special_tokens=False)
        asked = calls.count("/tokenize")
        assert tok.encode_batch(texts, add_special_tokens=False)[0] == local.encode(TEXT, add_special_tokens=False)
        assert calls.count("/tokenize") == asked  # cached
        if flavour == "sglang":
            return  # a whole run once (vLLM's), the same code path
        argv = ["eval", "--endpoint", server.url + "/v1", "--served-model", STANDIN_NAME, "--task", "passkey",
                "--lengths", "300", "--trials", "1", "-q"]
        assert main([*argv, "--out", str(tmp_path / "server-tok")]) == 0
        assert main([*argv, "--tokenizer", str(real_model), "--out", str(tmp_path / "local-tok")]) == 0
    a, b = records(tmp_path / "server-tok" / "passkey"), records(tmp_path / "local-tok" / "passkey")
    assert [(r["prompt_tokens"], r["prediction"]) for r in a] == [(r["prompt_tokens"], r["prediction"]) for r in b]


def test_without_a_tokenizer_a_server_without_tokenize_is_refused(transformers_server, capsys, tmp_path):
    assert main(["eval", "--endpoint", transformers_server.url, "--served-model", transformers_server.name,
                 "--context", "2048", "--task", "passkey", "--lengths", "300", "--trials", "1", "-q",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "no tokenizer" in err and "no /tokenize and /detokenize" in err and "--tokenizer" in err


def test_what_cannot_apply_is_refused_before_any_request(real_model, tmp_path, capsys):
    """Nothing listens on the port: each refusal is the reason's own, not a connection error."""
    closed = f"http://127.0.0.1:{free_port()}/v1"
    (tmp_path / "doc.txt").write_text(TEXT)
    base = ["eval", "--endpoint", closed, "--served-model", "m", "--tokenizer", str(real_model), "-q",
            "--out", str(tmp_path / "out")]
    passkey = ["--task", "passkey", "--lengths", "300", "--trials", "1"]
    cases = [
        ([*passkey, "--rope", "yarn:2"], "cannot change its RoPE scaling"),
        ([*passkey, "--backend", "triton"], "cannot change its attention backend"),
        ([*passkey, "--dtype", "bfloat16"], "cannot change its dtype"),
        ([*passkey, "--device", "cuda"], "cannot change its device"),
        (["--task", "diagnostics"], "attention statistics"),
        (["--task", "perplexity", "--option", f"text_file={tmp_path / 'doc.txt'}", "--api-style", "chat"],
         "chat-style endpoint returns no prompt log-probabilities"),
    ]
    for extra, message in cases:
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert message in err and "did not answer" not in err, (extra, err)
    assert main([*base, *passkey]) == 2  # the same request, nothing to refuse: now the server is asked
    assert "did not answer" in capsys.readouterr().err


def test_a_name_the_server_does_not_list_is_asked_and_its_refusal_quoted(transformers_server, real_model):
    """`transformers serve /path` lists only its hub cache (empty here) yet answers the folder's path."""
    served = connect(EndpointSpec(transformers_server.url, transformers_server.name, str(real_model), 2048))
    assert not served.capabilities.listed and transformers_server.name not in served.capabilities.models
    with pytest.raises(EndpointError) as refused:
        connect(EndpointSpec(transformers_server.url, "no-such-model", str(real_model), 2048))
    message = str(refused.value)
    assert "does not serve 'no-such-model'" in message
    assert f"Server is pinned to '{transformers_server.name}'" in message  # the server's own words


def test_chat_style_against_transformers_serve(transformers_server, real_model, tmp_path):
    """The server wraps the prompt in the model's chat template: the same greedy answer as lctx's
    engine applying that template itself."""
    task = ["--task", "passkey", "--lengths", "300", "--trials", "1", "--option", "chat_template=true", "-q"]
    assert main(["eval", "--checkpoint", str(real_model), *task, "--out", str(tmp_path / "engine")]) == 0
    served_task = [t for t in task if t not in ("--option", "chat_template=true")]
    assert main(["eval", "--endpoint", transformers_server.url, "--served-model", transformers_server.name,
                 "--tokenizer", str(real_model), "--api-style", "chat", *served_task,
                 "--out", str(tmp_path / "chat")]) == 0
    engine = {r["id"]: r for r in records(tmp_path / "engine" / "passkey")}
    chat = {r["id"]: r for r in records(tmp_path / "chat" / "passkey")}
    assert sorted(engine) == sorted(chat) and len(chat) == 1
    for sample_id, r in chat.items():
        assert r["prediction"].strip() == engine[sample_id]["prediction"].strip(), sample_id
    document = json.loads((tmp_path / "chat" / RESULTS_FILE).read_text())
    assert document["model"]["api_style"] == "chat" and document["model"]["reported_model"].endswith("@main")


class FailingProxy:
    """A loopback proxy in front of a real server: each sample's request (max_tokens > 1; the
    probe's one-token requests pass) is answered 429 with Retry-After the first time it is
    seen and 503 the second, then forwarded. Records when each try arrived."""

    def __init__(self, upstream: str, retry_after: int = 1) -> None:
        self.tries: dict[str, list[float]] = {}
        self.forwarded: list[str] = []
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def proxy(path: str, request: Request) -> Response:
            body = await request.body()
            if request.method == "POST" and path.endswith("completions") and json.loads(body).get("max_tokens", 1) > 1:
                key = body.decode()
                seen = self.tries.setdefault(key, [])
                seen.append(time.monotonic())
                if len(seen) == 1:
                    return Response('{"error": "slow down"}', 429, {"retry-after": str(retry_after)})
                if len(seen) == 2:
                    return Response('{"error": "overloaded"}', 503)
                self.forwarded.append(key)
            async with httpx.AsyncClient(timeout=600) as c:
                answer = await c.request(request.method, f"{upstream}/{path}", content=body,
                                         headers={"content-type": "application/json"})
            return Response(answer.content, answer.status_code, {"content-type": "application/json"})

        self.app = app


def test_retries_against_a_failing_proxy_answer_every_sample_once(transformers_server, real_model, tmp_path, capsys):
    upstream = transformers_server.url.removesuffix("/v1")
    proxy = FailingProxy(upstream)
    before = transformers_server.requests_received()
    with ThreadServer(proxy.app) as front:
        assert main(["eval", "--endpoint", front.url + "/v1", "--served-model", transformers_server.name,
                     "--tokenizer", str(real_model), "--task", "passkey", "--lengths", "200", "--trials", "2",
                     "--retries", "3", "-q", "--out", str(tmp_path / "out")]) == 0
    got = records(tmp_path / "out" / "passkey")
    assert len(got) == 2 and len({r["id"] for r in got}) == 2  # none lost, none twice
    assert len(proxy.tries) == 2 and all(len(t) == 3 for t in proxy.tries.values())
    assert sorted(proxy.forwarded) == sorted(proxy.tries)  # each sample reached the server once
    assert transformers_server.requests_received() - before == 1 + 2  # the probe's one-token request + 2
    for t in proxy.tries.values():
        assert t[1] - t[0] >= 1.0  # Retry-After honoured
    document = json.loads((tmp_path / "out" / RESULTS_FILE).read_text())
    assert document["model"]["retries"] == 4  # 2 samples x (429, 503)
    assert "2 requests answered, 4 retried" in capsys.readouterr().out


def test_endpoints_probe_prints_what_the_server_can_do(standin_model, transformers_server, capsys):
    with ThreadServer(standin_app("sglang", standin_model)) as server:
        assert main(["endpoints", "probe", server.url + "/v1"]) == 0
    out = capsys.readouterr().out
    for line in (f"models: {STANDIN_NAME}", "token prompts: yes", "prompt logprobs: yes (sglang)",
                 "tokenizer endpoints: yes", "server: sglang stand-in", "context: 8192"):
        assert line in out, (line, out)
    argv = ["endpoints", "probe", transformers_server.url, "--served-model", transformers_server.name]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "not listed; answered a one-token request" in out and "tokenizer endpoints: no" in out
    assert "not asked (no tokenizer" in out
    assert main([*argv, "--tokenizer", transformers_server.name]) == 0
    out = capsys.readouterr().out
    assert "token prompts: no" in out and "prompt logprobs: no" in out


def test_server_tokenizer_requests_pass_the_key_mask(standin_model, monkeypatch):
    key = "sk-standin-key-5e6f7a8b9c"
    monkeypatch.setenv("LCTX_ENDPOINT_KEY_T", key)
    app = FastAPI()

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict:
        return {"tokens": [1, 2], "count": 2, "note": request.headers.get("authorization")}

    @app.post("/detokenize")
    async def detokenize(request: Request) -> dict:
        return {"prompt": f"echo {request.headers.get('authorization')}"}

    with ThreadServer(app) as server:
        spec = EndpointSpec(server.url + "/v1", "m", None, 64, api_key_env="LCTX_ENDPOINT_KEY_T")
        tok = ServerTokenizer(spec)
        assert tok.decode([1, 2]) == "echo Bearer ***"


def test_a_server_that_fails_is_reported_as_failing_with_its_own_error(capsys):
    """A /v1/models that answers 500 (transformers serve without its hub cache folder) is
    a server that failed, said with its own message and the usual cause, not "not an
    OpenAI-compatible server"; the probe's context is the one `endpoints add` records."""
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> Response:
        return Response(json.dumps({"error": {"message": "[Errno 2] No such file or directory: '/root/.cache/"
                                                        "huggingface/hub'"}}), status_code=500,
                        media_type="application/json")

    with ThreadServer(app) as server:
        assert main(["endpoints", "probe", f"{server.url}/v1", "--served-model", "m"]) != 0
    err = capsys.readouterr().err
    assert "answered HTTP 500, a server error: [Errno 2] No such file or directory" in err
    assert "hub cache folder does not exist" in err and "not an OpenAI-compatible server" not in err
