"""What a served model or judge sends back is bounded and checked (clients/endpoint/client.py,
engine.py), against a real misbehaving server on loopback (uvicorn in a thread, one per module):
its behaviour is chosen by the model name asked for.

- `drip`: headers, then one byte every 0.5 s: the request ends at its deadline (timeout_s), not
  when the server stops;
- `huge`: 50 MB of content for max_tokens 8: reading stops at the byte limit, the sample fails
  naming it; `chatty`: content far beyond max_tokens but within the limit: cut to the budget and
  recorded as the server's overrun; `overthink`: a think block far beyond its budget and usage
  claiming 52,428,800 reasoning tokens: cut, and the record never claims more than the budget;
- `list`, `number`, `null`, `no-choices`, `array`: answers of the wrong shape: a clear failure
  naming the server's answer after the retries, never an AttributeError."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from checkpoints.errors import EndpointUnavailable
from checkpoints.requests import GenerateRequest
from checkpoints.thinking import SERVED_FALLBACK, ThinkPlan
from clients.endpoint.client import Client, answer_limit
from clients.endpoint.engine import EndpointEngine, ServedModel
from clients.endpoint.options import EndpointSpec
from clients.endpoint.probe import Capabilities
from clients.endpoint.tokenizer import ServerTokenizer, load_endpoint_tokenizer
from tests.helpers import ThreadServer, tiny_checkpoint

pytestmark = pytest.mark.integration  # a server on loopback

HUGE = 50 << 20


def chat_answer(content: object, reasoning: object = None, usage: dict | None = None) -> dict:
    message = {"role": "assistant", "content": content, **({"reasoning_content": reasoning} if reasoning else {})}
    return {"model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            **({"usage": usage} if usage else {})}


def misbehaving_app(asked: list[str]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await request.json()
        model = body["model"]
        asked.append(model)
        if model == "drip":
            async def drip() -> Iterator[bytes]:
                yield b'{"choices": [{"message": {"content": "'
                for _ in range(600):
                    await asyncio.sleep(0.5)
                    yield b"a"
            return StreamingResponse(drip(), media_type="application/json")
        if model == "huge":
            async def huge() -> Iterator[bytes]:
                yield b'{"choices": [{"message": {"content": "'
                for _ in range(HUGE >> 20):
                    yield b"x" * (1 << 20)
                yield b'"}}]}'
            return StreamingResponse(huge(), media_type="application/json")
        shapes = {"list": chat_answer([{"type": "text", "text": "7"}]), "number": chat_answer(7),
                  "null": chat_answer(None), "no-choices": {"model": "m", "choices": []},
                  "array": [chat_answer("7")], "ok": chat_answer("The pass key is 7."),
                  "chatty": chat_answer("word " * 2000),
                  "overthink": chat_answer("7", reasoning="hmm " * 5000,
                                           usage={"completion_tokens_details": {"reasoning_tokens": 52_428_800}}),
                  "overclaim": chat_answer("7", reasoning="short thought",
                                           usage={"completion_tokens_details": {"reasoning_tokens": 52_428_800}})}
        return JSONResponse(shapes[model])

    @app.post("/tokenize")
    async def tokenize() -> Response:
        async def huge() -> Iterator[bytes]:
            yield b'{"tokens": ['
            for _ in range(HUGE >> 20):
                yield b"1," * (1 << 19)
            yield b"1]}"
        return StreamingResponse(huge(), media_type="application/json")

    return app


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[ThreadServer, list[str]]]:
    asked: list[str] = []
    with ThreadServer(misbehaving_app(asked)) as srv:
        yield srv, asked


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("tok") / "tiny")  # a byte tokenizer: a token per byte


def engine(server: ThreadServer, tokenizer_dir: Path, model: str, **spec: object) -> EndpointEngine:
    fields = {"timeout_s": 2.0, "max_retries": 1, "backoff_s": 0.01, **spec}
    endpoint = EndpointSpec(server.url + "/v1", model, str(tokenizer_dir), 4096, "chat", **fields)
    return EndpointEngine(ServedModel(endpoint, Capabilities([model], False, False),
                                      load_endpoint_tokenizer(tokenizer_dir)))


def ask(e: EndpointEngine, max_new_tokens: int = 8, budget: int | None = None):
    plan = ThinkPlan(SERVED_FALLBACK, budget, (1,)) if budget else None
    return e.generate_until([GenerateRequest((72, 105), max_new_tokens=max_new_tokens, think=plan)])[0]


def test_a_dripping_server_is_cut_off_at_the_deadline(server, tokenizer_dir) -> None:
    srv, _ = server
    started = time.perf_counter()
    with pytest.raises(EndpointUnavailable, match=r"did not answer after 2 tries .*no whole answer within 2 s"):
        ask(engine(srv, tokenizer_dir, "drip"))
    took = time.perf_counter() - started
    assert took < 2 * 2.0 + 1.5, took  # two tries of 2 s each, not the 300 s the server would drip


def test_a_huge_answer_is_not_read_past_its_limit(server, tokenizer_dir) -> None:
    srv, _ = server
    limit = answer_limit("/chat/completions", {"max_tokens": 8})
    assert limit < 1 << 20
    started = time.perf_counter()
    with pytest.raises(EndpointUnavailable, match=rf"gave no usable answer .*passed {limit:,} bytes") as raised:
        ask(engine(srv, tokenizer_dir, "huge"))
    assert time.perf_counter() - started < 5
    assert 'began {"choices"' in str(raised.value) and len(str(raised.value)) < 1200
    # the server's /tokenize (ServerTokenizer: the synchronous client) is bounded the same way
    started = time.perf_counter()
    with pytest.raises(EndpointUnavailable, match=r"did not answer /tokenize after 1 tries .*passed"):
        ServerTokenizer(EndpointSpec(srv.url + "/v1", "m", None, 64, timeout_s=2, max_retries=0))
    assert time.perf_counter() - started < 5


def test_an_answer_beyond_its_budget_is_cut_and_flagged(server, tokenizer_dir) -> None:
    srv, _ = server
    got = ask(engine(srv, tokenizer_dir, "chatty"), max_new_tokens=8)
    assert got.text == "word wor" and len(got.token_ids) == 8 and got.stop_reason == "length"
    assert got.overrun and "10000 tokens" in got.overrun and "max_tokens 8" in got.overrun
    fine = ask(engine(srv, tokenizer_dir, "ok"), max_new_tokens=32)
    assert fine.text == "The pass key is 7." and fine.overrun is None


def test_thinking_beyond_its_budget_is_cut_and_never_claimed(server, tokenizer_dir) -> None:
    srv, _ = server
    got = ask(engine(srv, tokenizer_dir, "overthink"), max_new_tokens=8, budget=64)
    assert got.text == "7" and got.thinking == ("hmm " * 16) and got.thinking_tokens == 64
    assert "think block of 20000 tokens" in got.overrun
    claimed = ask(engine(srv, tokenizer_dir, "overclaim"), max_new_tokens=8, budget=64)
    assert claimed.thinking == "short thought" and claimed.thinking_tokens == 64
    assert "52428800 thinking tokens claimed" in claimed.overrun


@pytest.mark.parametrize(("model", "said"), [
    ("list", r"choices\[0\].message.content is of type list where the answer's text is needed: .*\"type\": \"text\""),
    ("number", r"choices\[0\].message.content is of type int where the answer's text is needed"),
    ("null", r"choices\[0\].message.content is null where the answer's text is needed"),
    ("no-choices", r"no choices\[0\] object: \{\"model\": \"m\", \"choices\": \[\]\}"),
    ("array", r"the answer is a JSON list, not an object"),
])
def test_an_answer_of_the_wrong_shape_is_retried_then_named(server, tokenizer_dir, model: str, said: str) -> None:
    srv, asked = server
    before = asked.count(model)
    with pytest.raises(EndpointUnavailable, match=rf"gave no usable answer to /chat/completions after 2 tries.*{said}"):
        ask(engine(srv, tokenizer_dir, model))
    assert asked.count(model) - before == 2  # retried as a server error


def test_the_limit_follows_the_request(server) -> None:
    assert answer_limit("/completions", {"max_tokens": 1000}) == answer_limit("/completions", {"max_tokens": 0}) \
        + 32_000
    scored = answer_limit("/completions", {"max_tokens": 1, "prompt": list(range(1000)), "prompt_logprobs": 1})
    assert scored > 1000 * 512  # a prompt's log-probabilities: an entry per token
    assert answer_limit("/detokenize", {"tokens": [1] * 100}) > answer_limit("/detokenize", {"tokens": []})
    srv, _ = server

    async def get() -> int:
        async with Client(EndpointSpec(srv.url + "/v1", "m", None, 64, timeout_s=2)) as c:
            return (await c.get("/chat/completions")).status_code  # GET of a POST route: answered, bounded

    assert asyncio.run(get()) == 405


def test_a_run_records_the_overrun_and_a_judge_never_claims_more_than_its_budget(server, tokenizer_dir,
                                                                                 tmp_path: Path) -> None:
    """The record of a sample whose answer was cut says so; a judge's think block beyond its budget
    is cut, its thinking tokens the budget at most, in the judgment and in the cache."""
    from evaluators.judges import Judge, Judging, JudgmentCache
    from evaluators.registry import parse_task
    from evaluators.suite import run_task

    srv, _ = server
    chatty = engine(srv, tokenizer_dir, "chatty")
    task = parse_task({"name": "passkey", "lengths": [128], "trials": 1, "max_new_tokens": 8})
    run_task(chatty.served, task, tmp_path / "out", engine=chatty)
    (record,) = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert record["prediction"] == "word wor" and "cut to 8" in record["server_overrun"]
    judged = engine(srv, tokenizer_dir, "overthink")
    judge = Judge("j", "f" * 64, "endpoint", judged.served, judged, {"served_model": "overthink"})
    judging = Judging(judge, JudgmentCache(tmp_path / "cache"), max_new_tokens=8, thinking_budget=64)
    (judgment,) = judging.ask([[{"role": "user", "content": "CORRECT or INCORRECT?"}]])
    assert judgment["thinking_tokens"] == 64 and judgment["answer"] == "7" and "think block" in judgment["overrun"]
    assert len(judgment["thinking"]) == 64
    again = Judging(judge, JudgmentCache(tmp_path / "cache"), max_new_tokens=8, thinking_budget=64)
    assert again.ask([[{"role": "user", "content": "CORRECT or INCORRECT?"}]])[0]["cached"] is True
